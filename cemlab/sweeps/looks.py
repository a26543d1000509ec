"""The level each planned look of a seeded sweep judges at (``seeding:`` in a sweep file): the
sweep layer plans and prints the looks (``cemlab plan``), the report judges them
(``cemlab.report.sequential`` says why the level holds). Here so that the sweep layer needs no
import of the report."""

from __future__ import annotations

#: The error rate of one claim's decision (two-sided, as ``cemlab.report.verdicts.evaluate`` takes it).
ALPHA = 0.05


def look_alpha(looks: int, alpha: float = ALPHA) -> float:
    """The level each of ``looks`` planned looks (and the final report) judges at: ``alpha / looks``."""
    if looks < 1:
        raise ValueError(f"looks={looks}: a sweep has at least one look (its own seeds)")
    return alpha / looks
