"""Whether a comparison changes as training grows: its trend across the rungs of a ladder, and the
ladder verdict in words (``docs/ladder.md``, "How the ladder judges").

**The trend.** At rung ``r`` (``x_r`` = log2 of its training tokens) a comparison has one paired log
difference per seed, ``d_rs`` (``Check.seed_diffs``). A seed's runs at different rungs share its
initialisation and data order, so its differences are correlated across rungs; the trend is
therefore estimated per seed and tested over seeds (the summary-statistics form of a random-slope
model): for every seed present at every rung the comparison was judged at, the least-squares slope
``b_s`` of ``d_rs`` on ``x_r``; then a Student-t interval of the mean slope over those seeds, at the
two-sided level ``1 - alpha`` (each side at ``alpha / 2``, as every decision of the report). Under
"no change with training" the ``b_s`` are independent with mean zero whatever the seeds' own
offsets and however their noise is correlated across rungs, so the interval excludes zero with
probability at most ``alpha`` (held by simulation in tests/test_ladder.py). Seeds a look
added at some rungs only judge those rungs' verdicts, not the trend.

**The ladder verdict** of a comparison, from its verdict at each rung and its trend:

- ``flips between X and Y``: decisive at rungs X < Y with opposite verdicts (supported at one,
  contradicted at the other), the first such pair in rung order;
- ``holds at every rung``: the same decisive verdict at every rung it was judged at (at least two);
  the text says how the effect moved: its effect at each rung, whether it grew or shrank at every
  step or where it peaked, and the trend (how it changes per doubling, or that its interval
  includes zero), so that a sign held at +2% and at +100% does not read as one number;
- ``changes with training``: the trend's interval excludes zero (the effect grows or shrinks per
  doubling of tokens) while the verdicts neither hold nor flip;
- ``open``: none of these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cemlab.report.stats.percent import percent
from cemlab.report.stats.significance import CONTRADICTED, NEGLIGIBLE, NOT_ENOUGH, SUPPORTED, t_interval
from cemlab.report.stats.decision import ALPHA

DECISIVE = (SUPPORTED, CONTRADICTED, NEGLIGIBLE)
HOLDS, FLIPS, CHANGES, OPEN = "holds at every rung", "flips", "changes with training", "open"


@dataclass(frozen=True)
class Trend:
    """The mean per-seed slope of a comparison's log difference per doubling of training tokens,
    its two-sided interval at ``level``, the seeds and rungs it read (NaN without two of each).
    The fitted line (the mean of the seeds' least-squares lines) passes through ``center``, the
    mean of those seeds' log differences over the rungs, at ``x_center``, the mean of the rungs'
    log2 tokens: at log2 tokens x it is ``center + slope * (x - x_center)``."""

    slope: float
    low: float
    high: float
    seeds: int
    rungs: int
    level: float
    note: str = ""
    center: float = math.nan
    x_center: float = math.nan

    @property
    def excludes_zero(self) -> bool:
        return math.isfinite(self.low) and (self.low > 0 or self.high < 0)


def trend(points: dict[float, dict[int, float]], tokens: dict[float, float], alpha: float = ALPHA) -> Trend:
    """The trend of a comparison: ``points`` rung -> {seed: log difference}, ``tokens`` rung ->
    training tokens (the slope is per doubling of them)."""
    level = 1 - alpha
    rungs = sorted(r for r in points if points[r])
    if len(rungs) < 2:
        return Trend(math.nan, math.nan, math.nan, 0, len(rungs), level, "judged at fewer than two rungs")
    seeds = sorted(set.intersection(*(set(points[r]) for r in rungs)))
    x_center = float(np.mean(np.log2([tokens[r] for r in rungs])))
    x = np.log2([tokens[r] for r in rungs]) - x_center
    slopes = [float(np.dot(x, [points[r][s] for r in rungs]) / np.dot(x, x)) for s in seeds]
    center = float(np.mean([points[r][s] for r in rungs for s in seeds])) if seeds else math.nan
    if len(slopes) < 2:
        return Trend(slopes[0] if slopes else math.nan, math.nan, math.nan, len(slopes), len(rungs), level,
                     f"{len(slopes)} seed(s) at every rung: no interval", center, x_center)
    iv = t_interval(slopes, level)
    return Trend(iv.effect, iv.low, iv.high, iv.n, len(rungs), level, iv.note, center, x_center)


def movement(effects: list[tuple[float, float]], fmt) -> str:
    """How an effect moved across the rungs, in words: ``effects`` [(rung, effect)] in rung order
    (on the trend's scale, written by ``fmt``), e.g. ``+2.4% at 0.3125, +84.8% at 1.25, +104.7% at 5,
    +10.3% at 20: not monotone (largest at 5, smallest at 0.3125)``."""
    pts = [(r, e) for r, e in effects if math.isfinite(e)]
    if not pts:
        return ""
    text = ", ".join(f"{fmt(e)} at {r:g}" for r, e in pts)
    if len(pts) < 2:
        return text
    steps = np.diff([e for _, e in pts])
    if (steps > 0).all():
        return f"{text}: grows at every step"
    if (steps < 0).all():
        return f"{text}: shrinks at every step"
    hi = max(pts, key=lambda p: p[1])[0]
    lo = min(pts, key=lambda p: p[1])[0]
    return f"{text}: not monotone (largest at {hi:g}, smallest at {lo:g})"


def ladder_verdict(per_rung: list[tuple[float, str]], tr: Trend, fmt=None,
                   effects: list[tuple[float, float]] | None = None) -> tuple[str, str]:
    """(word, text) of a comparison's ladder verdict from ``per_rung`` [(rung, verdict)] in rung
    order and its trend ``tr``; ``fmt`` writes a slope or an effect on the trend's scale (default:
    a log ratio as a relative change); ``effects`` [(rung, effect)] on that scale, for the words of
    how a verdict that holds moved (``movement``)."""
    fmt = fmt or (lambda v: percent(v, log=True))
    judged = [(r, v) for r, v in per_rung if v != NOT_ENOUGH]
    decisive = [(r, v) for r, v in judged if v in DECISIVE]
    for (r1, v1), (r2, v2) in zip(decisive, decisive[1:]):
        if {v1, v2} == {SUPPORTED, CONTRADICTED}:
            return FLIPS, f"flips between rung {r1:g} and rung {r2:g} ({v1} -> {v2})"
    how = (f"{fmt(tr.slope)} per doubling of tokens [{fmt(tr.low)}, {fmt(tr.high)}], {tr.level:.0%} interval over "
           f"{tr.seeds} seeds") if tr.excludes_zero else ""
    if len(judged) >= 2 and len(decisive) == len(judged) and len({v for _, v in decisive}) == 1:
        at = {r for r, _ in judged}
        moved = movement([(r, e) for r, e in effects or [] if r in at], fmt)
        moved = f"effect {moved}" if moved else ""
        if how:
            trend_words = f"its effect changes: {how}"
        elif math.isfinite(tr.low):
            trend_words = (f"trend {fmt(tr.slope)} per doubling of tokens [{fmt(tr.low)}, {fmt(tr.high)}], "
                           f"{tr.level:.0%} interval over {tr.seeds} seeds, includes zero")
        else:
            trend_words = f"trend n/a: {tr.note}" if tr.note else ""
        return HOLDS, "; ".join([f"holds at every rung ({decisive[0][1]})"] + [w for w in (moved, trend_words) if w])
    if how:
        return CHANGES, f"changes with training: {how}"
    if not judged:
        return OPEN, "open: not judged at any rung"
    words = ", ".join(f"{r:g}: {v}" for r, v in judged)
    return OPEN, f"open ({words}; trend " + (f"{fmt(tr.slope)} per doubling [{fmt(tr.low)}, {fmt(tr.high)}])"
                                              if math.isfinite(tr.low) else f"n/a: {tr.note})")
