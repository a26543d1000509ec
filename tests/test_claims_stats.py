"""Confidence intervals and verdict rules of the claims, on constructed data (no store needed).

The interval is checked against scipy's one-sample t-test interval of the paired log differences (an
independent computation); the verdicts against data with a true effect, a null effect and one seed,
and against the cases a reviewer found: zero spread, a diverged cell, a missing comparison, the side
of the reference, Holm and intersection-union, every choice tested instead of a choice on the
seeds that judge (the edge rule: tests/test_claims_bracketing.py). Error rates are held by simulation in
tests/test_verdict_calibration.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from cemlab.report.claims import catalog as claims, verdict_tables, verdicts
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, NOT_ENOUGH, SUPPORTED, combine, sign_pvalues, t_interval
from cemlab.report.stats.decision import Evidence, comparison_evidence, decide
from cemlab.report.stats.bounds import decision_bounds, judge, judge_logs, paired_diffs
from cemlab.report.inputs.table import aggregate
from claims_support import (CHANCE, LR_GRID_RATES, crafted_trials as _trials, crafted_verdicts as _verdicts,
                            lr_grid as _lr_grid, noisy as _noisy)


@pytest.mark.parametrize("diffs", [[-0.05, -0.04, -0.06], [0.01, -0.02, 0.03, 0.0, -0.01], [0.2, 0.1]])
def test_t_interval_equals_scipy_one_sample_t_interval(diffs):
    iv = t_interval(diffs)
    ref = sps.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert iv.n == len(diffs) and iv.effect == pytest.approx(np.mean(diffs), abs=1e-15)
    assert (iv.low, iv.high) == pytest.approx((ref.low, ref.high), rel=1e-12)


def verdict_of(diffs, tol: float, side: str) -> str:
    """The word the report gives one comparison without choices (``verdicts.check_of_diffs``): its
    evidence from the per-seed differences, decided by ``decide``; no seed: no evidence."""
    d = np.asarray(diffs, dtype=float)
    return decide([comparison_evidence({(): d}, (), (), tol, side) if np.isfinite(d).any() else None])[0]


@pytest.mark.parametrize("alpha", [0.025, 0.025 / 3])
def test_seeds_for_power_equal_scipy_stats_noncentral_t(alpha):
    """The seeds a row needs for 80% power (``power_seeds``, from ``scipy.special``) against the same
    search written with ``scipy.stats``' t quantile and noncentral t survival function."""
    def reference(sd, delta):
        for n in range(2, 1001):
            if sps.nct.sf(sps.t.ppf(1 - alpha, n - 1), n - 1, delta * math.sqrt(n) / sd) >= 0.8:
                return float(n)
        return math.inf

    cases = [(sd, delta) for sd in np.geomspace(0.005, 0.5, 12) for delta in np.geomspace(0.005, 0.2, 8)]
    got = [verdict_tables.power_seeds(sd, delta, alpha=alpha) for sd, delta in cases]
    assert got == [reference(sd, delta) for sd, delta in cases]
    assert 2.0 in got and math.inf in got  # both ends of the search are reached


def test_sign_test_p_values_equal_scipy_binomial_test():
    for up, down in [(3, 0), (5, 1), (2, 2), (0, 4), (7, 3)]:
        d = np.array([1.0] * up + [-1.0] * down + [0.0])  # a tie is dropped
        below, above = sign_pvalues(d, 0.0)
        assert below == pytest.approx(sps.binomtest(up, up + down, 0.5, alternative="less").pvalue, rel=1e-12)
        assert above == pytest.approx(sps.binomtest(down, up + down, 0.5, alternative="less").pvalue, rel=1e-12)


def test_one_seed_has_no_interval_and_is_inconclusive():
    iv = t_interval([-0.3, math.nan])  # a diverged seed does not count
    assert iv.n == 1 and iv.effect == -0.3 and math.isnan(iv.low) and math.isnan(iv.high)
    assert verdict_of([-0.3, math.nan], 0.0, "below") == INCONCLUSIVE  # even a -30% effect: one seed cannot decide
    assert verdict_of([], 0.0, "below") == NOT_ENOUGH


def test_decision_sides_and_combine():
    # per-seed differences (3 seeds) whose 95% interval lies below, above, or across the tolerance
    assert verdict_of([-0.04, -0.05, -0.06], 0.0, "below") == SUPPORTED
    assert verdict_of([0.04, 0.05, 0.06], 0.0, "below") == CONTRADICTED
    assert verdict_of([-0.01, 0.0, 0.01], 0.0, "below") == INCONCLUSIVE
    assert verdict_of([0.025, 0.03, 0.035], 0.01, "above") == SUPPORTED
    assert verdict_of([-0.002, 0.0, 0.002], 0.01, "above") == CONTRADICTED
    assert combine([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert combine([SUPPORTED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([INCONCLUSIVE, CONTRADICTED, SUPPORTED]) == CONTRADICTED
    assert combine([]) == NOT_ENOUGH


# ----------------------------------------------------------------------------------------------
# A recursion_ablation grid written as trials: T=1, and T=2 at two step sizes, several seeds
# ----------------------------------------------------------------------------------------------

def test_true_effect_null_effect_and_one_seed_per_eta():
    t1 = [30.0, 31.0, 29.5, 30.4]
    v = _verdicts({
        (1, "1"): t1,
        # eta=1: 5-6% worse at every seed (a true effect against the claim)
        (2, "1"): [x * f for x, f in zip(t1, (1.05, 1.06, 1.055, 1.052))],
        # eta=1/T: as good as T=1 up to noise of +-0.5% (a null effect)
        (2, "1/T"): [x * f for x, f in zip(t1, (1.004, 0.996, 1.003, 0.995))],
    })
    # T=1 runs at eta=1 only: T=2 eta=1 is the same per-step contrast, T=2 eta=1/2 the same total step
    assert set(v) == {"same per-step eta=1", "same total step T*eta=1"}
    worse, null = v["same per-step eta=1"], v["same total step T*eta=1"]
    # the null effect's interval lies inside the claim's smallest effect of interest (+-1%)
    assert worse.verdict == CONTRADICTED and null.verdict == NEGLIGIBLE
    assert -0.01 < null.ci_low and null.ci_high < 0.01
    for verdict, factors in ((worse, (1.05, 1.06, 1.055, 1.052)), (null, (1.004, 0.996, 1.003, 0.995))):
        logs = np.log(factors)  # the effect lives on the log scale, shown as exp(.) - 1
        ref = sps.ttest_1samp(logs, 0.0).confidence_interval(0.95)
        assert verdict.n_seeds == 4 and verdict.effect == pytest.approx(math.expm1(logs.mean()))
        assert (verdict.ci_low, verdict.ci_high) == pytest.approx((math.expm1(ref.low), math.expm1(ref.high)))
        assert verdict.tokens_per_param == pytest.approx(5.0) and verdict.steps == 400
        assert verdict.corpus == "stdlib (2.5 epochs)"  # 5e5 tokens trained on a 2e5-token training split
    # a true effect in the claim's favour
    better = _verdicts({(1, "1"): t1, (2, "1"): [x * f for x, f in zip(t1, (0.95, 0.96, 0.94, 0.955))]})[
        "same per-step eta=1"]
    assert better.verdict == SUPPORTED and better.ci_high < 0


def test_one_seed_shows_its_numbers_but_is_inconclusive():
    v = _verdicts({(1, "1"): [30.0], (2, "1"): [24.0, 25.0]})["same per-step eta=1"]  # seed 1 of T=1 not run yet
    assert v.verdict == INCONCLUSIVE and v.n_seeds == 1
    assert v.effect == pytest.approx(24.0 / 30.0 - 1) and math.isnan(v.ci_low) and math.isnan(v.ci_high)
    assert "T=1 eta=1 30, T=2 eta=1 24.5" in v.numbers and "no interval" in v.numbers and "n=1" in v.numbers


def test_claims_csv_has_the_columns_scripts_read():
    frame = verdict_tables.verdict_frame(list(_verdicts({(1, "1"): [30.0, 31.0], (2, "1"): [29.0, 30.5]}).values()))
    assert {"effect", "ci_low", "ci_high", "n_seeds", "tokens_per_param", "steps", "corpus", "paper_regime",
            "condition", "verdict_shared_lr", "verdict_changes", "margin", "primary"} <= set(frame.columns)
    assert set(frame["verdict"]) <= {SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE, NOT_ENOUGH}


def test_a_claim_reads_only_the_sweeps_whose_files_list_it():
    values = {(1, "1"): [30.0, 31.0, 29.5], (2, "1"): [29.0, 30.1, 28.7]}
    listed = _verdicts(values, {"t2-beats-t1": ["recursion_ablation"]})["same per-step eta=1"]
    assert listed.verdict == SUPPORTED and listed.sweeps == ["recursion_ablation"]
    assert verdict_tables.verdict_frame([listed])["sweeps"].tolist() == ["recursion_ablation"]
    # the same runs, but no sweep file lists the claim: its rule finds no cells
    (unlisted,) = _verdicts(values, {"t2-beats-t1": []}).values()
    assert unlisted.verdict == NOT_ENOUGH and unlisted.sweeps == [] and unlisted.numbers == ""


# ----------------------------------------------------------------------------------------------
# Equivalence (TOST), negligible, Bonferroni, selection on validation, shared vs tuned lr
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("diffs, expected", [
    ([0.001, -0.002, 0.0015, -0.0005, 0.0], SUPPORTED),       # true equivalence: well inside +-2%
    ([0.06, 0.055, 0.065, 0.058, 0.062], CONTRADICTED),        # true difference: wholly above +2%
    ([0.03, -0.04, 0.01, -0.02, 0.035], INCONCLUSIVE),         # noisy: straddles the margin
])
def test_tost_equivalence_at_the_margin(diffs, expected):
    ev = comparison_evidence({(): np.array(diffs)}, (), (), 0.02, "within")
    # the two one-sided tests, each at alpha/2 = 2.5%: scipy's one-sample t-tests as the reference
    lo_p = sps.ttest_1samp(diffs, -0.02, alternative="greater").pvalue
    hi_p = sps.ttest_1samp(diffs, 0.02, alternative="less").pvalue
    assert ev.p_claim == pytest.approx(max(lo_p, hi_p), rel=1e-9)
    assert (max(lo_p, hi_p) < 0.025) == (expected == SUPPORTED)
    assert decide([ev])[0] == expected


def test_negligible_is_a_difference_inside_the_smallest_effect_of_interest():
    tiny = np.array([-0.003, -0.0045, -0.002, -0.0035])  # significant, but inside +-1%
    ev = comparison_evidence({(): tiny}, (), (), 0.0, "below", margin=0.01)
    assert decide([ev])[0] == SUPPORTED  # it is below 0 ...
    assert ev.p_negligible < 0.025  # ... and inside the margin: "supported" wins for one comparison
    flat = np.array([0.001, -0.002, 0.0015, -0.001])  # not below 0, but inside +-1%
    assert decide([comparison_evidence({(): flat}, (), (), 0.0, "below", margin=0.01)])[0] == NEGLIGIBLE
    wide = np.array([-0.03, -0.045, -0.02, -0.025])  # reaches past -1%
    assert decide([comparison_evidence({(): wide}, (), (), 0.0, "below", margin=0.01)])[0] == SUPPORTED
    assert combine([SUPPORTED, NEGLIGIBLE]) == NEGLIGIBLE and combine([CONTRADICTED, SUPPORTED], "any") == SUPPORTED


def test_all_is_intersection_union_and_contradiction_is_holm():
    """'For every preconditioner': supported when each comparison is supported at 1 - alpha on its
    own (no Bonferroni: every one must hold, so the error of a false 'supported' cannot add up);
    contradicted only where Holm over the k planned comparisons rejects the claim's side."""
    t1 = [30.0, 31.0, 29.5]
    f = {"none": (0.98, 0.965, 0.975), "diag": (0.90, 0.91, 0.905), "dplr": (0.92, 0.93, 0.91)}
    values = {}
    for p, fac in f.items():
        values[(1, "1", p)] = t1
        values[(2, "1", p)] = [x * y for x, y in zip(t1, fac)]
    v = _verdicts(values)["same per-step eta=1"]
    assert v.n_comparisons == 3
    none = next(c for c in v.checks if "none" in c.label)
    d = np.log(f["none"])
    alone, bonf = (sps.ttest_1samp(d, 0.0).confidence_interval(x) for x in (0.95, 1 - 0.05 / 3))
    assert alone.high < 0 < bonf.high  # Bonferroni would have left it open
    assert (none.iv.low, none.iv.high) == pytest.approx((alone.low, alone.high), rel=1e-12)
    assert none.verdict == SUPPORTED and v.verdict == SUPPORTED and v.decided_by == none.label
    frame = verdict_tables.comparison_frame([v])
    # the interval that decided: the supported end (upper) at 2.5% (intersection-union), the
    # contradicted end (lower) at Holm's step level; coverage 1 - the two
    assert len(frame) == 3 and set(frame["alpha_supported"].round(6)) == {0.025}
    assert set(frame["alpha_high"].round(6)) == {0.025}
    assert sorted(frame["alpha_low"].round(6)) == pytest.approx(sorted(frame["alpha_contradicted"].round(6)))
    assert (frame["level"] == 1 - frame["alpha_low"] - frame["alpha_high"]).all()
    # ... and 'supported' exactly where the upper end is below 0: the same t bound scipy gives
    upper = sps.ttest_1samp(d, 0.0, alternative="less").confidence_interval(1 - 0.025).high
    assert none.bounds.high == pytest.approx(upper, rel=1e-12) and upper < 0
    # Holm: p-values 0.001, 0.02, 0.03 at one-sided alpha 2.5% over k=3 -> only the first is rejected;
    # the step where it stopped (0.02 > 2.5%/2) holds the rest to its level, so each is rejected
    # exactly when its p-value is at most its level
    ps = [0.001, 0.02, 0.03]
    verdict, words, levels = decide([Evidence(1.0, p) for p in ps])
    assert verdict == CONTRADICTED and words == [CONTRADICTED, INCONCLUSIVE, INCONCLUSIVE]
    assert levels == pytest.approx([0.025 / 3, 0.025 / 2, 0.025 / 2])
    assert [p <= lv for p, lv in zip(ps, levels)] == [w == CONTRADICTED for w in words]
    # one contradiction at p = 0.02 < 2.5% alone, but not below 2.5%/3: Holm leaves the claim open
    assert decide([Evidence(1.0, 0.02), Evidence(1.0, 0.5), Evidence(1.0, 0.6)])[0] == INCONCLUSIVE
    # 'any': Holm on the claim's side; contradicted only when every comparison is
    assert decide([Evidence(0.02, 1.0), Evidence(0.5, 1.0)], "any")[0] == INCONCLUSIVE
    assert decide([Evidence(0.01, 1.0), Evidence(0.5, 1.0)], "any")[0] == SUPPORTED


def test_zero_spread_decides_nothing_and_says_why():
    """d = [1, 1, 1] has a zero-width t interval: once 'supported'; now no interval and the reason."""
    iv = t_interval([1.0, 1.0, 1.0])
    assert iv.n == 3 and math.isnan(iv.low) and "zero spread" in iv.note
    assert decide([comparison_evidence({(): np.array([1.0, 1.0, 1.0])}, (), (), 0.0, "above")])[0] == INCONCLUSIVE
    # a discrete effect (optima on a grid) is judged by an exact sign test: 3 of 3 up is p = 1/8
    ev = comparison_evidence({(): np.array([1.0, 1.0, 1.0])}, (), (), 0.0, "above", discrete=True)
    assert ev.p_claim == pytest.approx(sps.binomtest(3, 3, 0.5, alternative="greater").pvalue)
    assert decide([ev])[0] == INCONCLUSIVE
    ev6 = comparison_evidence({(): np.ones(6)}, (), (), 0.0, "above", discrete=True)
    assert ev6.p_claim == pytest.approx(1 / 64) and decide([ev6])[0] == SUPPORTED


def test_a_diverged_run_is_an_outcome_and_a_missing_comparison_counts():
    """Preconditioner 'none' diverged at every seed at T=2: the divergence is its outcome, the worst
    one (scored as the worst finished run of the comparison: no seed of that choice finished), so over 8 seeds 'T=2 beats T=1 for every
    preconditioner' is contradicted by it (it was 'not enough runs'). Over 3 seeds it is not: three
    divergences against none is what Fisher's exact test puts at one-sided p = 1/20, above any level
    here, and a divergence no longer borrows a scale (the chance value, 100 sd away) that made it
    decisive. A cell with no run that has a value (every seed failed) is still a planned comparison
    without runs, and counts."""
    t1 = [30.0, 31.0, 29.5, 30.4, 29.8, 30.9, 30.2, 29.7]
    values = {(1, "1", "none"): t1, (2, "1", "none"): [math.nan] * 8}
    for p in ("diag", "dplr"):
        values[(1, "1", p)] = t1
        values[(2, "1", p)] = _noisy(t1, (0.90, 0.92, 0.905, 0.91, 0.915, 0.9, 0.908, 0.912))
    v = _verdicts(values)["same per-step eta=1"]
    none = next(c for c in v.checks if "none" in c.label)
    assert none.verdict == CONTRADICTED and "8 diverged (the worst outcome) of 8 seeds" in none.diverged
    assert v.verdict == CONTRADICTED and v.decided_by == none.label
    assert sps.fisher_exact([[3, 0], [0, 3]], alternative="greater").pvalue == pytest.approx(1 / 20)
    three = {k: vals[:3] for k, vals in values.items()}
    none3 = next(c for c in _verdicts(three)["same per-step eta=1"].checks if "none" in c.label)
    assert none3.verdict == INCONCLUSIVE and none3.iv.effect > 0   # shown against T=2, not decided on 3 seeds
    values = {k: vals[:3] for k, vals in values.items()}
    values[(2, "1", "none")] = [None] * 3   # every seed failed: no value, so no comparison
    v = _verdicts(values)["same per-step eta=1"]
    gap = next(c for c in v.checks if "none" in c.label)
    assert v.n_comparisons == 3 and v.verdict == NOT_ENOUGH and gap.verdict == NOT_ENOUGH
    assert sorted(c.verdict for c in v.checks) == [NOT_ENOUGH, SUPPORTED, SUPPORTED]
    # a rate where two of three seeds diverged stays a candidate, its worst outcomes there: no
    # choice is made on its one survivor, and it cannot help its cell
    t1b = [30.0, 31.0, 29.5]
    grid = {(1, "1", "dplr", 2e-3): t1b, (1, "1", "dplr", 4e-3): _noisy(t1b, (1.01, 0.99, 1.0)),
            (2, "1", "dplr", 2e-3): _noisy(t1b, (1.02, 1.0, 1.01)),
            (2, "1", "dplr", 4e-3): [20.0, math.nan, math.nan]}
    w = _verdicts(grid)["same per-step eta=1"]
    (ch,) = w.checks
    assert "lr=0.004: 2 diverged (the worst outcome) of 3 seeds" in ch.diverged and ch.n_choices == (2, 2)
    assert w.verdict != SUPPORTED
    # a failed run has no value: its seed does not pair, the rate stays a candidate at its other seeds ...
    grid[(2, "1", "dplr", 4e-3)] = [20.0, None, 20.5]
    (ch,) = _verdicts(grid)["same per-step eta=1"].checks
    assert "lr=0.004: 1 failed (no value) of 3 seeds" in ch.diverged and ch.n_choices == (2, 2)
    assert ch.diffs_of[(0, 1)].size == 2 and ch.diffs_of[(0, 0)].size == 3
    # ... and a planned candidate without a value at any seed leaves the comparison 'not enough runs':
    # the cell would otherwise be tuned over fewer rates than the one it is compared with
    grid[(2, "1", "dplr", 4e-3)] = [None] * 3
    w = _verdicts(grid)["same per-step eta=1"]
    assert w.verdict == NOT_ENOUGH and "no run with a value at a planned candidate" in "; ".join(w.missing)


def test_one_diverged_seed_at_the_better_rate_does_not_decide_between_identical_cells():
    """The reviewer's construction: two identical cells (up to 0.1% noise), the higher rate 5%
    better, and one seed of one cell diverged at the higher rate. Dropping that rate from that cell
    only compared it at its worse rate and read 'supported, -4.9%'; as the worst outcome of the cell
    it happened in, the divergence decides nothing either way."""
    base = np.array([30.0, 31.0, 29.5])
    noise = {(1, 2e-3): (1.0, 1.001, 0.999), (1, 4e-3): (0.95, 0.951, 0.949),
             (2, 2e-3): (1.001, 0.999, 1.0), (2, 4e-3): (0.951, 0.949, 0.95)}
    for diverged_T in (1, 2):
        grid = {(T, "1", "dplr", lr): list(base * np.array(f)) for (T, lr), f in noise.items()}
        grid[(diverged_T, "1", "dplr", 4e-3)][1] = math.nan
        (ch,) = _verdicts(grid)["same per-step eta=1"].checks
        assert ch.verdict not in (SUPPORTED, CONTRADICTED), (diverged_T, ch.describe())


#: The learning-rate curve of ``_grid8``: 4e-3 is 5% better than 2e-3, and the rates either side of
#: them (1e-3, 8e-3) are worse than both, so that each cell's optimum is bracketed (an optimum at an
#: edge of a cell's rates leaves a verdict it could erase undecided: docs/verdicts.md, "Bracketing").
GRID8_CURVE = ((1e-3, 1.08), (2e-3, 1.0), (4e-3, 0.95), (8e-3, 1.04))


def _grid8(t2_factor: float, rng_seed: int = 50) -> dict:
    """T=1 and T=2 (eta=1, dplr) at 1e-3, 2e-3, 4e-3 and 8e-3 over 8 seeds: a seed effect shared by
    every cell, a run's own noise of 1.8% (a paired difference's sd about 2.5%), the curve
    ``GRID8_CURVE`` (best at 4e-3, 5% better than 2e-3: a bracketed optimum), and T=2 ``t2_factor``
    times T=1 at every rate."""
    rng = np.random.default_rng(rng_seed)
    base = 150.0 * np.exp(rng.normal(0.0, 0.03, 8))
    out = {}
    for T, f in ((1, 1.0), (2, t2_factor)):
        for lr, g in GRID8_CURVE:
            out[(T, "1", "dplr", lr)] = list(base * f * g * np.exp(rng.normal(0.0, 0.018, 8)))
    return out


def test_a_worse_variant_does_not_escape_contradiction_by_diverging():
    """The review's construction: T=2 5% worse than T=1 at both rates and all 8 seeds is contradicted;
    it must stay contradicted when one of its runs at 4e-3 diverges, and when all of them do (a
    divergence of the variant can only count against it; T=2's optimum moves to 2e-3, still bracketed
    by 1e-3 and 4e-3). With the chance value (a log ratio of 2.6,
    about 100 sd) one divergence had put that choice's t statistic near 1: 'inconclusive (p 0.29)'."""
    grid = _grid8(1.05)
    (ch,) = _verdicts(grid)["same per-step eta=1"].checks
    assert ch.verdict == CONTRADICTED, ch.describe()
    p_before = ch.evidence.p_against
    one = {k: list(v) for k, v in grid.items()}
    one[(2, "1", "dplr", 4e-3)][3] = math.nan
    (ch1,) = _verdicts(one)["same per-step eta=1"].checks
    assert ch1.verdict == CONTRADICTED and "1 diverged (the worst outcome) of 8 seeds" in ch1.diverged
    every = {k: list(v) for k, v in grid.items()}
    every[(2, "1", "dplr", 4e-3)] = [math.nan] * 8
    (ch8,) = _verdicts(every)["same per-step eta=1"].checks
    assert ch8.verdict == CONTRADICTED, ch8.describe()
    assert all(c.bracketed == "yes" and not c.edge_blocks for c in (ch, ch1, ch8))
    # no support appears for T=2 anywhere along the way, and the interval that decided stays above 0
    for c in (ch, ch1, ch8):
        assert c.evidence.p_claim > 0.5 and c.bounds.low > 0
    # the old scoring, for the record: the chance value at that seed leaves the choice undecided
    logs1 = np.log(np.array(one[(1, "1", "dplr", 4e-3)]))
    logs2 = np.log(np.where(np.isnan(one[(2, "1", "dplr", 4e-3)]), CHANCE, one[(2, "1", "dplr", 4e-3)]))
    assert sps.ttest_1samp(logs2 - logs1, 0.0, alternative="greater").pvalue > 0.05 > 0.0125 > p_before


def test_two_divergences_at_one_cells_better_rate_show_no_effect_between_identical_cells():
    """Identical cells, two divergences at one cell's better rate: the effect shown takes each seed's
    rate on the other seeds' median validation, which two worst outcomes among seven do not move, so
    no seed is moved to the cell's worse rate (the geometric mean with the chance value did, at every
    seed: -4.4% with a 95% mark of [-6.4%, -2.3%] beside 'inconclusive'); neither the interval that
    decided nor the 95% mark excludes zero."""
    grid = _grid8(1.0, rng_seed=51)
    val = {k: [x * 1.01 for x in v] for k, v in grid.items()}
    for diverged_T in (1, 2):
        g = {k: list(v) for k, v in grid.items()}
        vv = {k: list(v) for k, v in val.items()}
        for s in (2, 5):
            g[(diverged_T, "1", "dplr", 4e-3)][s] = math.nan
            vv[(diverged_T, "1", "dplr", 4e-3)][s] = math.nan
        (ch,) = _verdicts(g, val=vv)["same per-step eta=1"].checks
        assert ch.verdict not in (SUPPORTED, CONTRADICTED), ch.describe()
        assert ch.iv.low < 0 < ch.iv.high and ch.bounds.low < 0 < ch.bounds.high, ch.describe()
        # every seed that did not diverge is shown at both cells' better rate (4e-3)
        better = np.log(np.array(g[(2, "1", "dplr", 4e-3)])) - np.log(np.array(g[(1, "1", "dplr", 4e-3)]))
        shown = dict(ch.seed_diffs)
        assert all(shown[s] == pytest.approx(better[s]) for s in range(8) if s not in (2, 5))
        # the diverged seeds count against the cell that diverged
        sign = 1 if diverged_T == 2 else -1
        assert all(sign * shown[s] > 0 for s in (2, 5))


@pytest.mark.parametrize("value", [math.inf, math.nan, 1.7976931348623157e308, CHANCE, 3 * CHANCE])
def test_a_finished_run_with_a_non_finite_or_exploded_metric_is_an_outcome(value):
    """A run that finished with a test metric that is not finite (the language-model task writes inf at
    a test loss of 700 nats or more; a store may give the largest float instead) or no better than
    chance is the worst outcome, exactly as if it had diverged: its seed no longer drops out (three
    such T=2 runs had read 'supported'), and its cell's mean does not include it."""
    grid = _grid8(0.97, rng_seed=52)
    diverged = {k: list(v) for k, v in grid.items()}
    for s in (1, 4, 6):
        diverged[(2, "1", "dplr", 4e-3)][s] = math.nan
    trials = _trials(diverged)
    hit = trials["status"] == "diverged"
    finished = trials.assign(status="finished", value=np.where(hit, value, trials["value"]))
    got = {}
    for name, t in (("diverged", trials), ("finished", finished)):
        cells = aggregate(t)
        (v,) = [x for x in verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                                             lambda s, c=cells: c, "tiny", lambda s, t=t: t)
                if x.condition == "same per-step eta=1"]
        got[name] = v.checks[0]
        assert cells["mean"].notna().all() and cells["mean"].max() < CHANCE
    a, b = got["diverged"], got["finished"]
    assert a.verdict == b.verdict and a.diffs_of.keys() == b.diffs_of.keys()
    for k in a.diffs_of:
        assert np.allclose(a.diffs_of[k], b.diffs_of[k]) and len(a.diffs_of[k]) == 8
    assert "3 finished with a non-finite or chance-level metric (the worst outcome) of 8 seeds" in b.diverged


def test_seeds_for_power_stay_finite_with_a_divergence_in_the_data():
    """A divergence in the comparison that decides used to put a chance-valued seed (100 sd away) into
    the sd that the power calculation reads: 'inf seeds'. Scored from the finished runs (the t
    statistic's peak, or the worst finished run: docs/verdicts.md), it stays on their scale, and the
    seeds stay finite."""
    grid = _grid8(0.97, rng_seed=53)
    grid[(2, "1", "dplr", 4e-3)][0] = math.nan
    grid[(1, "1", "dplr", 4e-3)][7] = math.nan
    (v,) = [x for x in _verdicts(grid).values() if x.condition == "same per-step eta=1"]
    frame = verdict_tables.comparison_frame([v])
    seeds = float(frame["seeds_for_80pct_power"].iloc[0])
    assert math.isfinite(seeds) and 2 <= seeds < 1000 and frame["sd_log"].iloc[0] < 0.2


def test_the_reference_side_does_not_change_the_effect():
    """Ratios [1.5, 0.7]: the mean of ratios - 1 is +10% one way and +4.8% the other; on the log
    scale the two directions are exact negatives."""
    a, b = np.array([20.0, 30.0]), np.array([30.0, 21.0])
    one, other = t_interval(verdicts.rel(np.log(a), np.log(b))), t_interval(verdicts.rel(np.log(b), np.log(a)))
    assert one.effect == pytest.approx(-other.effect) and one.low == pytest.approx(-other.high)
    assert (np.mean(b / a) - 1, np.mean(a / b) - 1) == pytest.approx((0.1, 0.0476190), abs=1e-6)


#: The rates of ``_lr_grid``: the grid's 2e-3 and 4e-3, and the rate either side of them.
def test_every_choice_is_tested_and_the_effect_shown_is_chosen_on_other_seeds():
    test, val = _lr_grid()
    v = _verdicts(test, val=val)["same per-step eta=1"]
    (ch,) = v.checks
    k = len(LR_GRID_RATES)
    assert ch.n_choices == (k, k) and "every choice tested" in ch.choice
    assert ch.bracketed == "yes" and not ch.edge_blocks   # both optima at 4e-3 on validation, inside the rates
    # shown: each seed's rates chosen on the other seeds' validation -> both at 4e-3, T=2 ~3% worse
    assert v.effect == pytest.approx(0.03, abs=0.01)
    # decided: T=2 (the favoured side) may take any rate (Bonferroni over 4), T=1 must be beaten at
    # every rate: T=2 at 2e-3 beats T=1 at all four on test, so the claim reads supported, whatever the
    # validation metric says: a choice on validation is never what decides
    d = {lr2: [np.log(np.array(test[(2, "1", "dplr", lr2)]) / np.array(test[(1, "1", "dplr", lr1)]))
               for lr1 in LR_GRID_RATES] for lr2 in LR_GRID_RATES}
    p_best = min(max(sps.ttest_1samp(x, 0.0, alternative="less").pvalue for x in d[lr2]) for lr2 in d)
    assert ch.evidence.p_claim == pytest.approx(min(1.0, k * p_best), rel=1e-9)
    assert v.verdict == (SUPPORTED if k * p_best <= 0.025 else INCONCLUSIVE)


# ----------------------------------------------------------------------------------------------
# The interval shown is the one that decided
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.0025, 0.0475])
def test_the_interval_shown_decides_exactly_as_the_tests_do(alpha):
    """For random tuned comparisons (2-3 candidates per position, every choice tested) and random
    claims of the three kinds, judged alone and two at a time (Holm on the contradiction): a
    comparison is supported exactly when the claim's end of its interval that decided is beyond the
    tolerance, contradicted exactly when the other end is, negligible exactly when the interval lies
    inside +-margin; its level is 1 minus the two ends' one-sided levels."""
    rng = np.random.default_rng(int(alpha * 1e5))
    seen = set()
    for _ in range(300):
        checks = []
        for _ in range(2):
            n, k = int(rng.integers(2, 7)), (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
            shift = rng.normal(0, 1.5)
            logs = [[{s: rng.normal(0, 1) for s in range(n)} for _ in range(k[0])],
                    [{s: rng.normal(shift, 1) for s in range(n)} for _ in range(k[1])]]
            side = str(rng.choice(["below", "above", "within"]))
            tol = 0.0 if side != "within" and rng.random() < 0.5 else abs(rng.normal(0, 0.7))
            diffs = paired_diffs(logs, (-1.0, 1.0))
            checks.append((diffs, k, side, tol if side == "within" else tol * rng.choice([-1, 1]), 0.3))
        evidence = [comparison_evidence(d, (-1.0, 1.0), k, t, side, m) for d, k, side, t, m in checks]
        _, words, levels = decide(evidence, "all", alpha)
        for (d, k, side, t, m), w, lv in zip(checks, words, levels):
            b = decision_bounds(d, (-1.0, 1.0), k, side, alpha / 2, lv, w, alpha / 2)
            assert b.level == pytest.approx(1 - b.alpha_low - b.alpha_high)
            seen.add((side, w))
            if w == NEGLIGIBLE:
                assert -m <= b.low and b.high <= m
                continue
            lo, hi = (b.low if np.isfinite(b.low) else -np.inf), (b.high if np.isfinite(b.high) else np.inf)
            if side == "within":
                assert (w == SUPPORTED) == (-t <= lo and hi <= t)
                if w == CONTRADICTED:
                    assert lo >= t or hi <= -t
                continue
            claim_end, other_end = (hi, lo) if side == "below" else (lo, hi)
            beyond = (lambda x: x <= t) if side == "below" else (lambda x: x >= t)
            assert (w == SUPPORTED) == beyond(claim_end), (side, w, b, t)
            assert (w == CONTRADICTED) == ((other_end >= t) if side == "below" else (other_end <= t)), (side, w, b, t)
    assert len(seen) >= 5   # every kind of claim met decided and open rows
    if alpha == 0.05:
        assert {("below", SUPPORTED), ("below", CONTRADICTED), ("below", INCONCLUSIVE), ("within", SUPPORTED)} <= seen


def test_the_report_prints_the_interval_at_the_level_that_decided():
    """A seeded sweep's look at alpha 0.025 (one-sided 1.25%): the comparison's interval is the
    97.5% interval (not a 95% one labelled '98% CI'), its row says so, and the verdict follows it;
    ``judge`` gives the same for the comparison from its per-seed log metrics."""
    t1 = [30.0, 31.0, 29.5, 30.4]
    values = {(1, "1"): t1, (2, "1"): [x * f for x, f in zip(t1, (0.97, 0.975, 0.972, 0.98))]}
    trials = _trials(values)
    cells = aggregate(trials)
    (v,) = verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"], lambda s: cells, "tiny",
                             lambda s: trials, alpha=0.025)
    (ch,) = v.checks
    d = np.log(values[(2, "1")]) - np.log(t1)
    upper = sps.ttest_1samp(d, 0.0, alternative="less").confidence_interval(1 - 0.0125).high
    lower = sps.ttest_1samp(d, 0.0, alternative="greater").confidence_interval(1 - 0.0125).low
    assert (ch.bounds.low, ch.bounds.high) == pytest.approx((lower, upper), rel=1e-12)
    assert ch.level == pytest.approx(0.975) and "97.5% interval that decided" in v.numbers and "98%" not in v.numbers
    assert v.level == pytest.approx(0.975) and v.ci_high == pytest.approx(math.expm1(upper))
    row = verdict_tables.comparison_frame([v]).iloc[0]
    assert row["level"] == pytest.approx(0.975) and row["ci_high"] == pytest.approx(math.expm1(upper))
    assert row["ci95_high"] == pytest.approx(math.expm1(t_interval(d).high))
    assert (ch.verdict == SUPPORTED) == (upper < 0)
    one = judge_logs([[dict(enumerate(np.log(t1)))], [dict(enumerate(np.log(values[(2, "1")])))]], (-1.0, 1.0),
                     margin=math.log1p(0.01), alpha=0.025)
    assert one.verdict == ch.verdict and (one.bounds.low, one.bounds.high) == pytest.approx((lower, upper))
    assert judge({(): d}, alpha=0.025).verdict == ch.verdict


@pytest.mark.parametrize("level", [0.95, 0.975, 0.964375, 0.96625, 0.99375, 0.9981250, 0.9999975])
def test_a_level_is_printed_for_readers_and_kept_exact_in_the_csv(level):
    """A level reads with at most two decimals (96.44%, not 96.4375%), within half a unit of its last
    digit of the exact value, and never as 100% below 1; the interval's label prints its levels that
    way, comparisons.csv keeps the exact one."""
    from cemlab.report.stats.bounds import Bounds
    from cemlab.report.stats.percent import level_percent

    text = level_percent(level)
    digits = text[:-1].split(".")[1] if "." in text else ""
    assert text.endswith("%") and not digits.endswith("0")
    assert len(digits) <= 2 or float(f"{level * 100:.2f}") >= 100
    assert abs(float(text[:-1]) - level * 100) <= 0.5 * 10.0 ** -len(digits) + 1e-9 and text != "100%"
    a = (1 - level) / 2
    b = Bounds(-0.1, 0.1, a, a)
    assert b.level == pytest.approx(level, abs=1e-12) and b.label == level_percent(b.level) and "%" in b.label
    held = Bounds(-0.1, 0.1, a / 2, a)   # a Holm step on one end: each end's level written the same way
    assert held.label == (f"{level_percent(held.level)} (lower end {level_percent(1 - a / 2)}, "
                          f"upper {level_percent(1 - a)}, one-sided)") and held.label.count(".") <= 3
    assert level_percent(math.nan) == "n/a" and level_percent(math.nan, missing="") == ""


def test_a_sign_test_says_what_decided_and_when_it_cannot():
    """Optima on a grid, 3 seeds: the exact sign test's smallest p is 0.5^3 = 0.125, so nothing can
    decide it at one-sided 2.5%; the comparison says so, and has no t interval that 'decided'."""
    ch = verdicts.check_of_diffs("s1", "s1", [1.0, 1.0, 1.0], 0.0, "above", discrete=True)
    assert ch.bounds is None and "0.5^3 = 0.125" in ch.how and "cannot be decided at 3 seeds" in ch.how
    assert "cannot be decided" in verdicts.undecidable([ch])
    six = verdicts.check_of_diffs("s1", "s1", [1.0] * 6, 0.0, "above", discrete=True)
    assert six.verdict == SUPPORTED and verdicts.undecidable([six]) == ""


def test_seeds_for_power_answer_for_the_claim_condition():
    """``seeds_for_80pct_power``: per comparison at its support's level over the choices that may be
    picked (2 rates: half the level); per claim condition every comparison of an 'all' claim must
    be supported (more seeds than its weakest alone); shown beside the sweep's seed budget."""
    from cemlab.report.pages.writers import _power_text

    sd, delta = 0.01, 0.01
    one = verdict_tables.all_power_seeds([(sd, delta, 0.025)])
    assert one == verdict_tables.power_seeds(sd, delta, 0.025)
    assert verdict_tables.all_power_seeds([(sd, delta, 0.0125)]) > one              # the every-choice factor
    assert verdict_tables.all_power_seeds([(sd, delta, 0.025)] * 2) > one           # both must be supported
    assert verdict_tables.all_power_seeds([(sd, delta, 0.025)] * 2, rule="any") < one   # either may be
    t1b = [30.0, 31.0, 29.5, 30.2]
    grid = {(1, "1", "dplr", 2e-3): t1b, (1, "1", "dplr", 4e-3): _noisy(t1b, (1.01, 0.99, 1.0, 1.005)),
            (2, "1", "dplr", 2e-3): _noisy(t1b, (0.995, 0.99, 1.0, 0.985)),
            (2, "1", "dplr", 4e-3): _noisy(t1b, (1.0, 0.985, 1.004, 0.99))}
    v = _verdicts(grid)["same per-step eta=1"]
    (ch,) = v.checks
    assert verdict_tables.claim_level(ch) == pytest.approx(ch.alpha_claim / 2)   # T=2 may be either rate
    row = verdict_tables.comparison_frame([v]).iloc[0]
    assert row["seeds_for_80pct_power"] == verdict_tables.power_seeds(ch.power_sd, ch.margin, ch.alpha_claim / 2)
    v.seed_budget = 3
    claim = verdict_tables.verdict_frame([v]).iloc[0]
    assert claim["seeds_for_80pct_power"] == row["seeds_for_80pct_power"] and claim["seed_budget"] == 3
    assert _power_text(claim).endswith("(the sweep reaches 3; beyond it)")
