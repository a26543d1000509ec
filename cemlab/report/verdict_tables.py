"""The claims.csv and comparisons.csv tables of a report's verdicts (``cemlab.report.verdicts``):
one row per claim and condition, one row per comparison, with the levels each decision was held to
and what more seeds would buy (``power_seeds``)."""

from __future__ import annotations

import math

import pandas as pd

from cemlab.report.stats import ALPHA
from cemlab.report.verdicts import WHERE, Verdict, primary_check, shown


def power_seeds(sd: float, delta: float, alpha: float = ALPHA / 2, power: float = 0.8, cap: int = 1000) -> float:
    """Seeds a paired one-sided t-test at ``alpha`` needs to detect a true effect ``delta`` with
    differences of sd ``sd`` at ``power`` (noncentral t); NaN when unknown, inf beyond ``cap``."""
    from scipy.special import nctdtr, stdtrit  # noncentral t's distribution function, t's quantile function

    if not (math.isfinite(sd) and sd > 0 and delta > 0):
        return math.nan
    for n in range(2, cap + 1):
        crit = stdtrit(n - 1, 1 - alpha)
        if 1.0 - nctdtr(n - 1, delta * math.sqrt(n) / sd, crit) >= power:
            return float(n)
    return math.inf


#: claims.csv columns (scripts read these names). ``effect`` / ``ci_low`` / ``ci_high`` /
#: ``n_seeds``: the comparison that decided the verdict (``decided_by``); ``primary_*``: the claim's
#: primary comparison beside it.
CLAIM_COLUMNS = ["id", "paper", "claim", "condition", "role", "verdict", "decided_by", "effect", "ci_low", "ci_high",
                 "n_seeds", "primary", "primary_effect", "primary_ci_low", "primary_ci_high", "scale",
                 "corpus", "tokens_per_param", "steps", "paper_regime", "method", "numbers", "missing", "rule",
                 "sweeps", "verdict_shared_lr", "shared_lr", "verdict_changes", "margin", "n_comparisons",
                 "size_flips"]


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    rows = []
    for v in verdicts:
        p = primary_check(v.checks, v.primary) if v.checks else None
        pe = [shown(x, p.fmt) for x in (p.iv.effect, p.iv.low, p.iv.high)] if p else [math.nan] * 3
        rows.append(dict(id=v.id, paper=v.paper, claim=v.claim, condition=v.condition, role=v.role,
                         verdict=v.verdict, decided_by=v.decided_by, effect=v.effect, ci_low=v.ci_low,
                         ci_high=v.ci_high, n_seeds=v.n_seeds, primary=p.label if p else "", primary_effect=pe[0],
                         primary_ci_low=pe[1], primary_ci_high=pe[2], scale=v.scale, corpus=v.corpus,
                         tokens_per_param=v.tokens_per_param, steps=v.steps, paper_regime=v.paper_regime,
                         method=v.method, numbers=v.numbers, missing="; ".join(v.missing), rule=v.rule,
                         sweeps=" ".join(v.sweeps), verdict_shared_lr=v.verdict_shared_lr, shared_lr=v.shared_lr,
                         verdict_changes=v.verdict_changes, margin=v.margin, n_comparisons=v.n_comparisons,
                         size_flips=v.size_flips))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def integers(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Count columns as integers in a CSV (``160``, not ``160.0``; empty where unknown)."""
    df = df.copy()
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    return df


#: comparisons.csv columns: one row per comparison behind every claim. ``effect`` and the interval
#: are relative changes (exp of the log-scale values, minus 1; log2 for the learning-rate claim);
#: ``sd_log`` the sd of the paired log differences; ``seeds_for_80pct_power`` the seeds a
#: one-sided test at ``alpha_supported`` needs to detect the margin (or, for a threshold test, the
#: distance to the threshold) with that sd.
COMPARISON_COLUMNS = ["id", "condition", "role", "comparison", *WHERE, "compared", "test", "side", "threshold",
                      "margin", "effect", "ci_low", "ci_high", "level", "n", "sd_log", "seeds_for_80pct_power",
                      "p_supported", "p_contradicted", "p_negligible", "alpha_supported", "alpha_contradicted",
                      "verdict", "primary", "decided", "choice", "n_choices", "diverged", "text", "seed_diffs"]


def seed_diffs_text(pairs) -> str:
    """A comparison's per-seed log differences as ``seed:difference`` words (full precision): what
    the ladder's trend reads back from a rung's comparisons.csv (:func:`parse_seed_diffs`)."""
    return " ".join(f"{int(s)}:{float(d)!r}" for s, d in pairs)


def parse_seed_diffs(text) -> dict[int, float]:
    if not isinstance(text, str) or not text.strip():
        return {}
    return {int(s): float(d) for s, d in (w.split(":", 1) for w in text.split())}


def comparison_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """Every comparison behind every verdict, with the levels its decision was held to."""
    rows = []
    for v in verdicts:
        prim = primary_check(v.checks, v.primary) if v.checks else None
        for ch in v.checks:
            where = {k: ch.cells.get(k, "") for k in (*WHERE, "compared")}
            ev = ch.evidence
            delta = ch.margin if ch.tol == 0 else abs(ch.tol)
            rows.append(dict(id=v.id, condition=v.condition, role=v.role, comparison=ch.label, **where, test=ch.test,
                             side=ch.side, threshold=shown(ch.tol, ch.fmt), margin=shown(ch.margin, ch.fmt),
                             effect=shown(ch.iv.effect, ch.fmt), ci_low=shown(ch.iv.low, ch.fmt),
                             ci_high=shown(ch.iv.high, ch.fmt), level=ch.level, n=ch.iv.n, sd_log=ch.iv.sd,
                             seeds_for_80pct_power=power_seeds(ch.iv.sd, delta, ch.alpha_claim),
                             p_supported=ev.p_claim if ev else math.nan,
                             p_contradicted=ev.p_against if ev else math.nan,
                             p_negligible=ev.p_negligible if ev and ch.tol == 0 else math.nan,
                             alpha_supported=ch.alpha_claim, alpha_contradicted=ch.alpha_against,
                             verdict=ch.verdict, primary=ch is prim, decided=ch.label == v.decided_by,
                             choice=ch.choice, n_choices=" x ".join(map(str, ch.n_choices)), diverged=ch.diverged,
                             text=ch.text, seed_diffs=seed_diffs_text(ch.seed_diffs)))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
