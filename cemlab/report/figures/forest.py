"""The forest plot of every comparison behind the claims: a panel per claim (and condition), every
comparison's effect with the interval that decided it (a thick bar, its level in the row's label; an
open end, a side the edge rule voided, an arrow head, the voided side named in the label) and its
descriptive 95% interval (a thin grey bar below it) on one axis, the claim's smallest effect of interest
shaded around 0 and the threshold of a threshold or equivalence test drawn dashed. Two kinds of row say
why they look as they do: a row the edge rule voided (a compared cell best at an edge of its rates)
has a hollow marker, a pale bar and a red label naming the cells at an edge; an effect that lies
outside its own interval (a tuned comparison shows one choice of rates, its interval bounds every
choice) is a diamond, the row's label saying so. The legend below the panels names the marks used. The rows are
``cemlab.report.claims.comparisons``'."""

from __future__ import annotations

import math
import textwrap

from cemlab.report.claims.comparisons import on_log2
from cemlab.report.claims.pairing import shown
from cemlab.report.claims.shown_effect import outside_reason
from cemlab.report.figures.plotting import pyplot
from cemlab.report.stats.percent import level_percent

#: The legend's words for each mark of a row (``forest_plot``).
MARKS = {"effect": "effect shown",
         "voided": "hollow, pale, red label: a side voided by the edge rule (a compared cell best at an edge of "
                   "its rates, named in the label)",
         "outside": "diamond: effect outside its interval (one choice of rates shown, the interval over every "
                    "choice)"}


def _mark(ch) -> str:
    """Which of ``MARKS`` a comparison's effect is drawn as: 'voided' before 'outside' before 'effect'."""
    return "voided" if ch.edge_blocks else "outside" if outside_reason(ch) else "effect"


def forest_plot(verdicts: list):
    """One panel per claim (and condition) with comparisons; None when no claim has any. Per
    comparison: the effect with the interval that decided it (thick, its level in the label; an end
    without a bound is an arrow head at the effect) and the descriptive 95% interval (thin, grey, below);
    a voided row hollow and pale, its red label naming the cells at an edge, an effect outside its
    interval a diamond (``MARKS``, in one legend below the panels)."""
    groups = [v for v in verdicts if v.checks]
    if not groups:
        return None
    plt = pyplot()
    notes = sum(1 for v in groups for ch in v.checks if ch.edge_blocks)
    heights = [len(v.checks) * 0.36 + sum(0.3 for ch in v.checks if ch.edge_blocks) + 0.7 for v in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8.5, sum(heights) + 0.4 + 0.2 * bool(notes)),
                             gridspec_kw=dict(height_ratios=heights), squeeze=False)
    handles: dict = {}
    for ax, v in zip(axes[:, 0], groups):
        unit = 1.0 if on_log2(v) else 100.0
        ys = list(range(len(v.checks)))[::-1]
        ax.axvspan(-v.margin * unit, v.margin * unit, color="0.88", zorder=0, label="smallest effect of interest")
        ax.axvline(0.0, color="0.3", lw=0.8)
        labels = []
        for y, ch in zip(ys, v.checks):
            mark = _mark(ch)
            pale = dict(alpha=0.45) if mark == "voided" else {}
            e = shown(ch.iv.effect, ch.fmt) * unit
            if ch.iv.finite:
                lo, hi = (shown(x, ch.fmt) * unit for x in (ch.iv.low, ch.iv.high))
                ax.plot([lo, hi], [y - 0.22] * 2, color="0.55", lw=0.9, solid_capstyle="butt")
            b = ch.bounds
            if b is not None and b.finite:
                lo, hi = (shown(x, ch.fmt) * unit if math.isfinite(x) else math.nan for x in (b.low, b.high))
                left = lo if math.isfinite(lo) else min(e, hi) if math.isfinite(e) else hi
                right = hi if math.isfinite(hi) else max(e, lo) if math.isfinite(e) else lo
                ax.plot([left, right], [y, y], color="C0", lw=2.6, solid_capstyle="butt", **pale)
                for end, at, head in ((lo, left, "<"), (hi, right, ">")):
                    if math.isfinite(end):
                        ax.plot([end, end], [y - 0.15, y + 0.15], color="C0", lw=1.2, **pale)
                    elif math.isfinite(at):
                        ax.plot(at, y, head, color="C0", ms=5, **pale)
            if math.isfinite(e):
                style = dict(voided=dict(marker="o", mfc="white", mec="C0", mew=1.2),
                             outside=dict(marker="D", color="C1"), effect=dict(marker="o", color="C0"))[mark]
                handles[mark] = ax.plot(e, y, ls="none", ms=4, zorder=3, gid=f"effect {mark}", **style)[0]
            if ch.tol:
                for t in ((-ch.tol, ch.tol) if ch.side == "within" else (ch.tol,)):
                    ax.plot([shown(t, ch.fmt) * unit] * 2, [y - 0.4, y + 0.4], ls="--", color="C3", lw=1)
            level = level_percent(b.level, missing="") if b is not None and b.finite else \
                ("sign test" if ch.discrete else "no interval")
            voided = f"; {', '.join(ch.edge_blocks)} voided: a cell at an edge" if ch.edge_blocks else ""
            outside = "; effect outside: one choice of rates" if outside_reason(ch) else ""
            note = "\n" + textwrap.fill(f"not decisive: {ch.bracketed}", 90) if ch.edge_blocks else ""
            labels.append(f"{ch.label} [{ch.verdict}; {level}{voided}{outside}]{note}")
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        for tick, ch in zip(ax.get_yticklabels(), v.checks):
            if ch.edge_blocks:
                tick.set_color("C3")
        ax.set_title(f"{v.id} {v.condition} ({v.role}): {v.verdict}", fontsize=8, loc="left")
        ax.set_xlabel("log2 lr ratio" if on_log2(v) else "effect (%): thick = interval that decided, thin grey = 95%",
                      fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(-0.7, len(v.checks) - 0.3)
    fig.tight_layout()
    if set(handles) - {"effect"}:   # the marks used, below the panels
        used = [k for k in MARKS if k in handles]
        fig.subplots_adjust(bottom=(0.2 * len(used) + 0.5) / fig.get_figheight())
        fig.legend([handles[k] for k in used], [MARKS[k] for k in used], loc="lower left", fontsize=6,
                   frameon=False, bbox_to_anchor=(0.01, 0.0))
    return fig
