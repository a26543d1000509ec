"""The forest plot of every comparison behind the claims: a panel per claim (and condition), every
comparison's effect with the interval that decided it (a thick bar, its level in the row's label; an
open end, a side the edge rule voided, an arrow head, the voided side named in the label) and its
descriptive 95% interval (a thin grey bar below it) on one axis, the claim's smallest effect of interest
shaded around 0 and the threshold of a threshold or equivalence test drawn dashed. The rows are
``cemlab.report.claims.comparisons``'."""

from __future__ import annotations

import math

from cemlab.report.claims.comparisons import on_log2
from cemlab.report.claims.pairing import shown
from cemlab.report.figures.plotting import pyplot
from cemlab.report.stats.percent import level_percent


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
        unit = 1.0 if on_log2(v) else 100.0
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
            level = level_percent(b.level, missing="") if b is not None and b.finite else ("sign test" if ch.discrete else "no interval")
            voided = f"; {', '.join(ch.edge_blocks)} voided: a cell at an edge" if ch.edge_blocks else ""
            labels.append(f"{ch.label} [{ch.verdict}; {level}{voided}]")
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_title(f"{v.id} {v.condition} ({v.role}): {v.verdict}", fontsize=8, loc="left")
        ax.set_xlabel("log2 lr ratio" if on_log2(v) else "effect (%): thick = interval that decided, thin grey = 95%",
                      fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(-0.7, len(v.checks) - 0.3)
    fig.tight_layout()
    return fig
