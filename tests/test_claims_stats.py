"""Confidence intervals and verdict rules of the claims, on constructed data (no store needed).

The interval is checked against scipy's one-sample t-test interval of the paired differences (an
independent computation); the verdicts against data with a true effect, a null effect and one seed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from cemlab.report import claims, verdicts
from cemlab.report.stats import (CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, NOT_ENOUGH, SUPPORTED, Interval,
                                 bonferroni_level, combine, judge, t_interval)
from cemlab.report.table import aggregate


@pytest.mark.parametrize("diffs", [[-0.05, -0.04, -0.06], [0.01, -0.02, 0.03, 0.0, -0.01], [0.2, 0.1]])
def test_t_interval_equals_scipy_one_sample_t_interval(diffs):
    iv = t_interval(diffs)
    ref = sps.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert iv.n == len(diffs) and iv.effect == pytest.approx(np.mean(diffs), abs=1e-15)
    assert (iv.low, iv.high) == pytest.approx((ref.low, ref.high), rel=1e-12)


def test_one_seed_has_no_interval_and_is_inconclusive():
    iv = t_interval([-0.3, math.nan])  # a diverged seed does not count
    assert iv.n == 1 and iv.effect == -0.3 and math.isnan(iv.low) and math.isnan(iv.high)
    assert judge(iv, 0.0, "below") == INCONCLUSIVE  # even a -30% effect: one seed cannot decide
    assert judge(t_interval([]), 0.0, "below") == NOT_ENOUGH


def test_judge_sides_and_combine():
    assert judge(Interval(-0.05, -0.07, -0.03, 3), 0.0, "below") == SUPPORTED
    assert judge(Interval(0.05, 0.03, 0.07, 3), 0.0, "below") == CONTRADICTED
    assert judge(Interval(0.0, -0.02, 0.02, 3), 0.0, "below") == INCONCLUSIVE
    assert judge(Interval(0.03, 0.02, 0.04, 3), 0.01, "above") == SUPPORTED
    assert judge(Interval(0.0, -0.01, 0.005, 3), 0.01, "above") == CONTRADICTED
    assert combine([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert combine([SUPPORTED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([INCONCLUSIVE, CONTRADICTED, SUPPORTED]) == CONTRADICTED
    assert combine([]) == NOT_ENOUGH


# ----------------------------------------------------------------------------------------------
# A recursion_ablation grid written as trials: T=1, and T=2 at two step sizes, several seeds
# ----------------------------------------------------------------------------------------------

def _trials(values: dict[tuple, list[float]], val: dict[tuple, list[float]] | None = None) -> pd.DataFrame:
    """Trials of cem-attn cells (T, eta[, precond[, lr]]) -> per-seed test perplexities (and
    validation perplexities ``val``, else none), as ``table.join_trials`` makes them."""
    rows = []
    for key, vals in values.items():
        T, eta, precond, lr = (*key, "dplr", 2e-3)[:4] if len(key) == 2 else (*key, 2e-3)[:4]
        vv = (val or {}).get(key, [math.nan] * len(vals))
        for seed, (v, w) in enumerate(zip(vals, vv)):
            cell = json.dumps({"T": T, "eta": eta, "precond": precond, "size": "86m", "sweep": "recursion_ablation",
                               "lr": lr}, sort_keys=True)
            rows.append(dict(order=len(rows), sweep="recursion_ablation", figure="Fig 2c", scale="tiny",
                             family="cem-attn", group="cem-attn", variant=f"cem-attn T{T} {precond} eta={eta}",
                             size="86m", task="lm", metric="test/ppl", lr=lr, T=T, precond=precond,
                             kq_diagonal="shared", kernel="", param_matched=False, eta=eta, x0="h", corpus="stdlib",
                             cell=cell, seed=seed, val=w,
                             status="finished" if math.isfinite(v) else "diverged", run_id=f"r{len(rows)}", value=v,
                             params_total=1e5, token_budget=5e5, total_steps=400.0, train_tokens=2e5,
                             flops_per_token=1.0,
                             params_attention=1.0, params_mlp=1.0, params_embedding=1.0, flops_per_example=math.nan))
    return pd.DataFrame(rows)


def _verdicts(values, sweeps: dict[str, list[str]] | None = None, val=None) -> dict[str, verdicts.Verdict]:
    trials = _trials(values, val)
    cells = aggregate(trials)
    empty = pd.DataFrame(columns=cells.columns)
    out = verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                            lambda s: cells if s == "recursion_ablation" else empty, "tiny",
                            lambda s: trials if s == "recursion_ablation" else trials.iloc[:0], sweeps=sweeps)
    return {v.condition: v for v in out}


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
        rel = np.array(factors) - 1
        ref = sps.ttest_1samp(rel, 0.0).confidence_interval(0.95)
        assert verdict.n_seeds == 4 and verdict.effect == pytest.approx(rel.mean())
        assert (verdict.ci_low, verdict.ci_high) == pytest.approx((ref.low, ref.high))
        assert verdict.tokens_per_param == pytest.approx(5.0) and verdict.steps == 400
        assert verdict.corpus == "stdlib (2.5 epochs)"  # 5e5 tokens trained on a 2e5-token training split
    # a true effect in the claim's favour
    better = _verdicts({(1, "1"): t1, (2, "1"): [x * f for x, f in zip(t1, (0.95, 0.96, 0.94, 0.955))]})[
        "same per-step eta=1"]
    assert better.verdict == SUPPORTED and better.ci_high < 0


def test_one_seed_shows_its_numbers_but_is_inconclusive():
    v = _verdicts({(1, "1"): [30.0, math.nan], (2, "1"): [24.0, 25.0]})["same per-step eta=1"]
    assert v.verdict == INCONCLUSIVE and v.n_seeds == 1
    assert v.effect == pytest.approx(24.0 / 30.0 - 1) and math.isnan(v.ci_low) and math.isnan(v.ci_high)
    assert "T=1 eta=1 30, T=2 eta=1 24.5" in v.numbers and "no interval" in v.numbers and "n=1" in v.numbers


def test_claims_csv_has_the_columns_scripts_read():
    frame = verdicts.verdict_frame(list(_verdicts({(1, "1"): [30.0, 31.0], (2, "1"): [29.0, 30.5]}).values()))
    assert {"effect", "ci_low", "ci_high", "n_seeds", "tokens_per_param", "steps", "corpus", "paper_regime",
            "condition", "verdict_shared_lr", "verdict_changes", "margin", "primary"} <= set(frame.columns)
    assert set(frame["verdict"]) <= {SUPPORTED, CONTRADICTED, NEGLIGIBLE, INCONCLUSIVE, NOT_ENOUGH}


def test_a_claim_reads_only_the_sweeps_whose_files_list_it():
    values = {(1, "1"): [30.0, 31.0, 29.5], (2, "1"): [29.0, 30.1, 28.7]}
    listed = _verdicts(values, {"t2-beats-t1": ["recursion_ablation"]})["same per-step eta=1"]
    assert listed.verdict == SUPPORTED and listed.sweeps == ["recursion_ablation"]
    assert verdicts.verdict_frame([listed])["sweeps"].tolist() == ["recursion_ablation"]
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
    level = bonferroni_level(1, equivalence=True)
    iv = t_interval(diffs, level)
    # TOST at alpha = 5%: the 90% interval; scipy's one-sample t interval as the reference
    ref = sps.ttest_1samp(diffs, 0.0).confidence_interval(0.90)
    assert level == pytest.approx(0.90) and (iv.low, iv.high) == pytest.approx((ref.low, ref.high), rel=1e-12)
    # the two one-sided tests: p-values of H0 effect <= -m and effect >= m
    lo_p = sps.ttest_1samp(diffs, -0.02, alternative="greater").pvalue
    hi_p = sps.ttest_1samp(diffs, 0.02, alternative="less").pvalue
    assert (max(lo_p, hi_p) < 0.05) == (expected == SUPPORTED)
    assert judge(iv, 0.02, "within") == expected


def test_negligible_is_a_difference_inside_the_smallest_effect_of_interest():
    tiny = Interval(-0.003, -0.006, -0.0005, 3)  # significant but inside +-1%
    assert judge(tiny, 0.0, "below", margin=0.01) == NEGLIGIBLE
    assert judge(tiny, 0.0, "below") == SUPPORTED  # a zero tolerance called it supported
    assert judge(Interval(-0.03, -0.05, -0.005, 3), 0.0, "below", margin=0.01) == SUPPORTED  # reaches past -1%
    assert combine([SUPPORTED, NEGLIGIBLE]) == NEGLIGIBLE and combine([NEGLIGIBLE, CONTRADICTED]) == CONTRADICTED
    assert combine([CONTRADICTED, SUPPORTED], "any") == SUPPORTED


def test_bonferroni_over_a_claims_comparisons():
    """Three preconditioners make a family of three T=2-vs-T=1 comparisons per condition: each is
    judged on its 1 - 0.05/3 interval; 'none' is significant at 95% alone but not after correction."""
    t1 = [30.0, 31.0, 29.5]
    f = {"none": (0.98, 0.965, 0.975), "diag": (0.90, 0.91, 0.905), "dplr": (0.92, 0.93, 0.91)}
    values = {}
    for p, fac in f.items():
        values[(1, "1", p)] = t1
        values[(2, "1", p)] = [x * y for x, y in zip(t1, fac)]
    v = _verdicts(values)["same per-step eta=1"]
    assert v.n_comparisons == 3
    none = next(c for c in v.checks if "none" in c.label)
    d = np.array(f["none"]) - 1
    alone, adjusted = (sps.ttest_1samp(d, 0.0).confidence_interval(x) for x in (0.95, 1 - 0.05 / 3))
    assert alone.high < 0 < adjusted.high  # the correction changes this comparison's verdict
    assert (none.iv.low, none.iv.high) == pytest.approx((adjusted.low, adjusted.high), rel=1e-12)
    assert none.verdict == INCONCLUSIVE and v.verdict == INCONCLUSIVE
    frame = verdicts.comparison_frame([v])
    assert len(frame) == 3 and set(frame["level"].round(6)) == {round(1 - 0.05 / 3, 6)}


def _lr_grid():
    """T=1 and T=2 at two learning rates. Validation prefers lr 4e-3 for both; at 2e-3 the test
    noise of T=2 makes it look best on test (a choice on test would pick it)."""
    t1 = [30.0, 31.0, 29.5]
    test = {(1, "1", "dplr", 2e-3): [x * 1.02 for x in t1], (1, "1", "dplr", 4e-3): t1,
            (2, "1", "dplr", 2e-3): [x * 0.90 for x in t1], (2, "1", "dplr", 4e-3): [x * 1.03 for x in t1]}
    val = {(1, "1", "dplr", 2e-3): [x * 1.05 for x in t1], (1, "1", "dplr", 4e-3): t1,
           (2, "1", "dplr", 2e-3): [x * 1.10 for x in t1], (2, "1", "dplr", 4e-3): [x * 1.04 for x in t1]}
    return test, val


def test_cells_are_chosen_on_validation_and_judged_on_test():
    test, val = _lr_grid()
    v = _verdicts(test, val=val)["same per-step eta=1"]
    # chosen on validation: both at 4e-3; judged on test there: T=2 is 3% worse
    assert v.effect == pytest.approx(0.03) and v.verdict == CONTRADICTED
    assert verdicts.comparison_frame([v])["lr"].tolist() == ["0.004"]
    # chosen on test, T=2 would be at 2e-3 (0.90 of T=1's 4e-3): a -10% 'support' from test noise
    on_test = _verdicts(test)["same per-step eta=1"]  # no validation metric: falls back to test
    assert on_test.effect == pytest.approx(-0.10) and on_test.verdict == SUPPORTED


def test_shared_and_tuned_verdicts_side_by_side():
    test, val = _lr_grid()
    val[(1, "1", "dplr", 2e-3)] = [30.0 * 0.9, 31.0 * 0.9, 29.5 * 0.9]  # mean val over cells: 2e-3 best
    v = _verdicts(test, val=val)["same per-step eta=1"]
    # tuned: T=1 at 2e-3, T=2 at 4e-3 -> 1.03/1.02 - 1 = +1.0% (negligible); shared 2e-3: 0.90/1.02 - 1 = -11.8%
    assert v.shared_lr == pytest.approx(2e-3)
    assert v.effect == pytest.approx(1.03 / 1.02 - 1)
    assert v.verdict_shared_lr == SUPPORTED and v.verdict == NEGLIGIBLE and v.verdict_changes
    row = verdicts.verdict_frame([v]).iloc[0]
    assert row["verdict_changes"] and row["verdict_shared_lr"] == SUPPORTED
