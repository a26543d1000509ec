"""The level each planned look of a seeded sweep judges at (``seeding:`` in a sweep file): the
sweep layer plans and prints the looks (``cemlab plan``), the report judges them
(``cemlab.report.sequential`` says why the levels hold). Here so that the sweep layer needs no
import of the report.

Look ``j`` judges at the two-sided level ``alpha_j`` (each one-sided decision at ``alpha_j / 2``):
the file's ``seeding.alpha_split`` for the scale, fixed before any run and summing to ``ALPHA``,
else the even split ``ALPHA / K`` (:func:`look_alpha`). ``SweepSpec.look_alphas`` gives them for a
grid.
"""

from __future__ import annotations

from cemlab.sweeps.spec.schema import ALPHA, look_alpha  # noqa: F401 (one definition, in the sweep file's schema)


def one_sided(alphas: list[float]) -> list[float]:
    """The one-sided level of each look's decisions (half its two-sided level)."""
    return [a / 2 for a in alphas]


def split_text(alphas: list[float]) -> str:
    """How a plan's looks share alpha, for people: ``0.005 + 0.045 = 0.05 (one-sided 0.0025 +
    0.0225)``, or ``alpha 0.05`` for one look."""
    if len(alphas) < 2:
        return f"alpha {alphas[0]:g}" if alphas else f"alpha {ALPHA:g}"
    return (" + ".join(f"{a:.4g}" for a in alphas) + f" = {sum(alphas):.4g} (one-sided "
            + " + ".join(f"{a / 2:.4g}" for a in alphas) + ")")
