"""Error control of a sweep that adds seeds where a verdict is open (``seeding:`` in its file).

The sweep plans ``K`` looks before it runs (``SweepSpec.looks``): look ``j`` reads the first
``n_j`` seeds of every cell it judges, ``n_0`` the grid's own seeds, each later look ``batch``
more, the last ``max_seeds``. Look ``j`` judges each claim at ``alpha_j`` (``SweepSpec.look_alphas``:
the file's ``seeding.alpha_split``, summing to alpha, else ``alpha / K``), and the report shows each
comparison at the look that decided it, at that look's level: Bonferroni over the planned looks.

Why that holds under optional stopping: whichever look a comparison is finally judged at, its
decision is the decision of the fixed-size test on the first ``n_j`` seeds for some planned ``j``.
So a false decision (a decisive verdict where the truth is the other way, or none) implies a
false decision of at least one of the ``K`` fixed-size tests, look ``j``'s at level ``alpha_j``: the
union is at most ``sum_j alpha_j = alpha``, whatever rule chose when to stop or which cells to
extend. It needs only that the looks, their seeds and their levels are fixed before any result is
seen, which the sweep file fixes. docs/verdicts.md ("Adding seeds where a verdict is open") gives the argument;
tests/test_verdict_calibration.py measures it; docs/verdicts-history.md has the main job's calibration when it ran looks.
"""

from __future__ import annotations

# the sweep layer plans the looks without the report; the report reads them from there
from cemlab.sweeps.look_levels import ALPHA, look_alpha, split_text  # noqa: F401


def sweep_alphas(spec, scale: str, trials: list, alpha: float = ALPHA) -> list[float]:
    """The level of each planned look of ``spec`` at ``scale`` for its grid ``trials``
    (``SweepSpec.look_alphas``); ``[alpha]`` for a sweep without ``seeding`` there; the level of its
    confirmation stage (``confirmation.alpha``) where it has one at the scale."""
    if trials and getattr(spec, "confirmation", None) is not None and spec.confirmation_budget(scale, trials):
        return [min(alpha, spec.confirmation.alpha)]
    if getattr(spec, "seeding", None) is None or not trials:
        return [alpha]
    return spec.look_alphas(scale, trials)


def sweep_alpha(spec, scale: str, trials: list, alpha: float = ALPHA) -> float:
    """The level a report judges ``spec``'s claims at where it does not replay the looks (a claim
    that reads this sweep beside its own): the strictest of its looks' levels (``alpha / K`` with
    the even split; ``alpha`` itself for a sweep without ``seeding`` at the scale)."""
    return min(sweep_alphas(spec, scale, trials, alpha))


def claim_alpha(claim, grids, scale: str, alpha: float = ALPHA) -> float:
    """The level a claim is judged at in any report that does not replay its sweep's looks: the
    smallest :func:`sweep_alpha` of the sweeps its entry names (``claim.sweeps``) at ``scale``; a
    sweep that does not load or expand there counts as unseeded."""
    out = alpha
    for sweep in getattr(claim, "sweeps", ()):
        try:
            spec = grids.spec(sweep)
            out = min(out, sweep_alpha(spec, scale, grids.trials(sweep, scale), alpha))
        except ValueError:  # SweepError: not a sweep of this project, or not at this scale
            continue
    return out
