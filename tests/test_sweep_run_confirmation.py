"""A sweep with a confirmation stage end to end at smoke scale: real Ray (local), the MLflow server the
sweep starts.

A test-only ``recursion_ablation`` (the claims read the sweep their entry names) with two CEM-attention
cells (T=1 and T=2, eta=1), compared by ``t2-beats-t1``: selection on seeds 0-1 at 2e-3 and 4e-3, one
shared bracketing step, then the confirmation stage within a budget of 24 trials. Checked against what
MLflow holds, recomputed here without the report's code: each cell's chosen rate (lowest median
validation over seeds 0-1), that the step's rate reached both cells (compared cells share their
rates), that each cell ran on the fresh seeds at both chosen rates and nothing else, and that the
number of fresh seeds is floor((24 - selection trials) / C); the report's comparison is judged on the
fresh seeds only, at the union of the chosen rates.
"""

from __future__ import annotations

import csv
import json
import math
import statistics

import pytest

from cemlab.tracking import schema
from sweep_support import client_for, experiment_runs, local_sweeps, run

pytestmark = pytest.mark.slow

CONFIRMED = """\
figure: "test: confirmation"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0, 1]}
variants:
  - group: cem-attn
    label: "cem-attn T{T} {precond} eta={eta}"
    set: {model.attention: cem, model.kq_diagonal: shared, model.attn_steps: "{T}", model.attn_precond: "{precond}",
          model.attn_eta: "{eta}"}
    axes: {T: [1, 2], precond: [dplr], eta: [1]}
tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 1.6e-2]}
confirmation: {budget: {smoke: 24}, alpha: 0.045, primary: t2-beats-t1}
"""


@pytest.fixture
def sweep_env(runs_dir, tmp_path, monkeypatch, ray_local):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, recursion_ablation=CONFIRMED)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield tmp_path
    stop_server()


def test_rates_chosen_on_the_selection_seeds_then_fresh_seeds_at_the_union(sweep_env, data_cache):
    from cemlab.report.looks.confirmation_look import sweep_confirm

    first = run("recursion_ablation", data_cache, confirmer=sweep_confirm)
    assert first.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in first.outcomes]
    runs = [r for r in experiment_runs(client_for(first), "recursion_ablation")
            if r.data.tags.get(schema.ROLE) == "trial"]
    by = {}   # (T, lr, seed) -> val ppl
    for r in runs:
        key = (int(r.data.params["model.attn_steps"]), float(r.data.params["train.lr"]),
               int(r.data.params["train.seed"]))
        by[key] = r.data.metrics[schema.VAL_PPL]
    sel = {k: v for k, v in by.items() if k[2] in (0, 1)}
    rates = {T: sorted({lr for (t, lr, _) in sel if t == T}) for T in (1, 2)}
    assert rates[1] == rates[2] and len(rates[1]) == 3, rates   # one step, shared by the compared cells
    chosen = {T: min(rates[T], key=lambda lr: (statistics.median(math.log(by[(T, lr, s)]) for s in (0, 1)), lr))
              for T in (1, 2)}
    union = sorted(set(chosen.values()))
    spent = len(sel)
    c = 2 * len(union)
    n = (24 - spent) // c
    fresh = {k for k in by if k[2] >= 2}
    extra = (24 - spent - n * c) // c   # the primary condition is the only comparison: its pairs are all C
    want = {(T, lr, s) for T in (1, 2) for lr in union for s in range(2, 2 + n + extra)}
    assert fresh == want, (sorted(fresh), sorted(want))
    assert len(by) <= 24

    summary = json.loads((sweep_env / "runs" / "logs" / "recursion_ablation-smoke" / "summary.json").read_text())
    conf = summary["confirmation"]
    assert conf["spent"] == spent and conf["pairs"] == c and conf["seeds"] == n and conf["budget"] == 24
    assert conf["selection_seeds"] == [0, 1] and len(conf["extra_seeds"]) == extra

    rows = list(csv.DictReader(open(sweep_env / "reports" / "recursion_ablation" / "comparisons.csv")))
    (attn,) = [r for r in rows if r["id"] == "t2-beats-t1" and r["role"] == "primary"]
    assert int(attn["n"]) == n + extra   # judged on the fresh seeds only
    assert f"union {{{', '.join(f'{r:g}' for r in union)}}}" in attn["choice"]
    assert float(attn["level"]) == pytest.approx(1 - 0.045)
    # the effect shown is the chosen rates' mean paired difference on the fresh seeds, inside its interval
    test_of = {(int(r.data.params["model.attn_steps"]), float(r.data.params["train.lr"]),
                int(r.data.params["train.seed"])): r.data.metrics[schema.TEST_PPL] for r in runs}
    d = [math.log(test_of[(2, chosen[2], s)]) - math.log(test_of[(1, chosen[1], s)]) for s in range(2, 2 + n + extra)]
    assert float(attn["effect"]) == pytest.approx(math.expm1(statistics.mean(d)), rel=1e-6)
    assert float(attn["ci_low"]) <= float(attn["effect"]) <= float(attn["ci_high"])
