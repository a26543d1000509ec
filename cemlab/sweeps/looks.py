"""The level each planned look of a seeded sweep judges at (``seeding:`` in a sweep file): the
sweep layer plans and prints the looks (``cemlab plan``), the report judges them
(``cemlab.report.sequential`` says why the level holds). Here so that the sweep layer needs no
import of the report. And what ``cemlab sweep`` and ``cemlab plan`` say when the command line's
seed axis turns the file's seeding off (:func:`seeds_given_note`)."""

from __future__ import annotations

from cemlab.sweeps.spec.load import grid_seeds

#: The error rate of one claim's decision (two-sided, as ``cemlab.report.verdicts.evaluate`` takes it).
ALPHA = 0.05


def look_alpha(looks: int, alpha: float = ALPHA) -> float:
    """The level each of ``looks`` planned looks (and the final report) judges at: ``alpha / looks``."""
    if looks < 1:
        raise ValueError(f"looks={looks}: a sweep has at least one look (its own seeds)")
    return alpha / looks


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
