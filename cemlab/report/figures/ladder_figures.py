"""The figures of the across-the-ladder page (``cemlab.report.pages.ladder_page``), each a ladder figure
registered through ``cemlab.report.registry.register_figure(..., ladder=True)`` as a plugin's
would be, each drawn from the page's rows (the frame of ``ladder.csv``: one row per comparison and
rung):

- ``forest``: every primary comparison at every rung, grouped by comparison, one row per rung
  with its verdict and the interval that decided it;
- ``trend``: one panel per primary comparison, its effect against tokens per parameter on the
  log-ratio axis its trend is fitted on (ticks as relative changes), with the fitted trend line
  (``cemlab.report.stats.trend.Trend``: the mean of the seeds' least-squares lines).

Both use constrained layout, which places the axes when the figure is drawn, at the resolution
it is saved at, so that whole labels show.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd

from cemlab.report.stats.percent import percent
from cemlab.report.figures.plotting import Figure
from cemlab.report.registry import register_figure


#: Claims whose effect is not a log ratio shown as a relative change (the learning-rate claim's log2).
def relative_effect(claim_id: str) -> bool:
    from cemlab.report.claims.catalog import CLAIMS

    c = CLAIMS.get(claim_id) if claim_id in CLAIMS else None
    return getattr(c, "relative_margin", True)


def _primary(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The rows of the claims' primary conditions with an effect, and their comparisons in page order."""
    prim = rows[(rows["role"] == "primary") & np.isfinite(rows["effect"].to_numpy(dtype=float))]
    return prim, list(dict.fromkeys(zip(prim["claim"], prim["comparison"])))


def forest_figure(rows: pd.DataFrame) -> Figure | None:
    """Every primary comparison at every rung: per comparison a heading, then one row per rung
    with its verdict, effect and the interval that decided it."""
    from matplotlib.transforms import blended_transform_factory

    from cemlab.report.figures.plotting import subplots

    prim, keys = _primary(rows)
    if prim.empty:
        return None
    rungs = sorted(prim["rung"].unique())
    fig, ax = subplots(figsize=(8.5, 0.22 * len(keys) * (len(rungs) + 1.4) + 1.2))
    heading = blended_transform_factory(ax.transAxes, ax.transData)
    y, ticks, labels = 0.0, [], []
    for k in keys[::-1]:
        g = prim[(prim["claim"] == k[0]) & (prim["comparison"] == k[1])]
        for r in rungs[::-1]:
            row = g[g["rung"] == r]
            color = f"C{rungs.index(r)}"
            if not row.empty:
                e, lo, hi = (float(row.iloc[0][c]) * 100 for c in ("effect", "ci_low", "ci_high"))
                if math.isfinite(lo):
                    ax.errorbar(e, y, xerr=[[e - lo], [hi - e]], fmt="o", ms=3, capsize=2, color=color)
                else:
                    ax.plot(e, y, "x", color=color)
            ticks.append(y)
            labels.append(f"rung {r:g}: {row.iloc[0]['verdict'] if not row.empty else 'not run'}")
            y += 1
        ax.text(0.005, y - 0.15, f"{k[0]}: {k[1]}", transform=heading, fontsize=7, fontweight="bold", va="center",
                ha="left", bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
        y += 1.4
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_ylim(-1, y - 0.6)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel("effect (%), interval at the level that decided it (ladder.csv: level)", fontsize=7)
    ax.set_title("Every primary comparison at every rung (tokens per parameter)", fontsize=8, loc="left")
    return Figure("forest", "Every primary comparison at every rung", (
        "Effect and interval of each comparison of the claims' primary conditions, grouped by comparison, one row "
        "per rung with its verdict; each interval at the level that decided it (ladder.csv)."), {}, fig)


def _share_ticks(v: float, _pos=None) -> str:
    """A log-ratio tick as the relative change it is: 0.0953 -> +10%, 0.693 -> +100%."""
    pct = math.expm1(v) * 100
    return percent(v, 1 if 1e-9 < abs(pct) < 1 else 0, log=True)


#: The relative changes (%) a log-ratio axis puts its ticks at, as many as fit.
NICE_CHANGES = (-90, -80, -67, -50, -33, -20, -10, -5, -2, -1, -0.5, 0, 0.5, 1, 2, 5, 10, 20, 30, 50, 100, 200,
                300, 500, 1000)


def share_ticks(vmin: float, vmax: float, most: int = 7) -> list[float]:
    """Ticks of a log-ratio axis from ``vmin`` to ``vmax`` at the relative changes of
    ``NICE_CHANGES``, from the one nearest zero outwards, each at least 1/``most`` of the axis from
    the last (so that they do not crowd near zero); evenly spaced log ratios where fewer than two fit."""
    nice = [math.log1p(p / 100) for p in NICE_CHANGES]
    inside = [t for t in nice if vmin <= t <= vmax]
    if len(inside) < 2:
        from matplotlib.ticker import MaxNLocator

        return [float(t) for t in MaxNLocator(5).tick_values(vmin, vmax) if vmin <= t <= vmax]
    gap = (vmax - vmin) / most
    start = min(inside, key=abs)
    kept = [start]
    for side in (sorted(t for t in inside if t > start), sorted((t for t in inside if t < start), reverse=True)):
        last = start
        for t in side:
            if abs(t - last) >= gap:
                kept.append(t)
                last = t
    return sorted(kept)


def trend_figure(rows: pd.DataFrame) -> Figure | None:
    """One panel per primary comparison: its effect at each rung with the interval that decided it,
    on the log-ratio axis the trend is fitted on (ticks as relative changes; an effect that is not
    a log ratio, the learning-rate claim's log2, as it is), and its fitted trend line: the mean of
    the seeds' least-squares lines, ``trend_center + slope * (log2 tokens - log2 trend_tokens)``."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    from cemlab.report.figures.plotting import subplots

    prim, keys = _primary(rows)
    if prim.empty:
        return None
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = subplots(nrows, ncols, figsize=(3.3 * ncols, 2.4 * nrows + 0.5), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, k in zip(axes.flat, keys):
        g = prim[(prim["claim"] == k[0]) & (prim["comparison"] == k[1])].sort_values("rung")
        rel = relative_effect(k[0])
        to = (lambda v: np.log1p(np.asarray(v, dtype=float))) if rel else (lambda v: np.asarray(v, dtype=float))
        x = g["rung"].to_numpy(dtype=float)
        e, lo, hi = to(g["effect"]), to(g["ci_low"]), to(g["ci_high"])
        ax.errorbar(x, e, yerr=np.where(np.isfinite(lo), [e - lo, hi - e], 0.0), fmt="o", ms=3, capsize=2, lw=1,
                    color="C0")
        ax.axhline(0, color="0.3", lw=0.8)
        first = g.iloc[0]
        slope, center, at = (float(first[c]) for c in ("slope", "trend_center", "trend_tokens"))
        words = ""
        if all(math.isfinite(v) for v in (slope, center, at)):
            xs = np.log2(g["tokens"].to_numpy(dtype=float)) - math.log2(at)
            ax.plot(x, float(to(center)) + float(to(slope)) * xs, "--", color="C1", lw=1.2, gid="trend")
            f = percent if rel else (lambda v: f"{v:+.3g}")
            lo_s, hi_s = float(first["slope_low"]), float(first["slope_high"])
            words = f"; trend {f(slope)} per doubling" + (f" [{f(lo_s)}, {f(hi_s)}]" if math.isfinite(lo_s) else "")
        ax.set_xscale("log")
        if rel:
            ax.set_ylim(*ax.get_ylim())
            ax.yaxis.set_major_locator(FixedLocator(share_ticks(*ax.get_ylim())))
            ax.yaxis.set_major_formatter(FuncFormatter(_share_ticks))
        ax.tick_params(labelsize=6)
        ax.set_title(textwrap.fill(f"{k[0]}: {k[1]}", 48) + "\n" + textwrap.fill(f"{first['ladder']}{words}", 48),
                     fontsize=6.5, loc="left")
    for i, ax in enumerate(axes.flat[:len(keys)]):
        if i + ncols >= len(keys):   # no panel below it
            ax.set_xlabel("tokens per parameter (log)", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("effect (log-ratio axis)", fontsize=7)
    fig.suptitle("Effects against training length, one panel per primary comparison (dashed: fitted trend; "
                 "no projection beyond the top rung)", fontsize=8, x=0.01, ha="left")
    return Figure("trend", "Effects against training length", (
        "One panel per comparison of the claims' primary conditions: its effect at each rung with the interval "
        "that decided it, on a log-ratio axis labelled as relative changes (so +10% and +100% are log 1.1 and "
        "log 2 from zero, and a change of a few percent stays visible beside a +100% hump), with its fitted trend "
        "dashed: the mean of the seeds' least-squares lines of log difference on log2 tokens, over the seeds "
        "present at every rung it was judged at (ladder.csv: slope, its interval, trend_center at trend_tokens). "
        "A point is its rung's effect over all that rung's seeds, so the line need not pass through it. Each "
        "panel has its own effect axis; no projection beyond the top rung."), {}, fig)


register_figure("forest", forest_figure, sweeps=(), ladder=True)
register_figure("trend", trend_figure, sweeps=(), ladder=True)
