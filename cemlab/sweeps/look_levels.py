"""The level each planned look of a seeded sweep judges at (``seeding:`` in a sweep file): the
sweep layer plans and prints the looks (``cemlab plan``), the report judges them
(``cemlab.report.stats.sequential`` says why the levels hold). Here so that the sweep layer needs no
import of the report. And what ``cemlab sweep`` and ``cemlab plan`` say when the command line's
seed axis turns the file's seeding off (:func:`seeds_given_note`).

Look ``j`` judges at the two-sided level ``alpha_j`` (each one-sided decision at ``alpha_j / 2``):
the file's ``seeding.alpha_split`` for the scale, fixed before any run and summing to ``ALPHA``,
else the even split ``ALPHA / K`` (:func:`look_alpha`). ``SweepSpec.look_alphas`` gives them for a
grid.
"""

from __future__ import annotations

from cemlab.sweeps.sweepfile.load import grid_seeds
from cemlab.sweeps.sweepfile.schema import ALPHA, look_alpha  # noqa: F401 (one definition, in the sweep file's schema)


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


def seeds_given_note(spec, scale: str, trials: list) -> str:
    """The line ``cemlab sweep`` (among its first lines) and ``cemlab plan`` print where the command
    line gave the seed axis (``seed=[...]``) of a sweep whose file would add seeds at ``scale``:
    those seeds run exactly, none added, the claims judged at :data:`ALPHA` (``SweepSpec.looks``);
    "" where the file adds none or its own seed axis runs."""
    if not any(t.seeds_given for t in trials):
        return ""
    seeds = grid_seeds(trials)
    planned = spec.budget_looks(scale, seeds)
    if len(planned) < 2:
        return ""
    return (f"seed=[{','.join(map(str, seeds))}] from the command line: those seeds only, none added where a verdict "
            f"is open, the claims judged at alpha {ALPHA:g} (leave seed= out to run the sweep file's seeding: its own "
            f"seeds, then up to {len(planned[-1])} per cell at {scale} where a verdict is open)")
