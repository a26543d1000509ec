"""Every comparison behind the claims, as a page table and a forest plot.

``comparisons.csv`` (``cemlab.report.verdicts.comparison_frame``) has one row per comparison; the
page shows the same rows (effects in percent, the unit named in the header) under the claims table,
and one forest plot: a panel per claim, every comparison's effect with its Bonferroni-adjusted
interval on one axis, the claim's smallest effect of interest shaded around 0 and the threshold of a
threshold or equivalence test drawn dashed. The effects follow one sign convention
(``cemlab.paper.SIGN_CONVENTION``): negative = the variant the claim favours is better.
"""

from __future__ import annotations

import math

import pandas as pd

from cemlab.report.plotting import pyplot


def _pct(x: float) -> str:
    return f"{x * 100:+.2f}" if math.isfinite(x) else ""


def _is_lr(v) -> bool:
    return v.id == "full-cem-higher-lr"


def comparisons_table(verdicts: list) -> pd.DataFrame:
    """The page's comparison rows: claim, condition, comparison, test, effect and interval in
    percent (log2 for the learning-rate claim), the interval's level, n and the verdict."""
    rows = []
    for v in verdicts:
        for ch in v.checks:
            scale = (lambda x: f"{x:+.3f}" if math.isfinite(x) else "") if _is_lr(v) else _pct
            rows.append({"claim": v.id, "condition": v.condition, "comparison": ch.label, "test": ch.test,
                         "effect (% or log2)": scale(ch.iv.effect),
                         "interval": f"[{scale(ch.iv.low)}, {scale(ch.iv.high)}]" if ch.iv.finite else "none",
                         "level": f"{ch.level:.2%}", "n": int(ch.iv.n), "verdict": ch.verdict})
    return pd.DataFrame(rows, columns=["claim", "condition", "comparison", "test", "effect (% or log2)", "interval",
                                       "level", "n", "verdict"])


def forest_plot(verdicts: list):
    """One panel per claim (and condition) with comparisons; None when no claim has any."""
    groups = [v for v in verdicts if v.checks]
    if not groups:
        return None
    plt = pyplot()
    heights = [max(len(v.checks), 1) * 0.32 + 0.7 for v in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8.5, sum(heights) + 0.4),
                             gridspec_kw=dict(height_ratios=heights), squeeze=False)
    for ax, v in zip(axes[:, 0], groups):
        unit = 1.0 if _is_lr(v) else 100.0
        ys = list(range(len(v.checks)))[::-1]
        ax.axvspan(-v.margin * unit, v.margin * unit, color="0.88", zorder=0, label="smallest effect of interest")
        ax.axvline(0.0, color="0.3", lw=0.8)
        for y, ch in zip(ys, v.checks):
            e = ch.iv.effect * unit
            if ch.iv.finite:
                ax.errorbar(e, y, xerr=[[e - ch.iv.low * unit], [ch.iv.high * unit - e]], fmt="o", color="C0",
                            ms=4, capsize=2)
            elif math.isfinite(e):
                ax.plot(e, y, "x", color="C0")
            if ch.tol:
                for t in ((-ch.tol, ch.tol) if ch.side == "within" else (ch.tol,)):
                    ax.plot([t * unit] * 2, [y - 0.4, y + 0.4], ls="--", color="C3", lw=1)
        ax.set_yticks(ys)
        ax.set_yticklabels([f"{ch.label} [{ch.verdict}]" for ch in v.checks], fontsize=7)
        ax.set_title(f"{v.id} {v.condition}: {v.verdict}".strip(), fontsize=8, loc="left")
        ax.set_xlabel("log2 lr ratio" if _is_lr(v) else "effect (%)", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(-0.7, len(v.checks) - 0.3)
    fig.tight_layout()
    return fig
