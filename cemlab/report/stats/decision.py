"""The decision from p-values: every choice tested (``every_choice_p``), intersection-union for the
support of ``all`` claims and Holm for the rest (``decide``), at the claim's error rate ``ALPHA``.
The method: ``cemlab.report.stats`` and ``docs/verdicts.md``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, NOT_ENOUGH, SUPPORTED, sign_pvalues, t_pvalues
# ALPHA: the two-sided error rate of a claim's decision in a sweep without seeding; every one-sided
# decision is held to half of it (a seeded sweep's looks share it out). One definition, in the sweep
# file's schema, which checks each file's split of it.
from cemlab.sweeps.sweepfile.schema import ALPHA
from cemlab.report.stats.confirmation import UnionChoice


# ----------------------------------------------------------------------------------------------
# Decisions from p-values: every choice tested, intersection-union for "all", Holm for the rest
# ----------------------------------------------------------------------------------------------



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


def every_choice_p(pvals: dict[tuple, float], coefs, n_choices, direction: str,
                   conf: "UnionChoice | None" = None) -> float:
    """p-value that the *tuned* effect sum_i c_i min_j mu_ij lies on ``direction`` ('below' or
    'above') of the tolerance, from the p-values of every choice (one candidate j per position i:
    a learning rate, or one of several cells the claim may pick from). For 'below' a position with
    c_i > 0 may be chosen (any one choice below bounds the tuned effect), one with c_i <= 0 must hold
    at every choice; for 'above' the reverse. The chosen positions pay Bonferroni over their choices.
    Nothing is selected on the seeds that judge: every choice is tested. ``conf``: a comparison
    judged on fresh seeds (``confirmation.UnionChoice``): the positions that may be picked are fixed
    at their chosen candidate (no Bonferroni factor), the others range over the union."""
    if conf is not None:
        pvals, n_choices = conf.restrict(pvals, coefs, direction, 1.0), (1,) * len(coefs)
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
                        margin: float = 0.0, discrete: bool = False, conf: "UnionChoice | None" = None) -> Evidence:
    """The ``Evidence`` of a comparison from the per-seed differences of every choice (``diffs_of``:
    choice -> differences), on the claim's ``side`` of ``tol`` ('below', 'above', or 'within':
    |effect| < tol, two one-sided tests). ``discrete``: an exact sign test instead of the t-test;
    ``conf``: the choices each direction requires on fresh seeds (``every_choice_p``)."""
    test = sign_pvalues if discrete else t_pvalues

    def p(direction: str, at: float) -> float:
        ps = {c: test(d, at)[0 if direction == "below" else 1] for c, d in diffs_of.items()}
        return every_choice_p(ps, coefs, n_choices, direction, conf)

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


