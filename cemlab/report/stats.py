"""Paired comparisons over seeds on the log scale: the effect, its interval and the verdict word.

A claim compares two (or more) grid cells that differ in one setting. Runs with the same seed see
the same data order and, where the shapes allow, the same initial embedding, so the comparison is
made per seed (a *paired* difference) and the seeds are the replicates. The difference is taken on
the log scale of the metric (``cemlab.report.pairing``):

    d_s = sum_i c_i log(value of cell i at seed s)     e.g. log(ppl_B(s) / ppl_A(s)) = CE_B(s) - CE_A(s)
    effect = mean_s d_s,   interval = effect +- t_{1 - a, n-1} * sd(d) / sqrt(n)     (Student t)

shown as the relative change exp(.) - 1. The interval is a t-interval over the paired differences,
not a bootstrap: with the 2-8 seeds a sweep affords, a bootstrap's percentile interval is too
narrow and too coarse. Only seeds at which every compared cell finished enter; fewer than two give
no interval.

**The levels.** The *decision* uses one-sided p-values (``t_pvalues``; ``sign_pvalues`` for a
discrete effect), each held to half the claim's level: alpha / 2 = 2.5% in a sweep without seeding,
alpha / (2K) at each of the K planned looks of a seeded sweep (``cemlab.report.sequential``), and
Holm's step level where Holm applies. Where a position may be one of several cells (learning rates,
the best of several variants), ``every_choice_p`` tests every choice, its p-value multiplied by the
number of free choices. The interval shown on the page is the 95% (``LEVEL``) t-interval of the
differences (with candidates: of the leave-one-seed-out differences, ``pairing``); it agrees with
the decision only for a comparison without choices judged at 2.5% one-sided. Where the looks,
Holm or the every-choice factor apply, the decision is stricter than that interval, and the p-values
and the levels they were held to (comparisons.csv) are what decided. The words:

- ``supported``: the claim's side of its tolerance (below, above, or inside +-tol by two one-sided
  tests);
- ``contradicted``: the other side;
- ``negligible``: a difference claim (tolerance 0) whose effect lies inside +-``margin``, the claim's
  smallest effect of interest, by two one-sided tests;
- ``inconclusive``: none of these, in particular one seed only or zero spread (``ZERO_SPREAD``);
- ``not enough runs``: no usable seed at which every compared cell finished.

Where a position of a comparison may be one of several cells (learning rates, the best of several
variants), ``every_choice_p`` tests every choice; ``decide`` combines a claim's planned comparisons:
intersection-union for ``all`` claims, Holm for their contradiction and for ``any`` claims
(``docs/verdicts.md``).

scipy is imported inside the functions, so ``cemlab report`` refuses a bad sweep name without
loading it. They call ``scipy.special``'s distribution functions (tests/test_claims_stats.py holds
them to ``scipy.stats``): importing ``scipy.stats`` took 0.2-0.5 s of every report and every look.
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


# ----------------------------------------------------------------------------------------------
# Decisions from p-values: every choice tested, intersection-union for "all", Holm for the rest
# ----------------------------------------------------------------------------------------------

#: The family's two-sided error rate; every one-sided decision (supported, contradicted,
#: negligible) is held to half of it, so that a 95% interval and the decision agree.
ALPHA = 1 - LEVEL


@dataclass(frozen=True)
class Evidence:
    """One comparison's one-sided p-values: that the claim's side holds (``p_claim``), that the
    other side holds (``p_against``) and, for a difference claim, that the effect lies inside
    +-margin (``p_negligible``). NaN-free: an undecidable test has p = 1."""

    p_claim: float = 1.0
    p_against: float = 1.0
    p_negligible: float = 1.0


def _p(x: float) -> float:
    return float(x) if math.isfinite(x) else 1.0


def every_choice_p(pvals: dict[tuple, float], coefs, n_choices, direction: str) -> float:
    """p-value that the *tuned* effect sum_i c_i min_j mu_ij lies on ``direction`` ('below' or
    'above') of the tolerance, from the p-values of every choice (one candidate j per position i:
    a learning rate, or one of several cells the claim may pick from). For 'below' a position with
    c_i > 0 may be chosen (any one choice below bounds the tuned effect), one with c_i <= 0 must hold
    at every choice; for 'above' the reverse. The chosen positions pay Bonferroni over their choices.
    Nothing is selected on the seeds that judge: every choice is tested."""
    sign = 1 if direction == "below" else -1
    free = [i for i, c in enumerate(coefs) if c * sign > 0]
    worst: dict[tuple, float] = {}
    for combo, p in pvals.items():
        key = tuple(combo[i] for i in free)
        worst[key] = max(worst.get(key, 0.0), _p(p))
    if not worst:
        return 1.0
    m = int(np.prod([n_choices[i] for i in free])) if free else 1
    return min(1.0, min(worst.values()) * m)


def comparison_evidence(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, tol: float, side: str,
                        margin: float = 0.0, discrete: bool = False) -> Evidence:
    """The ``Evidence`` of a comparison from the per-seed differences of every choice (``diffs_of``:
    choice -> differences), on the claim's ``side`` of ``tol`` ('below', 'above', or 'within':
    |effect| < tol, two one-sided tests). ``discrete``: an exact sign test instead of the t-test."""
    test = sign_pvalues if discrete else t_pvalues

    def p(direction: str, at: float) -> float:
        ps = {c: test(d, at)[0 if direction == "below" else 1] for c, d in diffs_of.items()}
        return every_choice_p(ps, coefs, n_choices, direction)

    if side == "within":
        return Evidence(max(p("below", tol), p("above", -tol)), min(1.0, 2 * min(p("above", tol), p("below", -tol))))
    against = "above" if side == "below" else "below"
    neg = max(p("below", margin), p("above", -margin)) if tol == 0 and margin > 0 else 1.0
    return Evidence(p(side, tol), p(against, tol), neg)


def holm(pvals: list[float], alpha: float) -> list[bool]:
    """Holm's step-down: which of ``pvals`` are rejected at family-wise level ``alpha``."""
    order = sorted(range(len(pvals)), key=lambda i: pvals[i])
    out = [False] * len(pvals)
    for rank, i in enumerate(order):
        if pvals[i] > alpha / (len(pvals) - rank):
            break
        out[i] = True
    return out


def holm_levels(pvals: list[float], alpha: float) -> list[float]:
    """The level each p-value was compared with in Holm's procedure (alpha / (k - rank))."""
    order = sorted(range(len(pvals)), key=lambda i: pvals[i])
    out = [math.nan] * len(pvals)
    for rank, i in enumerate(order):
        out[i] = alpha / (len(pvals) - rank)
    return out


def decide(evidence: list[Evidence | None], rule: str = "all", alpha: float = ALPHA) -> tuple[str, list[str], list[float]]:
    """A claim's verdict from its planned comparisons (None: planned but without runs), each word
    of its comparisons and the level each comparison's deciding test was held to.

    ``all`` (``COMBINE_RULES``): supported by intersection-union (every comparison supported, each at
    alpha/2); contradicted when Holm over the k planned comparisons rejects one (p_against);
    negligible when every comparison is supported or negligible and one is negligible (each at
    alpha/2). ``any``: supported when Holm over the k planned comparisons rejects one (p_claim);
    contradicted when every comparison is contradicted (intersection-union). A planned comparison
    without runs leaves an ``all`` claim at best ``not enough runs``."""
    a = alpha / 2
    k = len(evidence)
    have = [e for e in evidence if e is not None]
    if not have:
        return NOT_ENOUGH, [NOT_ENOUGH] * k, [math.nan] * k
    gap = len(have) < k
    fill = [e if e is not None else Evidence() for e in evidence]
    if rule == "any":
        sup = holm([e.p_claim for e in fill], a)
        levels = holm_levels([e.p_claim for e in fill], a)
        con = [e.p_against <= a for e in fill]
    else:
        sup = [e.p_claim <= a for e in fill]
        con = holm([e.p_against for e in fill], a)
        levels = holm_levels([e.p_against for e in fill], a)
    neg = [e.p_negligible <= a for e in fill]
    words = [NOT_ENOUGH if e is None else SUPPORTED if s else CONTRADICTED if c else NEGLIGIBLE if n else INCONCLUSIVE
             for e, s, c, n in zip(evidence, sup, con, neg)]
    if rule == "any":
        if any(sup):
            return SUPPORTED, words, levels
        return (CONTRADICTED if all(con) and not gap else NOT_ENOUGH if gap else INCONCLUSIVE), words, levels
    if any(con):
        return CONTRADICTED, words, levels
    if all(w in (SUPPORTED, NEGLIGIBLE) for w in words if w != NOT_ENOUGH):
        if gap:
            return NOT_ENOUGH, words, levels
        return (SUPPORTED if all(sup) else NEGLIGIBLE), words, levels
    return INCONCLUSIVE, words, levels
