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
from cemlab.report.stats import (CONTRADICTED, INCONCLUSIVE, NOT_ENOUGH, SUPPORTED, Interval, combine, judge,
                                 t_interval)
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

def _trials(values: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    """Trials of cem-attn cells (T, eta) -> per-seed test perplexities, as ``table.join_trials`` makes them."""
    rows = []
    for (T, eta), vals in values.items():
        for seed, v in enumerate(vals):
            cell = json.dumps({"T": T, "eta": eta, "precond": "dplr", "size": "86m", "sweep": "recursion_ablation"},
                              sort_keys=True)
            rows.append(dict(order=len(rows), sweep="recursion_ablation", figure="Fig 2c", scale="tiny",
                             family="cem-attn", group="cem-attn", variant=f"cem-attn T{T} dplr eta={eta}", size="86m",
                             task="lm", metric="test/ppl", lr=2e-3, T=T, precond="dplr", kq_diagonal="shared",
                             kernel="", param_matched=False, eta=eta, x0="h", corpus="stdlib", cell=cell, seed=seed,
                             status="finished" if math.isfinite(v) else "diverged", run_id=f"r{len(rows)}", value=v,
                             params_total=1e5, token_budget=5e5, total_steps=400.0, train_tokens=2e5,
                             flops_per_token=1.0,
                             params_attention=1.0, params_mlp=1.0, params_embedding=1.0, flops_per_example=math.nan))
    return pd.DataFrame(rows)


def _verdicts(values, sweeps: dict[str, list[str]] | None = None) -> dict[str, verdicts.Verdict]:
    trials = _trials(values)
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
    assert set(v) == {"eta=1", "eta=1/T"}
    worse, null = v["eta=1"], v["eta=1/T"]
    assert worse.verdict == CONTRADICTED and null.verdict == INCONCLUSIVE
    for verdict, factors in ((worse, (1.05, 1.06, 1.055, 1.052)), (null, (1.004, 0.996, 1.003, 0.995))):
        rel = np.array(factors) - 1
        ref = sps.ttest_1samp(rel, 0.0).confidence_interval(0.95)
        assert verdict.n_seeds == 4 and verdict.effect == pytest.approx(rel.mean())
        assert (verdict.ci_low, verdict.ci_high) == pytest.approx((ref.low, ref.high))
        assert verdict.tokens_per_param == pytest.approx(5.0) and verdict.steps == 400
        assert verdict.corpus == "stdlib (2.5 epochs)"  # 5e5 tokens trained on a 2e5-token training split
    # a true effect in the claim's favour
    better = _verdicts({(1, "1"): t1, (2, "1"): [x * f for x, f in zip(t1, (0.95, 0.96, 0.94, 0.955))]})["eta=1"]
    assert better.verdict == SUPPORTED and better.ci_high < 0


def test_one_seed_shows_its_numbers_but_is_inconclusive():
    v = _verdicts({(1, "1"): [30.0, math.nan], (2, "1"): [24.0, 25.0]})["eta=1"]
    assert v.verdict == INCONCLUSIVE and v.n_seeds == 1
    assert v.effect == pytest.approx(24.0 / 30.0 - 1) and math.isnan(v.ci_low) and math.isnan(v.ci_high)
    assert "T=1 30, T=2 24.5" in v.numbers and "no interval" in v.numbers and "n=1" in v.numbers


def test_claims_csv_has_the_columns_scripts_read():
    frame = verdicts.verdict_frame(list(_verdicts({(1, "1"): [30.0, 31.0], (2, "1"): [29.0, 30.5]}).values()))
    assert {"effect", "ci_low", "ci_high", "n_seeds", "tokens_per_param", "steps", "corpus", "paper_regime",
            "condition"} <= set(frame.columns)
    assert set(frame["verdict"]) <= {SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_ENOUGH}


def test_a_claim_reads_only_the_sweeps_whose_files_list_it():
    values = {(1, "1"): [30.0, 31.0, 29.5], (2, "1"): [29.0, 30.1, 28.7]}
    listed = _verdicts(values, {"t2-beats-t1": ["recursion_ablation"]})["eta=1"]
    assert listed.verdict == SUPPORTED and listed.sweeps == ["recursion_ablation"]
    assert verdicts.verdict_frame([listed])["sweeps"].tolist() == ["recursion_ablation"]
    # the same runs, but no sweep file lists the claim: its rule finds no cells
    (unlisted,) = _verdicts(values, {"t2-beats-t1": []}).values()
    assert unlisted.verdict == NOT_ENOUGH and unlisted.sweeps == [] and unlisted.numbers == ""
