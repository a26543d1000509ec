"""The claims.csv and comparisons.csv tables of a report's verdicts (``cemlab.report.claims.verdicts``):
one row per claim and condition, one row per comparison, with the levels each decision was held to
and what more seeds would buy (``power_seeds``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.stats.decision import ALPHA
from cemlab.report.claims.shown_effect import outside_reason
from cemlab.report.claims.verdicts import WHERE, Verdict, primary_check, shown


def power_seeds(sd: float, delta: float, alpha: float = ALPHA / 2, power: float = 0.8, cap: int = 1000) -> float:
    """Seeds a paired one-sided t-test at ``alpha`` needs to detect a true effect ``delta`` with
    differences of sd ``sd`` at ``power`` (noncentral t); NaN when unknown, inf beyond ``cap``."""
    return all_power_seeds([(sd, delta, alpha)], power=power, cap=cap)


def _power(n: int, sd: float, delta: float, alpha: float) -> float:
    """The power of a paired one-sided t-test at ``alpha`` on ``n`` seeds against a true effect ``delta``."""
    from scipy.special import nctdtr, stdtrit  # noncentral t's distribution function, t's quantile function

    return 1.0 - float(nctdtr(n - 1, delta * math.sqrt(n) / sd, stdtrit(n - 1, 1 - alpha)))


def all_power_seeds(tests: list[tuple[float, float, float]], rule: str = "all", power: float = 0.8,
                    cap: int = 1000) -> float:
    """Seeds per cell at which a claim condition reaches ``power``: ``tests`` gives, per comparison,
    the sd of its paired log differences, the effect to detect and the one-sided level its support
    is tested at (the every-choice factor included, ``claim_level``). ``all``: every comparison must
    be supported (the product of their powers, as if independent); ``any``: one (one minus the
    product of their misses). NaN when a comparison's sd or effect is unknown, inf beyond ``cap``."""
    if not tests or any(not (math.isfinite(sd) and sd > 0 and delta > 0 and alpha > 0) for sd, delta, alpha in tests):
        return math.nan
    for n in range(2, cap + 1):
        each = [_power(n, sd, delta, alpha) for sd, delta, alpha in tests]
        got = float(np.prod(each)) if rule != "any" else 1.0 - float(np.prod([1.0 - p for p in each]))
        if got >= power:
            return float(n)
    return math.inf


def claim_level(ch) -> float:
    """The one-sided level one choice of ``ch`` is tested at for its support: its level over the
    number of choices that may be picked in the claim's favour (the every-choice Bonferroni factor)."""
    coefs, n = ch.test_coefs, ch.n_choices or ()
    if not coefs or not n:
        return ch.alpha_claim

    def m(sign: int) -> int:
        return int(np.prod([k for c, k in zip(coefs, n) if c * sign > 0])) if coefs else 1
    picked = max(m(1), m(-1)) if ch.side == "within" else m(1 if ch.side == "below" else -1)
    return ch.alpha_claim / max(picked, 1)


def _effect_to_detect(ch) -> float:
    """The margin (a difference claim), or the distance to the threshold (a threshold or TOST test)."""
    return ch.margin if ch.tol == 0 else abs(ch.tol)


#: claims.csv columns (scripts read these names). ``effect`` / ``ci_low`` / ``ci_high`` / ``level`` /
#: ``n_seeds``: the comparison that decided the verdict (``decided_by``): its effect shown and its
#: interval that decided, of coverage ``level`` (``decided_how``: what decided where that interval
#: does not say it all; ``effect_outside``: why the effect lies outside that interval, '' where it lies
#: inside; ``not_decisive``: the sides the edge rule voided, with the cells at an edge);
#: ``primary_*``: the claim's primary comparison beside it;
#: ``seeds_for_80pct_power``: the seeds per cell at which the condition (every comparison, or one
#: for an ``any`` claim) reaches 80% power at its levels, beside ``seed_budget``, the most the sweep
#: can reach at this scale; ``undecidable``: comparisons no outcome of their seeds could decide.
CLAIM_COLUMNS = ["id", "paper", "claim", "condition", "role", "undecidable", "verdict", "decided_by", "effect",
                 "ci_low", "ci_high", "level", "decided_how", "effect_outside", "not_decisive", "n_seeds", "primary",
                 "primary_effect", "primary_ci_low", "primary_ci_high", "primary_level", "primary_effect_outside",
                 "seeds_for_80pct_power", "seed_budget", "scale", "corpus",
                 "tokens_per_param", "steps", "paper_regime", "method", "numbers", "missing", "rule", "sweeps",
                 "verdict_shared_lr", "shared_lr", "verdict_changes", "margin", "n_comparisons", "size_flips"]


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    rows = []
    for v in verdicts:
        p = primary_check(v.checks, v.primary) if v.checks else None
        pb = p.bounds if p is not None else None
        pe = [shown(p.iv.effect, p.fmt), *((shown(pb.low, p.fmt), shown(pb.high, p.fmt)) if pb is not None
                                           else (math.nan, math.nan))] if p else [math.nan] * 3
        rows.append(dict(id=v.id, paper=v.paper, claim=v.claim, condition=v.condition, role=v.role,
                         undecidable=v.undecidable, verdict=v.verdict, decided_by=v.decided_by, effect=v.effect,
                         ci_low=v.ci_low, ci_high=v.ci_high, level=v.level, decided_how=v.decided_how,
                         effect_outside=v.effect_outside, not_decisive=v.not_decisive, n_seeds=v.n_seeds,
                         primary=p.label if p else "", primary_effect=pe[0],
                         primary_ci_low=pe[1], primary_ci_high=pe[2], primary_level=p.level if p else math.nan,
                         primary_effect_outside=outside_reason(p, descriptive=False) if p else "",
                         seeds_for_80pct_power=condition_seeds(v), seed_budget=v.seed_budget or math.nan,
                         scale=v.scale, corpus=v.corpus,
                         tokens_per_param=v.tokens_per_param, steps=v.steps, paper_regime=v.paper_regime,
                         method=v.method, numbers=v.numbers, missing="; ".join(v.missing), rule=v.rule,
                         sweeps=" ".join(v.sweeps), verdict_shared_lr=v.verdict_shared_lr, shared_lr=v.shared_lr,
                         verdict_changes=v.verdict_changes, margin=v.margin, n_comparisons=v.n_comparisons,
                         size_flips=v.size_flips))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def condition_seeds(v: Verdict) -> float:
    """Seeds per cell the claim condition ``v`` needs for 80% power (``all_power_seeds``): every
    planned comparison at its support's level, the every-choice factor included (``claim_level``)."""
    if not v.checks:
        return math.nan
    return all_power_seeds([(ch.power_sd, _effect_to_detect(ch), claim_level(ch)) for ch in v.checks],
                           rule=v.combine)


def integers(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Count columns as integers in a CSV (``160``, not ``160.0``; empty where unknown)."""
    df = df.copy()
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    return df


#: comparisons.csv columns: one row per comparison behind every claim. ``effect`` and the intervals
#: are relative changes (exp of the log-scale values, minus 1; log2 for the learning-rate claim).
#: ``ci_low`` / ``ci_high``: the interval that decided (``bounds.decision_bounds``), each end at the
#: one-sided level of the test that decides on its side (``alpha_low`` / ``alpha_high``), of
#: coverage ``level`` = 1 - alpha_low - alpha_high; ``decided_how`` says what decided where the
#: interval does not say it all (a sign test, a TOST's contradiction, a Holm step).
#: ``ci95_low`` / ``ci95_high``: the descriptive 95% interval of the effect shown (not the decision).
#: ``effect_outside``: why the effect lies outside either interval ('' where it lies inside both:
#: ``shown_effect.outside_reason``; a tuned comparison shows one choice of rates, its intervals bound
#: every choice).
#: ``sd_log`` the sd of the paired log differences of the effect shown; ``seeds_for_80pct_power`` the
#: seeds a one-sided test at ``alpha_supported`` over the choices that may be picked (``claim_level``)
#: needs to detect the margin (or, for a threshold test, the distance to the threshold) with the sd
#: of the choice that decides the claim's side (``Check.power_sd``). ``bracketed``: 'yes' where every
#: tuned cell's learning-rate optimum is bracketed, else the cells at an edge ('' where nothing was
#: tuned); ``not_decisive``: the sides no test could decide because a cell that could erase them is
#: at an edge (``stats.bracketing.untuned_sides``).
COMPARISON_COLUMNS = ["id", "condition", "role", "comparison", *WHERE, "compared", "test", "side", "threshold",
                      "margin", "effect", "ci_low", "ci_high", "level", "alpha_low", "alpha_high", "decided_how",
                      "ci95_low", "ci95_high", "effect_outside", "n", "sd_log", "seeds_for_80pct_power",
                      "p_supported", "p_contradicted", "p_negligible", "alpha_supported", "alpha_contradicted",
                      "verdict", "primary", "decided", "choice", "n_choices", "diverged", "bracketed", "not_decisive",
                      "text", "seed_diffs"]


def seed_diffs_text(pairs) -> str:
    """A comparison's per-seed log differences as ``seed:difference`` words (full precision): what
    the ladder's trend reads back from a rung's comparisons.csv (:func:`parse_seed_diffs`)."""
    return " ".join(f"{int(s)}:{float(d)!r}" for s, d in pairs)


def parse_seed_diffs(text) -> dict[int, float]:
    if not isinstance(text, str) or not text.strip():
        return {}
    return {int(s): float(d) for s, d in (w.split(":", 1) for w in text.split())}


def comparison_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """Every comparison behind every verdict, with the interval that decided and its levels."""
    rows = []
    for v in verdicts:
        prim = primary_check(v.checks, v.primary) if v.checks else None
        for ch in v.checks:
            where = {k: ch.cells.get(k, "") for k in (*WHERE, "compared")}
            ev = ch.evidence
            b = ch.bounds
            rows.append(dict(id=v.id, condition=v.condition, role=v.role, comparison=ch.label, **where, test=ch.test,
                             side=ch.side, threshold=shown(ch.tol, ch.fmt), margin=shown(ch.margin, ch.fmt),
                             effect=shown(ch.iv.effect, ch.fmt),
                             ci_low=shown(b.low, ch.fmt) if b is not None else math.nan,
                             ci_high=shown(b.high, ch.fmt) if b is not None else math.nan,
                             level=ch.level, alpha_low=b.alpha_low if b is not None else math.nan,
                             alpha_high=b.alpha_high if b is not None else math.nan, decided_how=ch.how,
                             ci95_low=shown(ch.iv.low, ch.fmt), ci95_high=shown(ch.iv.high, ch.fmt),
                             effect_outside=outside_reason(ch),
                             n=ch.iv.n, sd_log=ch.iv.sd,
                             seeds_for_80pct_power=power_seeds(ch.power_sd, _effect_to_detect(ch), claim_level(ch)),
                             p_supported=ev.p_claim if ev else math.nan,
                             p_contradicted=ev.p_against if ev else math.nan,
                             p_negligible=ev.p_negligible if ev and ch.tol == 0 else math.nan,
                             alpha_supported=ch.alpha_claim, alpha_contradicted=ch.alpha_against,
                             verdict=ch.verdict, primary=ch is prim, decided=ch.label == v.decided_by,
                             choice=ch.choice, n_choices=" x ".join(map(str, ch.n_choices)), diverged=ch.diverged,
                             bracketed=ch.bracketed, not_decisive=ch.edge_note(), text=ch.text, seed_diffs=seed_diffs_text(ch.seed_diffs)))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
