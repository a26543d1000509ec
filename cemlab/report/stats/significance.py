"""The tests of a paired comparison and the verdict words: the one-sided paired t-test and the
exact sign test against a tolerance (``t_pvalues``, ``sign_pvalues``), the descriptive t interval
(``t_interval`` at ``LEVEL``) and how a claim's comparisons' verdicts combine (``combine``). The
method: ``cemlab.report.stats`` and ``docs/verdicts.md``."""

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

#: The level of the descriptive interval (``t_interval``, ``Check.iv``): a second mark beside the
#: interval that decided (``decision_bounds``), comparable across sweeps judged at different levels.
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of the paired differences and its two-sided confidence interval (NaN when n < 2)."""

    effect: float
    low: float
    high: float
    n: int
    sd: float = math.nan  # sample sd of the paired differences (ddof=1)
    note: str = ""  # why there is no interval although n >= 2 (e.g. zero spread)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def t_interval(diffs, level: float = LEVEL) -> Interval:
    """Student-t interval of the mean of ``diffs`` (non-finite entries dropped)."""
    from scipy.special import stdtrit  # Student t's quantile function (scipy.stats.t.ppf)

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = int(len(d))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(d.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    sd = float(d.std(ddof=1))
    if not sd > 1e-12 * max(1.0, abs(mean)):
        return Interval(mean, math.nan, math.nan, n, 0.0, ZERO_SPREAD.format(n=n))
    half = float(stdtrit(n - 1, 0.5 + level / 2)) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, sd)


#: Why a comparison whose paired differences are all equal decides nothing.
ZERO_SPREAD = ("the {n} paired differences are identical (zero spread): a t interval would have zero width, so it "
               "decides nothing")


def t_pvalues(diffs, tol: float) -> tuple[float, float]:
    """One-sided p-values of the paired t-test against ``tol``: (p that the mean is below ``tol``,
    p that it is above); NaN with fewer than two finite differences or zero spread."""
    from scipy.special import stdtr  # Student t's distribution function (scipy.stats.t.cdf without its overhead)

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n < 2:
        return math.nan, math.nan
    sd = float(d.std(ddof=1))
    if not sd > 1e-12 * max(1.0, abs(float(d.mean()))):
        return math.nan, math.nan
    t = (float(d.mean()) - tol) / (sd / math.sqrt(n))
    return float(stdtr(n - 1, t)), float(stdtr(n - 1, -t))


def sign_pvalues(diffs, tol: float) -> tuple[float, float]:
    """Exact one-sided sign-test p-values against ``tol`` (ties dropped): (p below, p above). For a
    discrete effect such as an optimum on a grid, where a t interval can have zero width."""
    from scipy.special import bdtr  # the binomial distribution function (scipy.stats.binom.cdf)

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    up, down = int((d > tol).sum()), int((d < tol).sum())
    m = up + down
    if m == 0:
        return 1.0, 1.0
    return float(bdtr(up, m, 0.5)), float(bdtr(down, m, 0.5))


#: How a claim's comparisons make its verdict, by the name its entry gives (``cemlab.paper``).
COMBINE_RULES = {
    "all": "supported when every comparison is supported; contradicted when any is contradicted; negligible when "
           "every comparison is supported or negligible and at least one is negligible; otherwise inconclusive",
    "any": "supported when at least one comparison is supported; contradicted when every comparison is "
           "contradicted; otherwise inconclusive",
}


def combine(verdicts: list[str], rule: str = "all") -> str:
    """A claim's verdict from its comparisons' words by ``rule`` (``COMBINE_RULES``), as ``decide``
    combines them: a planned comparison without runs (``not enough runs``) leaves an ``all`` claim at
    best ``not enough runs`` and never counts as decided; ``not enough runs`` without any comparison."""
    vs = [v for v in verdicts if v != NOT_ENOUGH]
    if not vs:
        return NOT_ENOUGH
    gap = len(vs) < len(verdicts)
    if rule == "any":
        if SUPPORTED in vs:
            return SUPPORTED
        return NOT_ENOUGH if gap else CONTRADICTED if all(v == CONTRADICTED for v in vs) else INCONCLUSIVE
    if CONTRADICTED in vs:
        return CONTRADICTED
    if all(v in (SUPPORTED, NEGLIGIBLE) for v in vs):
        return NOT_ENOUGH if gap else SUPPORTED if all(v == SUPPORTED for v in vs) else NEGLIGIBLE
    return INCONCLUSIVE


