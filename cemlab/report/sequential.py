"""Error control of a sweep that adds seeds where a verdict is open (``seeding:`` in its file).

The sweep plans ``K`` looks before it runs (``SweepSpec.looks``): look ``j`` reads the first
``n_j`` seeds of every cell it judges, ``n_0`` the grid's own seeds, each later look ``batch``
more, the last ``max_seeds``. Every look, and the report after the last, judges each claim at
``alpha / K`` (:func:`look_alpha`): Bonferroni over the planned looks.

Why that holds under optional stopping: whichever look a comparison is finally judged at, its
decision is the decision of the fixed-size test on the first ``n_j`` seeds for some planned ``j``.
So a false decision (a decisive verdict where the truth is the other way, or none) implies a
false decision of at least one of the ``K`` fixed-size tests, each at level ``alpha / K``: the
union is at most ``alpha``, whatever rule chose when to stop or which cells to extend. It needs
only that the looks and their seeds are fixed before any result is seen, which the sweep file
fixes. docs/verdicts.md ("Adding seeds where a verdict is open") gives the argument and the
calibration (tests/test_seeding_calibration.py) that measures it.
"""

from __future__ import annotations

from cemlab.sweeps.looks import ALPHA, look_alpha  # noqa: F401 (the sweep layer plans the looks without the report)


def sweep_alpha(spec, scale: str, trials: list, alpha: float = ALPHA) -> float:
    """The level the report of ``spec`` at ``scale`` judges at: ``alpha`` over the planned looks of
    its grid ``trials`` (``alpha`` itself for a sweep without ``seeding`` there)."""
    seeding = getattr(spec, "seeding", None)
    if seeding is None or not trials:
        return alpha
    return look_alpha(len(spec.looks(scale, trials)), alpha)


def claim_alpha(claim, grids, scale: str, alpha: float = ALPHA) -> float:
    """The level a claim is judged at in any report: the smallest :func:`sweep_alpha` of the sweeps
    its entry names (``claim.sweeps``) at ``scale``; a sweep that does not load or expand there
    counts as unseeded."""
    out = alpha
    for sweep in getattr(claim, "sweeps", ()):
        try:
            spec = grids.spec(sweep)
            out = min(out, sweep_alpha(spec, scale, grids.trials(sweep, scale), alpha))
        except ValueError:  # SweepError: not a sweep of this project, or not at this scale
            continue
    return out
