"""Every comparison behind the claims, as a page table and a forest plot.

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

from cemlab.report.figures.plotting import pyplot
from cemlab.report.claims.verdicts import shown


def _pct(x: float) -> str:
    """A log-scale effect as a relative change in percent."""
    return f"{math.expm1(x) * 100:+.2f}" if math.isfinite(x) else ""


def _is_lr(v) -> bool:
    return v.id == "full-cem-higher-lr"


def _level(x: float) -> str:
    return f"{x * 100:.4f}".rstrip("0").rstrip(".") + "%" if math.isfinite(x) else ""


def comparisons_table(verdicts: list) -> pd.DataFrame:
    """The page's comparison rows: claim, condition (and whether it is the primary one), comparison,
    test, effect and the interval that decided in percent (log2 for the learning-rate claim) with
    its level, what decided where that interval does not say it all, the descriptive 95% interval,
    n, the sd of the paired log differences, the one-sided levels of its tests, its p-values, the
    verdict and whether it decided the claim."""
    rows = []
    for v in verdicts:
        for ch in v.checks:
            scale = (lambda x: f"{x:+.3f}" if math.isfinite(x) else "n/a") if _is_lr(v) else \
                (lambda x: _pct(x) or "n/a")
            ev, b = ch.evidence, ch.bounds
            end = (lambda x: scale(x) if math.isfinite(x) else "open")   # a side voided by the edge rule
            decided = (f"[{end(b.low)}, {end(b.high)}] at {_level(b.level)}"
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
                         "decided": "yes" if ch.label == v.decided_by else ""})
    return pd.DataFrame(rows, columns=["claim", "condition", "comparison", "test", "effect (% or log2)",
                                       "interval that decided, level", "what decided", "95% interval (descriptive)",
                                       "n", "sd (log)", "p supported / contradicted", "levels (one-sided)", "choice",
                                       "diverged or failed", "verdict", "decided"])


def forest_plot(verdicts: list):
    """One panel per claim (and condition) with comparisons; None when no claim has any. Per
    comparison: the effect with the interval that decided it (thick, its level in the label; an end
    without a bound is an arrow head at the effect) and the descriptive 95% interval (thin, grey, below)."""
    groups = [v for v in verdicts if v.checks]
    if not groups:
        return None
    plt = pyplot()
    heights = [max(len(v.checks), 1) * 0.36 + 0.7 for v in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8.5, sum(heights) + 0.4),
                             gridspec_kw=dict(height_ratios=heights), squeeze=False)
    for ax, v in zip(axes[:, 0], groups):
        unit = 1.0 if _is_lr(v) else 100.0
        ys = list(range(len(v.checks)))[::-1]
        ax.axvspan(-v.margin * unit, v.margin * unit, color="0.88", zorder=0, label="smallest effect of interest")
        ax.axvline(0.0, color="0.3", lw=0.8)
        labels = []
        for y, ch in zip(ys, v.checks):
            e = shown(ch.iv.effect, ch.fmt) * unit
            if ch.iv.finite:
                lo, hi = (shown(x, ch.fmt) * unit for x in (ch.iv.low, ch.iv.high))
                ax.plot([lo, hi], [y - 0.22] * 2, color="0.55", lw=0.9, solid_capstyle="butt")
            b = ch.bounds
            if b is not None and b.finite:
                lo, hi = (shown(x, ch.fmt) * unit if math.isfinite(x) else math.nan for x in (b.low, b.high))
                left = lo if math.isfinite(lo) else min(e, hi) if math.isfinite(e) else hi
                right = hi if math.isfinite(hi) else max(e, lo) if math.isfinite(e) else lo
                ax.plot([left, right], [y, y], color="C0", lw=2.6, solid_capstyle="butt")
                for end, at, head in ((lo, left, "<"), (hi, right, ">")):
                    if math.isfinite(end):
                        ax.plot([end, end], [y - 0.15, y + 0.15], color="C0", lw=1.2)
                    elif math.isfinite(at):
                        ax.plot(at, y, head, color="C0", ms=5)
            if math.isfinite(e):
                ax.plot(e, y, "o", color="C0", ms=4, zorder=3)
            if ch.tol:
                for t in ((-ch.tol, ch.tol) if ch.side == "within" else (ch.tol,)):
                    ax.plot([shown(t, ch.fmt) * unit] * 2, [y - 0.4, y + 0.4], ls="--", color="C3", lw=1)
            level = _level(b.level) if b is not None and b.finite else ("sign test" if ch.discrete else "no interval")
            voided = f"; {', '.join(ch.edge_blocks)} voided: a cell at an edge" if ch.edge_blocks else ""
            labels.append(f"{ch.label} [{ch.verdict}; {level}{voided}]")
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_title(f"{v.id} {v.condition} ({v.role}): {v.verdict}", fontsize=8, loc="left")
        ax.set_xlabel("log2 lr ratio" if _is_lr(v) else "effect (%): thick = interval that decided, thin grey = 95%",
                      fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(-0.7, len(v.checks) - 0.3)
    fig.tight_layout()
    return fig
