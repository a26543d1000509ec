"""The edge rule of tuned comparisons on constructed data: a verdict stands only where the cells that
could erase it have a bracketed learning-rate optimum (docs/verdicts.md, "Bracketing"); split from
tests/test_claims_stats.py, whose crafted grids it shares (tests/claims_support.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from cemlab.report.claims import verdict_tables
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, SUPPORTED
from claims_support import (AT_HIGHEST, AT_LOWEST, BRACKETED, LR_GRID_RATES, crafted_check as _check,
                            crafted_trials as _trials, crafted_verdicts as _verdicts, curve_grid as _curve_grid,
                            lr_grid as _lr_grid, noisy as _noisy)


# ----------------------------------------------------------------------------------------------
# Bracketing: a verdict stands only where the cells that could erase it have a bracketed optimum
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor, word, loser", [(1.10, CONTRADICTED, 2), (0.90, SUPPORTED, 1)])
def test_a_verdict_that_a_cell_is_worse_stands_only_if_the_losing_cell_is_bracketed(factor, word, loser):
    """T=2 10% worse (contradicted: the loser is T=2, coefficient +1 on the side 'below') or 10% better
    (supported: the loser is T=1): decisive with both optima bracketed; inconclusive, the loser named in
    ``not_decisive``, when the loser is best at an edge of its rates (a rate beyond could close the
    gap); unchanged when only the winner is at an edge (its better rate beyond only widens the gap)."""
    winner = 3 - loser
    both = _check(_curve_grid(factor, BRACKETED, BRACKETED))
    assert both.verdict == word and both.bracketed == "yes" and not both.edge_blocks, both.describe()
    for edge, rates in (("highest", AT_HIGHEST), ("lowest", AT_LOWEST)):
        at = {loser: rates, winner: BRACKETED}
        ch = _check(_curve_grid(factor, at[1], at[2]))
        assert ch.verdict == INCONCLUSIVE, ch.describe()
        assert word in ch.edge_blocks and "negligible" in ch.edge_blocks
        rate = max(rates) if edge == "highest" else min(rates)
        assert f"cem-attn T{loser} dplr eta=1 86m: best at its {edge} rate {rate:g}" in ch.edge_note(), ch.edge_note()
        assert f"T{winner} " not in ch.edge_note()
        # the test itself still finds the effect: only the edge rule voids it
        assert ch.bounds is not None and (ch.iv.low > 0 if word == CONTRADICTED else ch.iv.high < 0)
        at = {winner: rates, loser: BRACKETED}
        ch = _check(_curve_grid(factor, at[1], at[2]))
        assert ch.verdict == word, ch.describe()
        assert word not in ch.edge_blocks and "negligible" in ch.edge_blocks
        assert f"cem-attn T{winner} dplr eta=1 86m: best at its {edge} rate" in ch.edge_note()


def test_a_negligible_verdict_needs_every_cell_bracketed():
    """T=2 as good as T=1 (a run's noise 0.2%, well inside the 1% smallest effect of interest):
    negligible with both optima bracketed; inconclusive, naming the cell, when either is at an edge
    (a rate beyond could move either cell's tuned value out of the margin)."""
    both = _check(_curve_grid(1.0, BRACKETED, BRACKETED, noise=0.002))
    assert both.verdict == NEGLIGIBLE, both.describe()
    # the cell at an edge also voids the side on which it would be the loser (T=1: supported)
    cases = ((AT_HIGHEST, BRACKETED, 1, SUPPORTED), (BRACKETED, AT_LOWEST, 2, CONTRADICTED))
    for t1_rates, t2_rates, named, side in cases:
        ch = _check(_curve_grid(1.0, t1_rates, t2_rates, noise=0.002))
        assert ch.verdict == INCONCLUSIVE and ch.edge_blocks == (side, NEGLIGIBLE), ch.describe()
        note = ch.edge_note()
        assert f"cem-attn T{named} dplr eta=1 86m: best at its" in note and f"T{3 - named} " not in note


def test_divergence_beyond_the_best_rate_brackets_that_end():
    """T=2 at 2e-3, 4e-3 and 8e-3, every run at 8e-3 diverged, its validation best at 4e-3: a rate at
    which a seed diverged is worse than every rate at which all finished, so the optimum is inside
    (bracketed) and T=2's contradiction stands; without the 8e-3 runs it is best at its highest rate
    and the contradiction is not decisive. The per-rate scores against a hand computation of the median
    log validation metric (+inf where half the seeds or more diverged); a minority of divergences at
    the best rate leaves it best."""
    from cemlab.report.stats.bracketing import family_edges

    curve = {2e-3: 1.04, 4e-3: 1.0, 8e-3: math.nan}
    t1 = [30.0, 31.0, 29.5, 30.2, 30.6, 29.8]
    n = (1.0, 1.004, 0.997, 1.002, 0.999, 1.001)
    test, val = {}, {}
    for lr, g in curve.items():
        test[(2, "1", "dplr", lr)] = [x * 1.10 * g * m for x, m in zip(t1, n)]
        val[(2, "1", "dplr", lr)] = [x * 1.10 * g * m * 1.01 for x, m in zip(t1, n[::-1])]
    for lr, g in ((1e-3, 1.05), (2e-3, 1.0), (4e-3, 1.02)):   # T=1 bracketed: best at 2e-3
        test[(1, "1", "dplr", lr)] = [x * g * m for x, m in zip(t1, n[::-1])]
        val[(1, "1", "dplr", lr)] = [x * g * m * 1.01 for x, m in zip(t1, n)]
    ch = _check(test, val)
    assert ch.verdict == CONTRADICTED and ch.bracketed == "yes" and not ch.edge_blocks, ch.describe()
    assert "6 diverged (the worst outcome) of 6 seeds" in ch.diverged

    # the scores by hand: the median over seeds of the log validation perplexity, a divergence at +inf
    def median(v):
        x = sorted(math.inf if math.isnan(y) else math.log(y) for y in v)
        return x[len(x) // 2] if len(x) % 2 else (x[len(x) // 2 - 1] + x[len(x) // 2]) / 2
    hand = {lr: median(v) for (T, _, _, lr), v in val.items() if T == 2}
    best = min(hand, key=hand.get)
    assert best == 4e-3 and min(hand) < best < max(hand)
    edges = family_edges(_trials(test, val))
    (row,) = [r for r in edges.itertuples() if json.loads(r.family)["T"] == 2]
    assert row.lrs == sorted(hand) and row.best_lr == best and row.edge == ""
    assert row.scores == pytest.approx([hand[lr] for lr in sorted(hand)], rel=1e-12)

    # two of six divergences at the best rate 4e-3 move its median no further than bad finished runs
    # would: still best there, still bracketed, the contradiction stands
    two = {k: list(v) for k, v in test.items()}
    two_val = {k: list(v) for k, v in val.items()}
    for s in (1, 4):
        two[(2, "1", "dplr", 4e-3)][s] = two_val[(2, "1", "dplr", 4e-3)][s] = math.nan
    ch3 = _check(two, two_val)
    assert ch3.bracketed == "yes" and ch3.verdict == CONTRADICTED, ch3.describe()

    # the same without the diverged rate: best at its highest rate, the contradiction not decisive
    cut = {k: v for k, v in test.items() if k != (2, "1", "dplr", 8e-3)}
    ch2 = _check(cut, {k: v for k, v in val.items() if k in cut})
    assert ch2.verdict == INCONCLUSIVE and "contradicted" in ch2.edge_blocks, ch2.describe()
    assert "cem-attn T2 dplr eta=1 86m: best at its highest rate 0.004 of 0.002, 0.004" in ch2.edge_note()


def test_shared_verdict_is_a_sensitivity_check_at_every_rate():
    test, val = _lr_grid()
    v = _verdicts(test, val=val)["same per-step eta=1"]
    # at 2e-3 T=2 is 10% better, at 4e-3 3% worse: the shared verdicts disagree and say so per rate
    assert "lr 0.002: supported" in v.verdict_shared_lr and "lr 0.004: contradicted" in v.verdict_shared_lr
    assert v.shared_lr == " ".join(f"{r:g}" for r in LR_GRID_RATES) and v.role == "primary"
    one = _verdicts({(1, "1"): [30.0, 31.0, 29.5], (2, "1"): [29.0, 30.5, 28.7]})["same per-step eta=1"]
    assert one.verdict_shared_lr.startswith("n/a: one learning rate")


def test_one_primary_condition_the_others_are_sensitivity_checks():
    t1 = [30.0, 31.0, 29.5, 30.4]
    v = _verdicts({(1, "1"): t1, (2, "1"): _noisy(t1, (0.95, 0.96, 0.94, 0.955)),
                   (2, "1/T"): _noisy(t1, (1.05, 1.06, 1.055, 1.052))})
    assert v["same per-step eta=1"].role == "primary" and v["same total step T*eta=1"].role == "sensitivity"
    frame = verdict_tables.verdict_frame(list(v.values()))
    assert frame["role"].tolist() == ["primary", "sensitivity"]  # the primary first


def test_fig3a_optimum_is_chosen_on_the_validation_curve():
    """The test curve is lowest at 2e-3, the validation curve at 8e-3: Fig. 3a's star sits at the
    rate of the validation curve, drawn at the test curve's value there (read independently)."""
    from scipy.interpolate import Akima1DInterpolator

    from cemlab.report.figures.lr_optima import lr_optima

    lrs = np.array([1e-3, 2e-3, 4e-3, 8e-3, 16e-3])
    test = np.array([31.0, 29.0, 30.0, 30.5, 33.0])
    val = np.array([32.0, 31.0, 30.5, 30.0, 31.5])
    cells = pd.DataFrame(dict(family="cem", group="cem", variant="cem", size="s", lr=lrs, mean=test, val_mean=val,
                              params_total=1e6))
    (row,) = lr_optima(cells).to_dict("records")
    grid = np.linspace(np.log10(lrs[0]), np.log10(lrs[-1]), 20001)
    v = Akima1DInterpolator(np.log10(lrs), val, method="makima")(grid)
    best = grid[int(np.argmin(v))]
    assert math.log10(row["optimum_lr"]) == pytest.approx(best, abs=1e-3) and row["optimum_lr"] > 4e-3
    t = Akima1DInterpolator(np.log10(lrs), test, method="makima")(math.log10(row["optimum_lr"]))
    assert row["optimum_ppl"] == pytest.approx(float(t), rel=1e-9)
