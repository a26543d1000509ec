"""Every comparison behind the claims, as a page table (its forest plot: ``cemlab.report.figures.forest``).

``comparisons.csv`` (``cemlab.report.claims.verdict_tables.comparison_frame``) has one row per comparison; the
page shows the same rows (effects as relative changes in percent, the unit named in the header)
under the claims table, and one forest plot: a panel per claim, every comparison's effect with the
interval that decided it (a thick bar, its level in the row's label) and its descriptive 95% interval
(a thin grey bar below it) on one axis, the claim's smallest effect of interest shaded around 0 and
the threshold of a threshold or equivalence test drawn dashed. The effects follow one sign convention
(``cemlab.paper.SIGN_CONVENTION``): negative = the variant the claim favours is better.
"""

from __future__ import annotations

import math

import pandas as pd

from cemlab.report.claims.pairing import log2_ratio
from cemlab.report.claims.shown_effect import outside_reason
from cemlab.report.stats.percent import level_percent, percent


def pct_value(x: float) -> str:
    """A log-scale effect as a relative change in percent."""
    return percent(x, 2, log=True, unit="", missing="")


def on_log2(v) -> bool:
    """Whether a verdict's effects are log2 ratios (the learning-rate claim: its entry's
    ``relative_margin=False``, its comparisons' ``fmt``) rather than log ratios shown in percent."""
    return any(ch.fmt is log2_ratio for ch in v.checks)


def comparisons_table(verdicts: list) -> pd.DataFrame:
    """The page's comparison rows: claim, condition (and whether it is the primary one), comparison,
    test, effect and the interval that decided in percent (log2 for the learning-rate claim) with
    its level, what decided where that interval does not say it all, the descriptive 95% interval,
    n, the sd of the paired log differences, the one-sided levels of its tests, its p-values, the
    verdict, whether it decided the claim, and why its effect lies outside its intervals where it does
    (``shown_effect.outside_reason``)."""
    rows = []
    for v in verdicts:
        for ch in v.checks:
            scale = (lambda x: f"{x:+.3f}" if math.isfinite(x) else "n/a") if on_log2(v) else \
                (lambda x: pct_value(x) or "n/a")
            ev, b = ch.evidence, ch.bounds
            end = (lambda x: scale(x) if math.isfinite(x) else "open")   # a side voided by the edge rule
            decided = (f"[{end(b.low)}, {end(b.high)}] at {level_percent(b.level, missing='')}"
                       if b is not None and (b.finite or ch.edge_blocks)
                       else ch.iv.note if not ch.discrete and ch.iv.note else "none")
            rows.append({"claim": v.id, "condition": f"{v.condition} ({v.role})".strip(), "comparison": ch.label,
                         "test": ch.test, "effect (% or log2)": scale(ch.iv.effect) if ch.iv.n else "",
                         "interval that decided, level": decided, "what decided": ch.how,
                         "95% interval (descriptive)": f"[{scale(ch.iv.low)}, {scale(ch.iv.high)}]"
                         if ch.iv.finite else "",
                         "n": int(ch.iv.n), "sd (log)": f"{ch.iv.sd:.3g}" if math.isfinite(ch.iv.sd) else "",
                         "p supported / contradicted": f"{ev.p_claim:.3g} / {ev.p_against:.3g}" if ev else "",
                         "levels (one-sided)": f"{ch.alpha_claim:.3g} / {ch.alpha_against:.3g}",
                         "choice": ch.choice, "diverged or failed": ch.diverged, "verdict": ch.verdict,
                         "decided": "yes" if ch.label == v.decided_by else "",
                         "effect outside its interval": outside_reason(ch)})
    return pd.DataFrame(rows, columns=["claim", "condition", "comparison", "test", "effect (% or log2)",
                                       "interval that decided, level", "what decided", "95% interval (descriptive)",
                                       "n", "sd (log)", "p supported / contradicted", "levels (one-sided)", "choice",
                                       "diverged or failed", "verdict", "decided", "effect outside its interval"])
