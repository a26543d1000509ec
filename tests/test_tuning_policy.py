"""The tuning policy (``cemlab.sweeps.tuning_policy``): the one rule for the rates a family gets next,
whether it is bracketed and why it stopped, and what it adds at least and at most, which the sweep's
bracketing steps, the report's edge rule and ``cemlab plan`` all call. Checked against rates and
edges worked out by hand, and the sweep file's own grid."""

from __future__ import annotations

import math

import pytest

from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.sweeps.tuning_policy import (BRACKETED, DIVERGED_ALL, HIGHEST, LOWEST, POLICIES, STEP, STOPPED,
                                         Bracketing, Tried)
from sweep_support import REPO_SWEEPS, local_sweeps

GRID = (2e-3, 4e-3)


def policy(max_steps: int = 3) -> Bracketing:
    return Bracketing(GRID, 2.0, (5e-4, 1.6e-2), max_steps)


def test_reachable_rates_and_least_and_most_by_hand():
    p = policy(3)
    assert p.reachable() == pytest.approx([5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])   # 2.5e-4 and 3.2e-2 out of bounds
    assert p.beyond([2e-3, 4e-3], HIGHEST) == pytest.approx([8e-3, 1.6e-2])
    assert p.beyond([2e-3, 4e-3], LOWEST) == pytest.approx([1e-3, 5e-4])
    assert (p.least([2e-3, 4e-3]), p.most([2e-3, 4e-3])) == (1, 2)      # two rates: one step certain; 2 at most
    assert (p.least([1e-3, 2e-3, 4e-3]), p.most([1e-3, 2e-3, 4e-3])) == (0, 2)
    assert policy(1).most([2e-3, 4e-3]) == 1 and policy(0).least([2e-3, 4e-3]) == 0


def test_a_family_steps_until_bracketed_within_its_budget_and_says_why_it_stopped():
    """A cell on a near-flat stretch that keeps looking best at its highest rate (the main job's CEM
    attention T=1 eta=1, read on 3 seeds) is extended step after step while the budget allows, and
    the policy says which cap stopped it: the step budget, or the bound."""
    def curve(lr):            # falls all the way to 1.6e-2: never interior within the bounds
        return -math.log2(lr)

    p = policy(3)
    rates, steps, states = list(GRID), 0, []
    while True:
        nxt = p.judge(Tried(tuple(rates), tuple(curve(r) for r in rates), steps))
        states.append(nxt.state)
        if nxt.state != STEP:
            break
        rates += nxt.rates
        steps += 1
    assert rates == pytest.approx([2e-3, 4e-3, 8e-3, 1.6e-2]) and states == [STEP, STEP, STOPPED]
    assert nxt.edge == HIGHEST and "bound 0.016" in nxt.reason
    capped = policy(1).judge(Tried((2e-3, 4e-3, 8e-3), (3.0, 2.0, 1.0), 1))
    assert capped.state == STOPPED and "max_steps (1)" in capped.reason
    # a best rate inside is bracketed; so is one with a diverged (+inf) rate beyond it
    assert policy().judge(Tried((2e-3, 4e-3, 8e-3), (2.0, 1.0, 1.5), 1)).state == BRACKETED
    assert policy().judge(Tried((2e-3, 4e-3, 8e-3), (2.0, 1.0, math.inf), 1)).state == BRACKETED


def test_a_family_that_diverged_everywhere_steps_down():
    nxt = policy().judge(Tried(GRID, (math.inf, math.inf), 0))
    assert nxt.edge == DIVERGED_ALL and nxt.state == STEP and nxt.rates == pytest.approx((1e-3,))
    none = policy().judge(Tried(GRID, (math.nan, math.nan), 0))
    assert none.state == STOPPED and none.reason == "no finished run"


def test_the_sweep_file_calls_the_policy_and_an_unknown_policy_fails_naming_the_field(tmp_path):
    spec = load_sweep(REPO_SWEEPS / "recursion_ablation.yaml")
    trials = spec.expand("tiny")
    p = spec.tuning_policy("tiny", trials)
    assert isinstance(p, Bracketing) and p.grid == GRID and p.max_steps == spec.tuning.max_steps["tiny"]
    assert spec.tuning_rates("tiny", trials) == p.reachable()
    assert spec.next_rate("tiny", trials, list(GRID), HIGHEST) == p.beyond(GRID, HIGHEST)[0]
    assert "bracketing" in POLICIES.names()
    bad = local_sweeps(tmp_path, bad="""\
        figure: "test"
        axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0]}
        variants:
          - {group: llama, label: llama}
        tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 1.6e-2], policy: nope}
        """)
    with pytest.raises(SweepError, match=r"tuning.*policy.*nope.*bracketing"):
        load_sweep(bad / "bad.yaml")
