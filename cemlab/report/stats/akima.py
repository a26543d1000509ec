"""Optimal learning rate by Akima interpolation (paper Fig. 3a, section 4.3).

The paper trains each model at five learning rates (5e-4 ... 8e-3, doubling) and estimates the
optimum with Akima interpolation (Akima, 1970). Here:

1. seeds are averaged first (one perplexity per learning rate; non-finite values, i.e. diverged
   runs, are left out);
2. the curve is interpolated in ``log10(lr)`` with ``scipy.interpolate.Akima1DInterpolator``
   (``method="makima"``, which does not overshoot on flat stretches), x strictly increasing;
3. the candidates are the roots of the interpolant's derivative inside the grid and the two end
   points; the optimum is the candidate with the lowest interpolated perplexity;
4. an optimum at an end point of the grid is flagged ``bracketed=False``: the true optimum may lie
   outside the range that was run, so the learning rate is a bound, not an estimate.

With fewer than three learning rates there is nothing to interpolate between: the best measured
point is returned, flagged as not bracketed.

scipy is imported inside ``_interpolator``, so ``cemlab report`` refuses a bad sweep name without
loading it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Optimum:
    """An interpolated optimum. ``lr`` and ``value`` are NaN when no finite point was given."""

    lr: float
    value: float
    bracketed: bool
    n_points: int

    @property
    def log10_lr(self) -> float:
        return math.log10(self.lr) if self.lr > 0 else math.nan


def average_seeds(lrs, values) -> tuple[np.ndarray, np.ndarray]:
    """Mean value per distinct learning rate, sorted by learning rate; non-finite values dropped."""
    lrs = np.asarray(lrs, dtype=float)
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(values) & np.isfinite(lrs) & (lrs > 0)
    lrs, values = lrs[keep], values[keep]
    uniq = np.unique(lrs)
    means = np.array([values[lrs == u].mean() for u in uniq])
    return uniq, means


def akima_curve(lrs, values, num: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """The interpolated curve (lr, value) on ``num`` points, log-spaced over the grid, for plots."""
    x, y = average_seeds(lrs, values)
    if len(x) < 2:
        return x, y
    logx = np.log10(x)
    interp = _interpolator(logx, y)
    grid = np.linspace(logx[0], logx[-1], num)
    return 10.0**grid, interp(grid)


def akima_optimum(lrs, values) -> Optimum:
    """Minimum of the Akima interpolant of ``values`` (e.g. perplexity) over ``log10(lrs)``.

    ``lrs`` and ``values`` are matching sequences and may repeat a learning rate (one entry per
    seed); see the module docstring for the procedure."""
    x, y = average_seeds(lrs, values)
    n = len(x)
    if n == 0:
        return Optimum(math.nan, math.nan, False, 0)
    if n < 3:
        i = int(np.argmin(y))
        return Optimum(float(x[i]), float(y[i]), False, n)
    logx = np.log10(x)
    interp = _interpolator(logx, y)
    roots = interp.derivative().roots(extrapolate=False)
    roots = roots[np.isfinite(roots) & (roots > logx[0]) & (roots < logx[-1])]
    candidates = np.concatenate([[logx[0], logx[-1]], roots])
    vals = interp(candidates)
    i = int(np.argmin(vals))
    best = float(candidates[i])
    # An interior optimum closer than 1e-9 (in log10 lr) to an end is an end-point optimum.
    span = logx[-1] - logx[0]
    bracketed = bool(min(best - logx[0], logx[-1] - best) > 1e-9 * max(span, 1.0))
    return Optimum(float(10.0**best), float(vals[i]), bracketed, n)


def chosen_on_validation(lrs, val, test) -> Optimum:
    """The learning rate chosen on the validation curve (``akima_optimum`` of ``val``), with the
    *test* curve's Akima interpolant read at that rate as its ``value``: choose on validation, judge
    on test. Without any finite validation value, the test curve's own optimum."""
    lrs, val, test = (np.asarray(a, dtype=float) for a in (lrs, val, test))
    if not np.isfinite(val).any():
        return akima_optimum(lrs, test)
    chosen = akima_optimum(lrs, np.where(np.isfinite(test), val, np.nan))
    if not math.isfinite(chosen.lr):
        return chosen
    return Optimum(chosen.lr, read_at(lrs, test, chosen.lr), chosen.bracketed, chosen.n_points)


def read_at(lrs, values, lr: float) -> float:
    """The Akima interpolant of ``values`` over ``log10(lrs)`` read at ``lr`` (with fewer than three
    rates: the value at the nearest rate); NaN without a finite value."""
    x, y = average_seeds(lrs, values)
    if len(x) == 0 or not math.isfinite(lr) or lr <= 0:
        return math.nan
    if len(x) < 3:
        return float(y[int(np.argmin(np.abs(np.log10(x) - math.log10(lr))))])
    return float(_interpolator(np.log10(x), y)(math.log10(lr)))


def _interpolator(logx: np.ndarray, y: np.ndarray):
    from scipy.interpolate import Akima1DInterpolator

    return Akima1DInterpolator(logx, y, method="makima")
