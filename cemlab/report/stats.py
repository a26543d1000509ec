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
- ``negligible``: a difference claim (``tol`` = 0) whose whole interval lies inside +-``margin``,
  the claim's smallest effect of interest: whatever its sign, the effect is too small to matter;
- ``inconclusive``: the interval contains ``tol``, or there is one seed only (the numbers are
  still shown, never a yes or no);
- ``not enough runs``: no seed at which every compared cell finished.

An equivalence claim (``side='within'``: |effect| < tol) is judged by two one-sided tests (TOST):
supported when the (1 - 2 alpha) interval lies wholly inside +-tol, contradicted when it lies
wholly outside, inconclusive otherwise (``cemlab.report.verdicts.compare`` passes that level).

Family-wise correction: the k comparisons behind one claim (one step-size condition) are each
judged at level 1 - alpha/k (Bonferroni-adjusted intervals, ``bonferroni_level``).

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
NEGLIGIBLE = "negligible"
NOT_ENOUGH = "not enough runs"
VERDICTS = (SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE, NOT_ENOUGH)

LEVEL = 0.95
METHOD = "paired t-interval over seeds, Bonferroni-adjusted over the claim's comparisons"


def bonferroni_level(k: int, level: float = LEVEL, equivalence: bool = False) -> float:
    """Confidence level of each of ``k`` comparisons so that the family keeps ``level``: 1 - alpha/k;
    for an equivalence (TOST) the two one-sided tests at alpha/k each, i.e. 1 - 2 alpha/k."""
    alpha = (1 - level) / max(int(k), 1)
    return 1 - 2 * alpha if equivalence else 1 - alpha


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


def judge(iv: Interval, tol: float, side: str, margin: float = 0.0) -> str:
    """The verdict of a claim that says ``effect < tol`` (``side='below'``), ``effect > tol``
    (``side='above'``) or ``|effect| < tol`` (``side='within'``, TOST), from the interval; a
    difference claim (tol 0) inside +-``margin`` is ``negligible`` (see the module docstring)."""
    if side not in ("below", "above", "within"):
        raise ValueError(f"side must be 'below', 'above' or 'within', got {side!r}")
    if iv.n == 0:
        return NOT_ENOUGH
    if iv.n < 2 or not iv.finite:
        return INCONCLUSIVE
    lo, hi = iv.low, iv.high
    if side == "within":
        if -tol < lo and hi < tol:
            return SUPPORTED
        return CONTRADICTED if lo > tol or hi < -tol else INCONCLUSIVE
    if tol == 0 and margin > 0 and -margin < lo and hi < margin:
        return NEGLIGIBLE
    if side == "below":
        return SUPPORTED if hi < tol else CONTRADICTED if lo > tol else INCONCLUSIVE
    return SUPPORTED if lo > tol else CONTRADICTED if hi < tol else INCONCLUSIVE


#: How a claim's comparisons make its verdict, by the name its entry gives (``cemlab.paper``).
COMBINE_RULES = {
    "all": "supported when every comparison is supported; contradicted when any is contradicted; negligible when "
           "every comparison is supported or negligible and at least one is negligible; otherwise inconclusive",
    "any": "supported when at least one comparison is supported; contradicted when every comparison is "
           "contradicted; otherwise inconclusive",
}


def combine(verdicts: list[str], rule: str = "all") -> str:
    """A claim's verdict from its comparisons' by ``rule`` (``COMBINE_RULES``); ``not enough runs``
    without any comparison."""
    vs = [v for v in verdicts if v != NOT_ENOUGH]
    if not vs:
        return NOT_ENOUGH
    if rule == "any":
        if SUPPORTED in vs:
            return SUPPORTED
        return CONTRADICTED if all(v == CONTRADICTED for v in vs) else INCONCLUSIVE
    if CONTRADICTED in vs:
        return CONTRADICTED
    if all(v == SUPPORTED for v in vs):
        return SUPPORTED
    return NEGLIGIBLE if all(v in (SUPPORTED, NEGLIGIBLE) for v in vs) else INCONCLUSIVE
