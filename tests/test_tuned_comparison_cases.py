"""The cases a statistical review of tuned comparisons found, each through cemlab's own code
(``verdicts.evaluate`` on crafted trials): a side the edge rule voided leaves its end of the interval
open (no interval that excludes zero beside a voided verdict); a variant that diverges at every run
of every rate is contradicted, not voided; a test-time evaluation that blows up counts against the
test-time claim instead of dropping its seed; the shared-rate sensitivity verdict counts a comparison
missing at a rate as missing. The method: docs/verdicts.md."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cemlab.report.claims import catalog as claims, comparisons, verdicts
from cemlab.report.inputs.table import aggregate
from cemlab.report.stats.bracketing import DIVERGED_ALL, edge_of
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NOT_ENOUGH, SUPPORTED
from cemlab.tracking import schema
from claims_support import (AT_HIGHEST, AT_LOWEST, BRACKETED, crafted_check as _check, crafted_trials as _trials,
                            crafted_verdicts as _verdicts, curve_grid as _curve_grid)


def _excludes(b, tol: float = 0.0) -> bool:
    return b.low > tol or b.high < tol


@pytest.mark.parametrize("factor, loser", [(1.10, 2), (0.90, 1)])
@pytest.mark.parametrize("rates", [AT_HIGHEST, AT_LOWEST])
def test_a_voided_side_leaves_its_end_open(factor, loser, rates):
    """The loser at an edge: the test alone would decide (the descriptive interval excludes 0), the edge
    rule voids that side, and the interval that decided is open on that side (-inf below for a voided
    contradiction of 'below', +inf above for a voided support), so it reaches across 0 like every
    inconclusive row's; the page says 'open' and why."""
    at = {loser: rates, 3 - loser: BRACKETED}
    ch = _check(_curve_grid(factor, at[1], at[2]))
    assert ch.verdict == INCONCLUSIVE and ch.edge_blocks, ch.describe()
    assert ch.iv.low > 0 or ch.iv.high < 0            # the test found the effect; only the rule voids it
    assert not _excludes(ch.bounds), ch.describe()
    voided_end = ch.bounds.low if CONTRADICTED in ch.edge_blocks else ch.bounds.high
    assert math.isinf(voided_end)
    assert "open" in ch.interval_text() and "edge" in ch.bounds.how


def test_no_interval_that_excludes_zero_beside_a_voided_verdict_over_random_grids():
    """Over random grids, edges and effects: every comparison left inconclusive by a voided side shows an interval
    that decided reaching across the tolerance unless the other side decided it; the table writes the
    open end as 'open'."""
    rng = np.random.default_rng(7)
    voided = 0
    for i in range(24):
        factor = float(rng.choice([0.85, 0.93, 1.0, 1.07, 1.15]))
        pick = [BRACKETED, AT_HIGHEST, AT_LOWEST]
        t1, t2 = pick[rng.integers(3)], pick[rng.integers(3)]
        v = _verdicts(_curve_grid(factor, t1, t2, rng_seed=100 + i))["same per-step eta=1"]
        for ch in v.checks:
            if ch.edge_blocks and ch.bounds is not None and ch.verdict == INCONCLUSIVE:
                voided += 1
                assert not _excludes(ch.bounds, ch.tol), ch.describe()
        table = comparisons.comparisons_table([v])
        for row, ch in zip(table.itertuples(), v.checks):
            if ch.edge_blocks and (CONTRADICTED in ch.edge_blocks or SUPPORTED in ch.edge_blocks):
                assert "open" in row[6], row
    assert voided >= 5   # the draw exercised the rule


def test_a_variant_that_diverges_at_every_run_of_every_rate_is_contradicted():
    """T=2 diverged at every seed of each of its three rates, T=1 finished and bracketed: its cells have
    no best rate (``DIVERGED_ALL``), which is no edge that voids the verdict against it, and the
    divergence, the worst outcome at every seed, contradicts it. Before, it read 'no finished run', an
    edge, and the contradiction was voided."""
    t1 = _curve_grid(1.0, BRACKETED, BRACKETED)
    grid = {k: v for k, v in t1.items() if k[0] == 1}
    for lr in BRACKETED:
        grid[(2, "1", "dplr", lr)] = [math.nan] * 6
    ch = _check(grid)
    assert ch.verdict == CONTRADICTED and not ch.edge_blocks, ch.describe()
    assert edge_of(BRACKETED, [math.inf] * 3) == (pytest.approx(math.nan, nan_ok=True), DIVERGED_ALL)
    assert edge_of(BRACKETED, [math.nan] * 3)[1] == "no finished run"   # no outcome at all: still no run


def _test_time_verdict(more_at_2t: list[float]):
    """The test-time claim on one CEM attention T=2 cell at one rate, six seeds: test perplexity at
    T'=T=2 of 30 and at T'=2T=4 as given."""
    at = [30.0, 31.0, 29.5, 30.2, 30.8, 29.9]
    trials = _trials({(2, "1"): at})
    curves = {f"r{i}": [(1, 40.0), (2, a), (4, m)] for i, (a, m) in enumerate(zip(at, more_at_2t))}

    def history(run_id, key):
        assert key == schema.TEST_PPL_AT_STEPS
        return curves.get(run_id, [])

    cells = aggregate(trials)
    (v,) = [x for x in verdicts.evaluate([c for c in claims.CLAIMS if c.id == "test-time-recursion"],
                                          lambda s: cells if s == "recursion_ablation" else cells.iloc[:0], "tiny",
                                          lambda s: trials if s == "recursion_ablation" else trials.iloc[:0],
                                          history) if x.checks]
    return v


@pytest.mark.parametrize("blown", [math.inf, 1e6])
def test_a_test_time_evaluation_that_blows_up_counts_against_the_claim(blown):
    """Four seeds 2% better at T'=2T, two at an infinite (or exploded, above chance) perplexity: not
    supported. Before, the two infinite ones were dropped and four seeds read 'supported' (n=4), while
    the same two at 1e6 read 'inconclusive'; now both count as the worst outcome of the T'=2T arm at
    their seed (six seeds each way)."""
    at = [30.0, 31.0, 29.5, 30.2, 30.8, 29.9]
    wiggle = (0.978, 0.982, 0.979, 0.981, 0.980, 0.977)
    more = [a * w for a, w in zip(at[:4], wiggle)] + [blown, blown]
    v = _test_time_verdict(more)
    (ch,) = v.checks
    assert ch.iv.n == 6 and ch.verdict != SUPPORTED, ch.describe()
    clean = _test_time_verdict([a * w for a, w in zip(at, wiggle)])   # all six 2% better: supported
    assert clean.checks[0].verdict == SUPPORTED, clean.checks[0].describe()


def test_the_shared_rate_verdict_counts_a_comparison_missing_at_a_rate_as_missing():
    """The primary condition of t2-beats-t1 (eta=1) is an ``all`` condition over one comparison per
    sublayer: here the MLP sublayer's cells exist only at 2e-3 and the attention ones at 2e-3 and 8e-3.
    At 8e-3 the MLP comparison has no runs: the condition is 'not enough runs' there, never 'supported'
    from attention alone (before: 'lr 0.008: supported')."""
    rng = np.random.default_rng(3)
    rows = []
    for fam in ("cem-attn", "cem-mlp"):
        rates = (2e-3, 8e-3) if fam == "cem-attn" else (2e-3,)
        for lr in rates:
            for T in (1, 2):
                vals = 30.0 * (0.9 if T == 2 else 1.0) * np.exp(rng.normal(0, 0.01, 6))
                t = _trials({(T, "1", "dplr", lr): list(vals)})
                t["family"] = t["group"] = fam
                t["variant"] = t["variant"].str.replace("cem-attn", fam)
                t["cell"] = t["cell"].str.replace('"T"', f'"family": "{fam}", "T"')
                rows.append(t)
    trials = pd.concat(rows, ignore_index=True)
    trials["order"] = range(len(trials))
    trials["run_id"] = [f"r{i}" for i in range(len(trials))]
    cells = aggregate(trials)
    out = verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                            lambda s: cells if s == "recursion_ablation" else cells.iloc[:0], "tiny",
                            lambda s: trials if s == "recursion_ablation" else trials.iloc[:0])
    (v,) = [x for x in out if x.condition == "same per-step eta=1"]
    assert v.n_comparisons == 2, v
    assert "lr 0.008: " + NOT_ENOUGH in v.verdict_shared_lr and "lr 0.008: supported" not in v.verdict_shared_lr
    assert "lr 0.002: supported" in v.verdict_shared_lr, v.verdict_shared_lr


def test_a_divergence_on_a_fresh_seed_is_scored_from_the_fresh_seeds_only():
    """A comparison judged on fresh seeds (``selection_seeds``, the union rule) scores a diverged fresh
    run as the worst finished run of its choice at the *fresh* paired seeds, as the design study does
    (docs/tuned-design-study.md, "The world"): the selection seeds chose the rates and are not judged
    on. Before, the worst run was taken over the selection seeds too, so a bad selection run (here T=1's
    200 at seed 1) set the diverged fresh run's score."""
    t1_low = [150.0, 200.0, 150.0, 148.0, 149.0, 152.0]          # chosen (median 175 over seeds 0-1)
    t2_low = [150.0, 150.0, 150.0, math.nan, 150.5, 149.0]      # chosen; diverged at fresh seed 3
    values = {(1, "1", "dplr", 2e-3): t1_low, (1, "1", "dplr", 4e-3): [190.0] * 6,
              (2, "1", "dplr", 2e-3): t2_low, (2, "1", "dplr", 4e-3): [190.0, 190.0, 191.0, 189.0, 190.0, 190.5]}
    trials = _trials(values, values)
    cells = aggregate(trials)
    (v,) = [x for x in verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                                          lambda s: cells if s == "recursion_ablation" else cells.iloc[:0], "tiny",
                                          lambda s: trials if s == "recursion_ablation" else trials.iloc[:0],
                                          sensitivity=False, selection_seeds=[0, 1]) if x.checks]
    (ch,) = v.checks
    assert ch.confirmation.rates == (2e-3,) and ch.iv.n == 4   # judged on seeds 2-5 at the chosen 2e-3
    d = ch.diffs_of[ch.confirmation.chosen]
    # seed 3: the worst finished run of the choice on the fresh seeds (T=1's 152 at seed 5) less T=1's 148
    assert d[1] == pytest.approx(math.log(152.0 / 148.0)) and d[1] > math.log1p(0.01)
    assert d[0] == pytest.approx(0.0) and d[2] == pytest.approx(math.log(150.5 / 149.0))
