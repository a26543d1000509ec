"""Rates carried up a ladder (``cemlab.sweeps.carry``) and where a family starts from them
(``Bracketing.start``), each recomputed here independently (numpy's polyfit for the power law)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cemlab.sweeps.carry import Found, carried, on_lattice, point, predict
from cemlab.sweeps.tuning_policy import BRACKETED, HIGHEST, LOWEST, STEP, Bracketing, Tried

GRID, RATIO, BOUNDS = (2e-3, 4e-3), 2.0, (5e-4, 6.4e-2)


def test_a_rung_below_points_at_its_optimum_or_one_step_past_the_end_it_stopped_at():
    assert point(Found(1.25, 4e-3, ""), RATIO) == 4e-3
    assert point(Found(1.25, 8e-3, HIGHEST), RATIO) == pytest.approx(1.6e-2)
    assert point(Found(1.25, 2e-3, LOWEST), RATIO) == pytest.approx(1e-3)
    assert math.isnan(point(Found(1.25, math.nan, "diverged at every rate"), RATIO))


@pytest.mark.parametrize("rule", ["nearest", "trend"])
def test_with_fewer_than_two_optima_the_nearest_rung_below_is_carried(rule):
    below = [Found(0.3125, 8e-3, HIGHEST), Found(1.25, 4e-3, "")]
    assert predict(below, 5.0, RATIO, rule) == 4e-3           # one optimum: the nearest rung's point
    assert predict([Found(0.3125, 8e-3, HIGHEST)], 1.25, RATIO, rule) == pytest.approx(1.6e-2)
    assert math.isnan(predict([], 5.0, RATIO, rule))


def test_the_default_rule_carries_the_nearest_rungs_point_whatever_the_trend():
    """The recursion ablation's Llama: 1.6e-2 at rung 0.3125 and 4e-3 at 1.25 (a trend of one octave
    down per doubling), 4e-3 found at 5: the trend put it at 1e-3, the nearest rung at 4e-3."""
    below = [Found(0.3125, 1.6e-2, ""), Found(1.25, 4e-3, "")]
    assert predict(below, 5.0, RATIO) == predict(below, 5.0, RATIO, "nearest") == 4e-3
    assert predict(below, 5.0, RATIO, "trend") == pytest.approx(1e-3)
    assert predict(below + [Found(5.0, 8e-3, HIGHEST)], 20.0, RATIO) == pytest.approx(1.6e-2)   # one past its end
    assert carried(below, 5.0, GRID, RATIO, BOUNDS, "trend") == 1e-3
    with pytest.raises(ValueError, match="use one of nearest, trend"):
        predict(below, 5.0, RATIO, "power")


@pytest.mark.parametrize("seed", range(5))
def test_with_two_optima_or_more_the_power_law_through_them(seed):
    rng = np.random.default_rng(seed)
    tokens = [0.3125, 1.25, 5.0]
    rates = [float(2.0 ** rng.uniform(-9, -6)) for _ in tokens]
    below = [Found(t, r, "") for t, r in zip(tokens, rates)] + [Found(0.1, 1e-2, HIGHEST)]  # a stop: not fitted
    slope, icpt = np.polyfit(np.log2(tokens), np.log2(rates), 1)
    slope = float(np.clip(slope, -1.0, 1.0))
    mean_x, mean_y = np.mean(np.log2(tokens)), np.mean(np.log2(rates))
    want = 2.0 ** (mean_y + slope * (math.log2(20.0) - mean_x))
    assert predict(below, 20.0, RATIO, "trend") == pytest.approx(want, rel=1e-9)


def test_the_prediction_lands_on_the_grids_lattice_inside_the_bounds():
    assert on_lattice(5.1e-3, GRID, RATIO, BOUNDS) == 4e-3      # log2(5.1/4) = 0.35: 4e-3
    assert on_lattice(6.0e-3, GRID, RATIO, BOUNDS) == 8e-3      # 0.58: 8e-3
    assert on_lattice(1.0, GRID, RATIO, BOUNDS) == 6.4e-2       # the upper bound's lattice rate
    assert on_lattice(1e-6, GRID, RATIO, BOUNDS) == 5e-4
    assert carried([Found(5.0, 8e-3, HIGHEST)], 20.0, GRID, RATIO, BOUNDS) == 1.6e-2


def test_a_family_starts_at_the_guess_and_one_rate_either_side_and_a_right_guess_needs_no_step():
    pol = Bracketing(GRID, RATIO, BOUNDS, 3)
    assert pol.start(8e-3) == (4e-3, 8e-3, 1.6e-2)
    assert pol.start(6.4e-2) == (1.6e-2, 3.2e-2, 6.4e-2)       # at the bound: moved inward
    assert pol.start(5e-4) == (5e-4, 1e-3, 2e-3)
    assert pol.start(math.nan) == GRID
    fam = Bracketing(pol.start(8e-3), RATIO, BOUNDS, 3)
    curve = {r: (math.log2(r / 9e-3)) ** 2 for r in fam.grid}    # optimum near 9e-3: the guess is right
    assert fam.judge(Tried(tuple(curve), tuple(curve.values()))).state == BRACKETED
    wrong = {r: -math.log2(r) for r in fam.grid}                 # better ever higher: it steps up
    nxt = fam.judge(Tried(tuple(wrong), tuple(wrong.values())))
    assert nxt.state == STEP and nxt.rates == (3.2e-2,)
