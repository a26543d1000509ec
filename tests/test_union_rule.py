"""The union rule of a sweep with a confirmation stage, through cemlab's own code (``verdicts.evaluate``
with ``selection_seeds`` on crafted trials of ``t2-beats-t1``): each cell's rate chosen on seeds 0-1
(lowest median validation), the comparison judged on the other seeds only, the favoured cell at its
chosen rate against the other at every rate of the union of the chosen rates. Each expectation is
recomputed here with scipy on the raw numbers. The method: docs/verdicts.md, "Tuned comparisons"."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from cemlab.report.stats.confirmation import choose, selection_score
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from claims_support import crafted_verdicts

SEL = [0, 1]
ALPHA = 0.045
FRESH = 8                       # seeds 2-9


def _check(values, val=None):
    v = crafted_verdicts(values, val=val, selection_seeds=SEL, alpha=ALPHA)["same per-step eta=1"]
    (ch,) = v.checks
    return ch


def _world(seed: int, t1: dict, t2: dict, fresh_rates: dict, n_fresh: int = FRESH, noise: float = 0.01):
    """T=1 and T=2 (eta=1): per rate a factor on a shared per-seed base; every rate on seeds 0-1, the
    rates ``fresh_rates[T]`` also on the fresh seeds."""
    rng = np.random.default_rng(seed)
    n = 2 + n_fresh
    base = 150.0 * np.exp(rng.normal(0.0, 0.03, n))
    out = {}
    for T, curve in ((1, t1), (2, t2)):
        for lr, f in curve.items():
            vals = base * f * np.exp(rng.normal(0.0, noise, n))
            keep = n if lr in fresh_rates[T] else 2
            out[(1 if T == 1 else 2, "1", "dplr", lr)] = [float(x) if math.isfinite(f) else math.nan
                                                          for x in vals[:keep]]
    return out


def _p_below(d):
    return stats.ttest_1samp(d, 0.0, alternative="less").pvalue


def test_a_reference_whose_choice_went_wrong_by_chance_is_also_tested_at_the_other_cells_choice():
    """Identical cells, flat up to 4e-3 and 4% better at 8e-3 (a cliff): on the selection seeds T=1 picks
    2e-3 (its 8e-3 runs drawn unlucky), T=2 picks 8e-3. Judged at the chosen rates alone T=2 would read
    better; the union rule also tests T=2 at 8e-3 against T=1 at 8e-3, where they are equal: not
    supported."""
    curve = {2e-3: 1.0, 4e-3: 1.0, 8e-3: 0.96}
    vals = _world(3, curve, curve, {1: (2e-3, 8e-3), 2: (2e-3, 8e-3)})
    vals[(1, "1", "dplr", 8e-3)][:2] = [x * 1.10 for x in vals[(1, "1", "dplr", 8e-3)][:2]]   # unlucky selection
    ch = _check(vals)
    conf = ch.confirmation
    assert conf is not None and conf.rates == (2e-3, 8e-3)
    t1 = np.log(vals[(1, "1", "dplr", 2e-3)][2:])
    t1_8 = np.log(vals[(1, "1", "dplr", 8e-3)][2:])
    t2 = np.log(vals[(2, "1", "dplr", 8e-3)][2:])
    assert _p_below(t2 - t1) < 0.001                         # the chosen rates alone: 'supported'
    assert ch.verdict == INCONCLUSIVE, ch.describe()
    p_union = max(_p_below(t2 - t1), _p_below(t2 - t1_8))
    assert ch.evidence.p_claim == pytest.approx(p_union, rel=1e-9)
    assert ch.iv.n == FRESH and ch.iv.effect == pytest.approx(float(np.mean(t2 - t1)), rel=1e-9)
    assert ch.iv.low <= ch.iv.effect <= ch.iv.high           # the effect shown lies inside its interval
    assert ch.bounds.low <= ch.iv.effect <= ch.bounds.high


def test_a_better_variant_is_supported_at_every_union_rate_on_the_fresh_seeds_only():
    t1 = {2e-3: 1.05, 4e-3: 1.0, 8e-3: 1.04}
    t2 = {2e-3: 0.98, 4e-3: 0.95, 8e-3: 0.93}
    vals = _world(5, t1, t2, {1: (4e-3, 8e-3), 2: (4e-3, 8e-3)})
    ch = _check(vals)
    assert ch.confirmation.rates == (4e-3, 8e-3) and ch.verdict == SUPPORTED, ch.describe()
    b = np.log(vals[(2, "1", "dplr", 8e-3)][2:])
    p = max(_p_below(b - np.log(vals[(1, "1", "dplr", r)][2:])) for r in (4e-3, 8e-3))
    assert ch.evidence.p_claim == pytest.approx(p, rel=1e-9) and p <= ALPHA / 2
    # the seeds that chose never judge: changing them changes no p-value, only (maybe) the choice
    moved = {k: [v[0] * 1.001, v[1] * 0.999, *v[2:]] for k, v in vals.items()}
    assert _check(moved).evidence.p_claim == pytest.approx(ch.evidence.p_claim, rel=1e-12)
    assert "union {0.004, 0.008}" in ch.choice and ch.level == pytest.approx(1 - ALPHA)


def test_a_union_rate_where_every_selection_run_of_the_loser_diverged_is_not_required():
    """T=2 2 sd worse where it finishes and diverging at every run at 8e-3, T=1 best at 8e-3: the
    contradiction (T=1 at its chosen 8e-3 beats T=2 at every union rate) does not require T=2 at 8e-3,
    where it would be a constant worst outcome carrying T=1's unpaired seed spread; it is judged on
    T=2's finished rate, paired. (Before, such a choice missed Holm's first step.)"""
    t1 = {2e-3: 1.04, 4e-3: 1.02, 8e-3: 1.0}
    t2 = {2e-3: 1.12, 4e-3: 1.10, 8e-3: math.nan}
    vals = _world(9, t1, t2, {1: (4e-3, 8e-3), 2: (4e-3, 8e-3)})
    rates = [[2e-3, 4e-3, 8e-3]] * 2
    logs = {k: dict(enumerate(np.nan_to_num(np.log(v), nan=math.inf))) for k, v in vals.items()}  # diverged: worst
    scores = [[selection_score(logs[(T, "1", "dplr", r)], logs[(T, "1", "dplr", r)], SEL) for r in rates[0]]
              for T in (1, 2)]
    u = choose(rates, [[s for s, _ in row] for row in scores], [[d for _, d in row] for row in scores], SEL)
    assert u.rates == (4e-3, 8e-3) and u.union[1] == (1,)          # T=2 at 8e-3 (all diverged) not required
    ch = _check(vals, val=vals)
    assert ch.verdict == CONTRADICTED, ch.describe()
    d = np.log(vals[(2, "1", "dplr", 4e-3)][2:]) - np.log(vals[(1, "1", "dplr", 8e-3)][2:])
    assert ch.evidence.p_against == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)


def test_a_cell_stuck_on_a_flat_stretch_at_its_highest_rate_voids_nothing():
    """A cell whose best rate on the selection seeds is its highest (a near-flat stretch, one step
    spent) no longer voids the comparisons it loses: the union rule needs no edge rule, and the
    clear loss on the fresh seeds is decided."""
    t1 = {2e-3: 1.04, 4e-3: 1.02, 8e-3: 1.0}            # T=1 best at its highest rate, 8e-3
    t2 = {2e-3: 0.95, 4e-3: 0.93, 8e-3: 0.94}
    vals = _world(11, t1, t2, {1: (4e-3, 8e-3), 2: (4e-3, 8e-3)})
    ch = _check(vals, val=vals)
    assert not ch.edge_blocks and ch.verdict == SUPPORTED, ch.describe()
    assert ch.bracketed and "highest" in ch.bracketed                    # its edge is still shown


def test_a_required_rate_without_fresh_runs_fails_the_test_instead_of_dropping_out():
    """T=1 chose 4e-3, T=2 8e-3, but T=1 was never run at 8e-3 on the fresh seeds: the required choice
    (T=2 at 8e-3 against T=1 at 8e-3) has no seeds, so 'supported' cannot be reached however clear
    the chosen rates' difference."""
    t1 = {2e-3: 1.05, 4e-3: 1.0, 8e-3: 1.02}
    t2 = {2e-3: 0.95, 4e-3: 0.93, 8e-3: 0.90}
    vals = _world(13, t1, t2, {1: (4e-3,), 2: (4e-3, 8e-3)})
    ch = _check(vals, val=vals)
    assert ch.confirmation.rates == (4e-3, 8e-3)
    assert ch.evidence.p_claim == 1.0 and ch.verdict != SUPPORTED, ch.describe()


def test_the_confirmation_plan_gives_the_primary_condition_its_fixed_seeds_first():
    """``confirmation_plan`` with ``primary_seeds``: the primary pairs get that many fresh seeds, the
    others floor((budget - spent - seeds x primary pairs) / other pairs), at most as many; without it,
    n for every pair and the left-over seeds to the primary pairs. Counted here by hand."""
    from types import SimpleNamespace

    from cemlab.report.looks.confirmation_look import confirmation_plan
    from cemlab.report.stats.confirmation import UnionChoice

    def check(label, fams, rates):
        ids = tuple(f'{{"T": {f}, "lr": {r}}}' for f, r in zip(fams, rates))
        return SimpleNamespace(label=label, cell_ids=ids, confirmation=UnionChoice((0, 0), ((0,), (0,)), (0, 1),
                                                                                     tuple(sorted(set(rates)))))

    prim = SimpleNamespace(id="p", role="primary", checks=[check("a", (1, 2), (0.004, 0.008))])   # 2 cells x 2 rates
    other = SimpleNamespace(id="o", role="primary", checks=[check("b", (3, 4), (0.004, 0.004)),    # 2 x 1
                                                            check("c", (2, 5), (0.004, 0.004))])   # 5 new, 2 has it
    verdicts = [prim, other]
    fixed = confirmation_plan(verdicts, 180, 60, [0, 1], "p", primary_seeds=9)
    assert (fixed["c"], fixed["cp"]) == (7, 4)
    n = min(9, (180 - 60 - 9 * 4) // (7 - 4))
    assert (fixed["n"], fixed["extra"]) == (n, 9 - n) == (9, 0)
    tight = confirmation_plan(verdicts, 120, 60, [0, 1], "p", primary_seeds=9)
    assert (tight["n"], tight["n"] + tight["extra"]) == ((120 - 60 - 36) // 3, 9) == (8, 9)
    assert tight["base_seeds"] == list(range(2, 10)) and tight["extra_seeds"] == [10]
    left = confirmation_plan(verdicts, 120, 60, [0, 1], "p")
    assert (left["n"], left["extra"]) == ((120 - 60) // 7, (120 - 60 - 8 * 7) // 4) == (8, 1)


def test_the_test_time_claim_judges_the_rate_chosen_on_the_selection_seeds_on_the_other_seeds():
    """A T=2 cell at two rates: 2e-3 best on validation at seeds 0-1 (and run on seeds 2-7), 8e-3 only on
    seeds 0-1, where T'=2T blows up. Every rate tested would need 8e-3 too (two seeds: never decided);
    with the confirmation stage the claim judges the chosen 2e-3 on seeds 2-7 only: 2% better, supported."""
    from cemlab.report.claims import catalog, verdicts
    from cemlab.report.inputs.table import aggregate
    from cemlab.tracking import schema
    from claims_support import crafted_trials

    at = [30.0, 31.0, 29.5, 30.2, 30.8, 29.9, 30.4, 30.1]
    values = {(2, "1", "dplr", 2e-3): at, (2, "1", "dplr", 8e-3): [33.0, 34.0]}
    val = {(2, "1", "dplr", 2e-3): at, (2, "1", "dplr", 8e-3): [33.0, 34.0]}
    trials = crafted_trials(values, val)
    wiggle = (0.978, 0.982, 0.979, 0.981, 0.980, 0.977, 0.979, 0.981)
    curves = {}
    for r in trials.itertuples():
        ppl = float(r.value)
        more = ppl * wiggle[r.seed] if r.lr == 2e-3 else 1e6
        curves[r.run_id] = [(1, 40.0), (2, ppl), (4, more)]

    def history(run_id, key):
        assert key == schema.TEST_PPL_AT_STEPS
        return curves.get(run_id, [])

    cells = aggregate(trials)
    claim = [c for c in catalog.CLAIMS if c.id == "test-time-recursion"]

    def judged(selection):
        (v,) = [x for x in verdicts.evaluate(claim, lambda s: cells if s == "recursion_ablation" else cells.iloc[:0],
                                             "tiny", lambda s: trials if s == "recursion_ablation" else trials.iloc[:0],
                                             history, selection_seeds=selection, alpha=ALPHA) if x.checks]
        return v.checks[0]

    chosen = judged(SEL)
    assert chosen.verdict == SUPPORTED and chosen.iv.n == 6 and "seeds 0-1" in chosen.choice, chosen.describe()
    d = np.log([a * w for a, w in zip(at[2:], wiggle[2:])]) - np.log(at[2:])
    assert chosen.evidence.p_claim == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="less").pvalue, rel=1e-9)
    assert judged(None).verdict != SUPPORTED        # every rate tested: 8e-3 blows up


@pytest.mark.parametrize("side,tol", [("below", 0.0), ("below", 0.02), ("above", -0.01), ("within", 0.05)])
def test_a_divergence_never_weakens_the_test_against_its_cell(side, tol):
    """``bounds.paired_diffs_by_seed`` on random comparisons of A and B (log(B / A)) where B diverged
    at some seeds: the one-sided t-test that B loses (scipy's ``ttest_1samp`` against the claim's
    point) is at least as strong on the scored divergences as on any finished values B could have had
    there instead (a grid of common values and random ones per seed), wherever the finished seeds lean
    against B; and the scores mirror when A and B swap."""
    from cemlab.report.stats.bounds import WORST, beyond_of, paired_diffs, test_points

    rng = np.random.default_rng(7)
    point = test_points(tol, side)[1]
    beyond = beyond_of(tol, side, 0.0)
    checked = 0
    for _ in range(60):
        n, k = int(rng.integers(3, 8)), int(rng.integers(1, 3))
        a = rng.normal(5.0, 0.05, n + k)
        done = a[:n] + rng.normal(rng.normal(0.05, 0.05), 0.03, n)
        b = {s: (float(done[s]) if s < n else WORST) for s in range(n + k)}
        diffs = paired_diffs([[dict(enumerate(a))], [b]], (-1.0, 1.0), beyond, test_points(tol, side))[(0, 0)]
        mirror = paired_diffs([[b], [dict(enumerate(a))]], (-1.0, 1.0), (-beyond[1], -beyond[0]),
                              (-point, -test_points(tol, side)[0]))[(0, 0)]
        assert mirror == pytest.approx(-diffs)
        if not (done - a[:n] - point).sum() > 0:
            continue
        checked += 1
        p_div = stats.ttest_1samp(diffs, point, alternative="greater").pvalue
        others = [np.full(k, x) for x in np.linspace(-0.3, 0.6, 91)] + [rng.normal(0.1, 0.2, k) for _ in range(200)]
        for x in others:
            p = stats.ttest_1samp(np.concatenate([done - a[:n], x]), point, alternative="greater").pvalue
            assert p_div <= p + 1e-12
    assert checked >= 30
