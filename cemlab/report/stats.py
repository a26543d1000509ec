"""Paired comparisons over seeds on the log scale: the tests, the interval that decided, the verdict word.

A claim compares two (or more) grid cells that differ in one setting. Runs with the same seed see
the same data order and, where the shapes allow, the same initial embedding, so the comparison is
made per seed (a *paired* difference) and the seeds are the replicates. The difference is a linear
combination of the compared cells' **log** metrics (``cemlab.report.pairing.compare``)::

    d_s = sum_i c_i log(value of cell i at seed s)      e.g. log ppl_B(s) - log ppl_A(s) = log(ppl_B / ppl_A)
    effect = mean_s d_s        shown as the relative change exp(effect) - 1

A seed enters where every compared cell has an outcome there: a finished run, or a worst outcome (a
divergence, a metric that is not finite or no better than chance: ``pairing.outcomes``), which
ranks below every finished run and is scored as the worst finished run of the choice
(``paired_diffs_by_seed``). Tolerances and margins are relative changes compared as log(1 + tol).

**Tests.** One-sided paired t-tests against the tolerance (``t_pvalues``; an exact sign test,
``sign_pvalues``, for an effect that takes few values). Where a position of a comparison may be one
of several cells (learning rates, the best of several variants) ``every_choice_p`` tests every
choice, with a Bonferroni factor over the choices that may be picked. ``decide`` combines a claim's
planned comparisons: intersection-union for the support of ``all`` claims, Holm over the k planned
comparisons for their contradiction and for the support of ``any`` claims.

**Levels.** ``decide`` takes the claim's two-sided error rate ``alpha`` (``ALPHA`` = 0.05 for a sweep
without seeding; a seeded sweep's look judges at its own share of it, ``cemlab.sweeps.looks``) and
holds each one-sided test to ``alpha / 2`` (Holm's step level where Holm applies); a choice among
``m`` candidates is tested at a further ``1 / m``.

**The interval shown decides** (``decision_bounds``): each end is the one-sided confidence bound
of the test that decides on that side, at the level that test was held to, the every-choice factor
included (for a tuned comparison: the smallest, over the choices that may be picked, of the largest
bound over the others). So a comparison is supported exactly when the claim's end of its interval
is beyond the tolerance, and contradicted exactly when the other end is; the interval's coverage is
``1 - alpha_low - alpha_high`` (``Bounds.level``: 97.5% at one-sided 1.25% each way). A negligible
verdict is the interval inside +-margin at the TOST level, an equivalence (TOST) claim the interval
inside +-tol; an exact sign test has no interval, and its row says what decided. ``t_interval``
at ``LEVEL`` (95%) is only the descriptive second mark (``Check.iv``), never the decision.

Verdict words:

- ``supported``: the claim's side of its tolerance (below, above, or inside +-tol by two one-sided
  tests);
- ``contradicted``: the other side;
- ``negligible``: a difference claim (tolerance 0) whose effect lies inside +-``margin``, the claim's
  smallest effect of interest, by two one-sided tests;
- ``inconclusive``: none of these, in particular one seed only or zero spread (``ZERO_SPREAD``);
- ``not enough runs``: no seed at which every compared cell has a usable run.

``judge`` and ``deciding_interval`` do all of this for one comparison from its per-seed log metrics
(what the ladder report and any other caller reuse); ``docs/verdicts.md`` is the method page.

scipy is imported inside the functions, so ``cemlab report`` refuses a bad sweep name without
loading it. They call ``scipy.special``'s distribution functions (tests/test_claims_stats.py holds
them to ``scipy.stats``): importing ``scipy.stats`` took 0.2-0.5 s of every report and every look.
"""

from __future__ import annotations

import itertools
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


# ----------------------------------------------------------------------------------------------
# Decisions from p-values: every choice tested, intersection-union for "all", Holm for the rest
# ----------------------------------------------------------------------------------------------

#: The two-sided error rate of a claim's decision in a sweep without seeding; every one-sided
#: decision (supported, contradicted, negligible) is held to half of it (a seeded sweep's looks
#: share it out, ``cemlab.sweeps.looks``).
ALPHA = 0.05


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
    """The level each p-value was held to in Holm's step-down: alpha / (k - rank) for the steps
    that rejected and for the step where it stopped; the comparisons after that step were not
    reached and are held to the stopping step's level (their p-values are at least the stopping
    one's), so that a comparison is rejected exactly when its p-value is at most its level."""
    order = sorted(range(len(pvals)), key=lambda i: pvals[i])
    out = [math.nan] * len(pvals)
    stop = None
    for rank, i in enumerate(order):
        level = alpha / (len(pvals) - rank)
        if stop is None and pvals[i] > level:
            stop = level
        out[i] = level if stop is None else stop
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


# ----------------------------------------------------------------------------------------------
# The interval that decided, and one comparison judged on its own
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bounds:
    """The interval that decided a comparison, on the effect's (log) scale: each end is the
    one-sided confidence bound of the test that decides on that side, at the one-sided level that
    test was held to (``alpha_low``, ``alpha_high``: the look's level, Holm's step and the
    every-choice factor included). NaN where no bound exists (one seed, zero spread, no choice
    with data). Its coverage is ``level`` = 1 - alpha_low - alpha_high."""

    low: float
    high: float
    alpha_low: float
    alpha_high: float
    #: What the ends are: ``t`` (paired t bounds), ``tost`` (an equivalence test's), ``negligible``
    #: (the TOST at +-margin of a difference claim), each with ``every choice`` where choices were tested.
    how: str = "t"

    @property
    def level(self) -> float:
        return 1.0 - self.alpha_low - self.alpha_high

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) or math.isfinite(self.high)

    @property
    def label(self) -> str:
        """E.g. ``97.5%`` (both ends one-sided 98.75% bounds), or ``98.125% (lower end 99.375%, upper
        98.75%, one-sided)`` where the two ends were held to different levels (a Holm step)."""
        lv = f"{_fmt_level(self.level)}%"
        if math.isclose(self.alpha_low, self.alpha_high, rel_tol=1e-9):
            return lv
        return (f"{lv} (lower end {_fmt_level(1 - self.alpha_low)}%, upper {_fmt_level(1 - self.alpha_high)}%, "
                f"one-sided)")


def _fmt_level(level: float) -> str:
    """A level in percent with the digits it needs: 0.975 -> 97.5, 0.99375 -> 99.375, 0.95 -> 95."""
    return f"{level * 100:.4f}".rstrip("0").rstrip(".")


def t_bound(diffs, alpha: float, upper: bool) -> float:
    """The one-sided (1 - ``alpha``) confidence bound of the mean of ``diffs`` (non-finite dropped):
    upper (``upper``) or lower. It is dual to ``t_pvalues``: the upper bound is at most ``tol``
    exactly when the p-value of 'below tol' is at most ``alpha``. NaN with fewer than two finite
    differences or zero spread (where ``t_pvalues`` gives NaN)."""
    from scipy.special import stdtrit

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n < 2 or not 0 < alpha < 1:
        return math.nan
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if not sd > 1e-12 * max(1.0, abs(mean)):
        return math.nan
    half = float(stdtrit(n - 1, 1.0 - alpha)) * sd / math.sqrt(n)
    return mean + half if upper else mean - half


def _choice_bound(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float,
                  upper: bool) -> tuple[float, tuple | None]:
    """``every_choice_bound`` and the choice whose bound it is."""
    sign = 1 if upper else -1
    free = [i for i, c in enumerate(coefs) if c * sign > 0]
    m = int(np.prod([n_choices[i] for i in free])) if free else 1
    worst: dict[tuple, tuple[float, tuple]] = {}
    for combo, d in diffs_of.items():
        b = t_bound(d, alpha / m, upper)
        b = sign * b if math.isfinite(b) else math.inf   # on the 'upper' orientation: larger is worse
        key = tuple(combo[i] for i in free)
        if key not in worst or b > worst[key][0]:
            worst[key] = (b, combo)
    if not worst:
        return math.nan, None
    best, combo = min(worst.values(), key=lambda bc: bc[0])
    return (sign * best if math.isfinite(best) else math.nan), combo


def every_choice_bound(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float, upper: bool) -> float:
    """The bound dual to ``every_choice_p``: an upper (``upper``) or lower confidence bound at
    one-sided ``alpha`` of the tuned effect sum_i c_i min_j mu_ij. For the upper bound the
    positions with c_i > 0 may be chosen (as for 'below'): the smallest, over their choices, of the
    largest upper bound at ``alpha / m`` over the other positions' choices (``m``: the number of
    choices that may be picked); the lower bound mirrors it. A choice without a bound counts as no
    bound. 'below tol' is decided at ``alpha`` exactly when this upper bound is at most ``tol``."""
    return _choice_bound(diffs_of, coefs, n_choices, alpha, upper)[0]


def deciding_choice(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float, upper: bool) -> tuple | None:
    """The choice whose bound is ``every_choice_bound``'s (the picked positions' best choice, at the
    others' worst); None without one."""
    return _choice_bound(diffs_of, coefs, n_choices, alpha, upper)[1]


def decision_bounds(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, side: str, alpha_claim: float,
                    alpha_against: float, verdict: str = "", alpha_negligible: float | None = None,
                    discrete: bool = False) -> Bounds | None:
    """The interval that decided a comparison (``Bounds``) from the per-seed differences of every
    choice, at the one-sided levels its tests were held to: ``alpha_claim`` for the claim's side
    (supported), ``alpha_against`` for the other (contradicted).

    - side ``below``: the upper end at ``alpha_claim`` (supported iff it is at most tol), the lower
      end at ``alpha_against`` (contradicted iff it is at least tol); ``above`` the mirror;
    - a ``negligible`` verdict: both ends at ``alpha_negligible`` (inside +-margin: the TOST that
      decided it);
    - ``within`` (equivalence, TOST): both ends at ``alpha_claim`` (supported iff inside +-tol); a
      contradicted one both ends at ``alpha_against / 2`` (Bonferroni over the two outside tests:
      contradicted iff the interval lies wholly outside +-tol).

    None for an exact sign test (``discrete``): its decision is no t interval (the row says what
    decided, ``decided_how``)."""
    if discrete:
        return None
    choice = " over every choice" if max(n_choices, default=1) > 1 else ""

    def both(a: float, how: str) -> Bounds:
        return Bounds(every_choice_bound(diffs_of, coefs, n_choices, a, upper=False),
                      every_choice_bound(diffs_of, coefs, n_choices, a, upper=True), a, a, how + choice)

    if verdict == NEGLIGIBLE and alpha_negligible is not None:
        return both(alpha_negligible, "negligible")
    if side == "within":
        return both(alpha_against / 2, "tost") if verdict == CONTRADICTED else both(alpha_claim, "tost")
    a_low, a_high = (alpha_against, alpha_claim) if side == "below" else (alpha_claim, alpha_against)
    return Bounds(every_choice_bound(diffs_of, coefs, n_choices, a_low, upper=False),
                  every_choice_bound(diffs_of, coefs, n_choices, a_high, upper=True), a_low, a_high, "t" + choice)


def decided_how(evidence: "Evidence | None", side: str, alpha_claim: float, alpha_against: float, n: int,
                discrete: bool = False, holm: str = "") -> str:
    """What decided a comparison, in words, where its interval alone does not say it all: an exact
    sign test (with the smallest p-value its seeds can give, 0.5^n: at 3 seeds 0.125, which no
    level below it can reach), an equivalence's contradiction, a Holm step (``holm``: which side
    was held to Holm's step level)."""
    parts = []
    if discrete:
        smallest = 0.5 ** n if n else 1.0
        parts.append(f"exact sign test on {n} seeds (its smallest one-sided p is 0.5^{n} = {smallest:.3g})")
        if evidence is not None:
            parts.append(f"p supported {evidence.p_claim:.3g} against {alpha_claim:.3g}, p contradicted "
                         f"{evidence.p_against:.3g} against {alpha_against:.3g}")
        if smallest > max(alpha_claim, alpha_against):
            parts.append(f"it cannot be decided at {n} seeds")
    elif side == "within":
        parts.append(f"TOST: supported when the interval at one-sided {alpha_claim:.3g} lies inside +-tol; "
                     f"contradicted when the interval at one-sided {alpha_against / 2:.3g} lies outside it")
    if holm:
        level = alpha_against if holm == CONTRADICTED else alpha_claim
        parts.append(f"'{holm}' held to Holm's step level {level:.3g}")
    return "; ".join(parts)


def smallest_p(n: int, discrete: bool) -> float:
    """The smallest one-sided p-value a comparison over ``n`` seeds can reach: 0 for a t-test
    with two seeds or more, 0.5^n for an exact sign test, 1 with fewer than two seeds (t)."""
    if discrete:
        return 0.5 ** n if n else 1.0
    return 0.0 if n >= 2 else 1.0


#: The log metric of a worst outcome (a divergence, or a result whose metric is not finite or no better
#: than chance: ``pairing.outcomes``): worse than every run that finished, whatever its value.
WORST = math.inf


def paired_diffs_by_seed(logs, coefs, beyond: tuple[float, float] = (0.0, 0.0)) -> dict[tuple, dict]:
    """The per-seed differences of every choice of a comparison, by seed: ``logs[i][j]`` is the per-seed
    log metric of candidate ``j`` of position ``i`` (a mapping seed -> value, e.g. a ``pandas.Series``
    indexed by seed; NaN is no value, ``WORST`` a worst outcome). Each choice (one candidate per
    position) pairs over the seeds at which all of its cells have a value: sum_i c_i log metric_i.

    **A worst outcome scores as the worst finished run.** In each choice, a cell's worst outcome takes
    the largest finite log metric of the choice's cells at its paired seeds (W): it ranks with the
    worst run that finished and weighs no more than that run, so it neither swamps the seeds' spread
    nor needs a scale from outside the data. A seed where a worst outcome lies on one side only (a
    position with c_i > 0, or only c_i < 0) counts at least as a loss of that side beyond the claim's
    tolerance and margin (``beyond``: its difference is at least ``beyond[1]``, or at most
    ``beyond[0]``), so a divergence never reads as a tie, a negligible difference or a win of its own
    cell. A seed where both sides are worst outcomes is a tie (difference 0), as is every seed of a
    choice where no cell finished. Under identical cells the scores mirror each other, so the paired
    law stays symmetric about 0 (docs/verdicts.md, "A divergence is the worst outcome")."""
    lo, hi = beyond
    cells = [[_outcome_items(x) for x in pos] for pos in logs]
    out: dict[tuple, dict] = {}
    for combo in itertools.product(*(range(len(pos)) for pos in cells)):
        chosen = [cells[i][j] for i, j in enumerate(combo)]
        seeds = sorted(set.intersection(*(set(c) for c in chosen))) if chosen else []
        if not seeds:
            continue
        finite = [c[s] for c in chosen for s in seeds if math.isfinite(c[s])]
        w = max(finite) if finite else math.nan
        by_seed: dict = {}
        for s in seeds:
            vals = [c[s] for c in chosen]
            up = any(k > 0 and not math.isfinite(v) for k, v in zip(coefs, vals))
            down = any(k < 0 and not math.isfinite(v) for k, v in zip(coefs, vals))
            if not math.isfinite(w) or (up and down):
                by_seed[s] = 0.0   # both sides worst outcomes, or nothing finished: a tie
                continue
            d = float(sum(k * (v if math.isfinite(v) else w) for k, v in zip(coefs, vals)))
            by_seed[s] = max(d, hi) if up else min(d, lo) if down else d
        out[combo] = {s: by_seed[s] for s in seeds}
    return out


def paired_diffs(logs, coefs, beyond: tuple[float, float] = (0.0, 0.0)) -> dict[tuple, np.ndarray]:
    """``paired_diffs_by_seed`` as arrays in seed order: what the tests read (``comparison_evidence``)."""
    return {combo: np.array([d[s] for s in sorted(d)], dtype=float)
            for combo, d in paired_diffs_by_seed(logs, coefs, beyond).items()}


def beyond_of(tol: float, side: str, margin: float = 0.0) -> tuple[float, float]:
    """Where a worst outcome's difference must lie beyond, below and above (``paired_diffs_by_seed``):
    0, the claim's tolerance (+-tol for an equivalence) and the smallest effect of interest (+-margin)."""
    edges = [0.0, tol, margin, -margin] + ([-tol] if side == "within" else [])
    return min(edges), max(edges)


def _outcome_items(x) -> dict:
    """A mapping seed -> log value (``dict`` or ``pandas.Series``) with its values: finite ones and
    worst outcomes (``WORST``); NaN (no value) and -inf dropped."""
    items = x.items() if hasattr(x, "items") else dict(x).items()
    out = {}
    for k, v in items:
        v = float(v)
        if math.isfinite(v) or v == WORST:
            out[k] = v
    return out


@dataclass(frozen=True)
class Judgement:
    """One comparison judged on its own: its verdict word, its evidence (one-sided p-values, every
    choice tested) and the interval that decided (``Bounds``; None for a sign test), with the
    seeds it read (``n``: the most of any choice)."""

    verdict: str
    evidence: Evidence | None
    bounds: Bounds | None
    n: int


def judge(diffs_of: dict[tuple, np.ndarray], coefs=(), n_choices=(), tol: float = 0.0, side: str = "below",
          margin: float = 0.0, alpha: float = ALPHA, discrete: bool = False) -> Judgement:
    """One comparison on its own at the two-sided level ``alpha`` (each one-sided test at
    ``alpha / 2``: supported, contradicted, negligible), from the per-seed differences of every
    choice (``diffs_of``, e.g. ``paired_diffs``; a comparison without choices: ``{(): diffs}`` with
    empty ``coefs`` and ``n_choices``), and the interval that decided it. A comparison that is one
    of a claim's k goes through ``decide`` with the others instead (Holm may then lower its
    contradiction level)."""
    n = max((int(np.isfinite(np.asarray(d, dtype=float)).sum()) for d in diffs_of.values()), default=0)
    if not diffs_of:
        return Judgement(NOT_ENOUGH, None, None, 0)
    ev = comparison_evidence(diffs_of, coefs, n_choices, tol, side, margin, discrete)
    word = decide([ev], "all", alpha)[0]
    a = alpha / 2
    return Judgement(word, ev, decision_bounds(diffs_of, coefs, n_choices, side, a, a, word, a, discrete), n)


def judge_logs(logs, coefs, tol: float = 0.0, side: str = "below", margin: float = 0.0, alpha: float = ALPHA,
               discrete: bool = False) -> Judgement:
    """``judge`` from the compared cells' per-seed log metrics (``paired_diffs``): ``logs[i]`` the
    candidates of position ``i`` (one mapping seed -> log metric each), ``coefs`` the linear
    combination (e.g. (-1, 1): log(b / a))."""
    return judge(paired_diffs(logs, coefs), tuple(coefs), tuple(len(p) for p in logs), tol, side, margin, alpha,
                 discrete)


def deciding_interval(diffs_of: dict[tuple, np.ndarray], coefs=(), n_choices=(), side: str = "below",
                      alpha: float = ALPHA, verdict: str = "") -> Bounds | None:
    """The interval at the level that decides a comparison judged on its own at two-sided
    ``alpha`` (both ends at one-sided ``alpha / 2``, the every-choice factor included): the
    interval ``judge`` reports, for a caller that wants the interval without the test."""
    a = alpha / 2
    return decision_bounds(diffs_of, coefs, n_choices, side, a, a, verdict, a)
