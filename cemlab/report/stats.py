"""Paired comparisons over seeds: the effect, its 95% confidence interval and the verdict word.

A claim compares two (or more) grid cells that differ in one setting. Runs with the same seed see
the same data order and, where the shapes allow, the same initial embedding, so the comparison is
made per seed (a *paired* difference) and the seeds are the replicates:

    d_s = f(values of the compared cells at seed s)        e.g. ppl_B(s) / ppl_A(s) - 1
    effect = mean_s d_s,   95% CI = effect +- t_{0.975, n-1} * sd(d) / sqrt(n)     (Student t)

The interval is a t-interval over the paired differences (``METHOD``), not a bootstrap: with the
2-5 seeds a sweep affords, a bootstrap's percentile interval is too narrow and too coarse. Only
seeds at which every compared cell finished enter; fewer than two give no interval.

Verdict of one comparison against the claim's tolerance ``tol`` on the side the claim states:

- ``supported``: the whole interval is on the claim's side of ``tol``;
- ``contradicted``: the whole interval is on the other side;
- ``inconclusive``: the interval contains ``tol``, or there is one seed only (the numbers are
  still shown, never a yes or no);
- ``not enough runs``: no seed at which every compared cell finished.

scipy is imported inside :func:`t_interval`, so ``cemlab report`` refuses a bad sweep name without
loading it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
NOT_ENOUGH = "not enough runs"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_ENOUGH)

LEVEL = 0.95
METHOD = "paired t-interval over seeds"


@dataclass(frozen=True)
class Interval:
    """Mean of the paired differences and its two-sided confidence interval (NaN when n < 2)."""

    effect: float
    low: float
    high: float
    n: int

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def t_interval(diffs, level: float = LEVEL) -> Interval:
    """Student-t interval of the mean of ``diffs`` (non-finite entries dropped)."""
    from scipy import stats

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = int(len(d))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(d.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(d.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def judge(iv: Interval, tol: float, side: str) -> str:
    """The verdict of a claim that says ``effect < tol`` (``side='below'``) or ``effect > tol``
    (``side='above'``), from the interval (see the module docstring)."""
    if side not in ("below", "above"):
        raise ValueError(f"side must be 'below' or 'above', got {side!r}")
    if iv.n == 0:
        return NOT_ENOUGH
    if iv.n < 2 or not iv.finite:
        return INCONCLUSIVE
    lo, hi = iv.low, iv.high
    if side == "below":
        return SUPPORTED if hi < tol else CONTRADICTED if lo > tol else INCONCLUSIVE
    return SUPPORTED if lo > tol else CONTRADICTED if hi < tol else INCONCLUSIVE


def combine(verdicts: list[str]) -> str:
    """A claim made 'at every size' (or every setting): contradicted if any comparison is,
    supported if all are, else inconclusive; ``not enough runs`` without any comparison."""
    vs = [v for v in verdicts if v != NOT_ENOUGH]
    if not vs:
        return NOT_ENOUGH
    if CONTRADICTED in vs:
        return CONTRADICTED
    return SUPPORTED if all(v == SUPPORTED for v in vs) else INCONCLUSIVE
