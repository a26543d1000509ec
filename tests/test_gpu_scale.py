"""The one-GPU scale (``sweeps/scales.yaml``: ``gpu``) and the time ``cemlab plan`` gives for it:
real language models at Chinchilla tokens, bf16 and compiled, several trials per GPU, and a time
estimate on the GPU this machine has or, without one, on the named reference GPU."""

from __future__ import annotations

import json

import pytest

#: Training tokens of the embedded corpus at the gpu scale's 1024-token BPE (the standard library's
#: 12 M characters, as measured for the workstation scale, which has the same BPE: sweeps/scales.yaml).
CORPUS_TOKENS = 4.1e6


@pytest.fixture(scope="module")
def plan():
    from cemlab.sweeps.plan import plan_sweep

    return plan_sweep("recursion_ablation", "gpu", read_store=False)


def test_gpu_scale_trains_real_models_at_20_tokens_per_parameter_within_the_corpus(plan):
    from cemlab.models import build_model, count_parameters

    assert len(plan.rows) == 216   # the sweep file's gpu grid: 4 sizes x 9 cells (dplr) x 2 learning rates x 3 seeds
    llamas = {}
    for r in plan.rows:
        cfg, res = r.trial.config, r.trial.resources
        key = cfg.model.matched_baseline().model_dump_json()
        if key not in llamas:
            llamas[key] = count_parameters(build_model(cfg.model.matched_baseline()))["total"]
        assert r.budget_params == llamas[key] and r.tokens >= 20 * llamas[key]
        assert r.tokens <= 8 * CORPUS_TOKENS, f"{r.trial.trial_id}: {r.tokens / CORPUS_TOKENS:.1f} epochs"
        assert cfg.train.precision == "bf16-mixed" and cfg.train.compile is True
        assert cfg.data.source == "stdlib" and cfg.model.vocab_size == 1024
        assert (res.workers, res.gpus_per_worker, res.cpus_per_worker) == (1, 0.25, 4)
    assert max(llamas.values()) > 1_000_000 and min(llamas.values()) > 400_000   # real, if small, models


def test_plan_times_a_gpu_scale_on_the_reference_gpu_without_one(plan, monkeypatch, capsys):
    from cemlab import hardware
    from cemlab.cli import main
    from cemlab.sweeps import plan as planning

    monkeypatch.setattr(planning, "visible_gpus", lambda: (None, 0))
    g = planning.gpu_time_estimate(plan.rows, 0.4)
    flops = sum(r.flops for r in plan.rows)
    assert g["kind"] == hardware.REFERENCE_KIND and not g["found"] and g["trials"] == 216
    assert g["gpu_seconds"] == pytest.approx(flops / (989e12 * 0.4))
    assert g["wall_seconds"] == g["gpu_seconds"] and g["trials_per_gpu"] == 4
    assert g["trial_seconds"][0] < g["trial_seconds"][1] < 10   # seconds of training FLOPs: overhead-bound trials

    assert main(["plan", "recursion_ablation", "--scale", "gpu", "--no-store", "--mfu", "0.25", "size=[86m]",
                 "precond=[dplr]", "lr=[2.0e-3]", "seed=[0]"]) == 0
    out = capsys.readouterr().out
    assert "9 trials" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("GPU time"))
    assert "no GPU here; estimated for the H100 SXM (989 TFLOP/s dense bf16), at 25% MFU" in line
    assert "for 9 trials" in line and "4 trials at once per GPU" in line
    assert main(["plan", "recursion_ablation", "--scale", "gpu", "--no-store", "--json", "seed=[0]"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_time"]["trials"] == len(data["trials"]) == 72 and data["gpu_time"]["mfu"] == 0.4


def test_plan_times_a_gpu_scale_on_the_gpus_it_finds(plan, monkeypatch):
    from cemlab.sweeps import plan as planning

    monkeypatch.setattr(planning, "visible_gpus", lambda: ("NVIDIA H200", 2))
    g = planning.gpu_time_estimate(plan.rows, 0.4)
    assert g["found"] and g["kind"] == "H200" and g["device"] == "NVIDIA H200"
    assert g["wall_seconds"] == pytest.approx(g["gpu_seconds"] / 2)
    monkeypatch.setattr(planning, "visible_gpus", lambda: ("NVIDIA L4", 1))   # not in cemlab's table
    g = planning.gpu_time_estimate(plan.rows, 0.4)
    assert not g["found"] and g["kind"] == "H100 SXM" and g["device"] == "NVIDIA L4"


def test_cpu_scales_get_no_gpu_time():
    from cemlab.sweeps.plan import plan_sweep

    assert plan_sweep("recursion_ablation", "smoke", read_store=False).gpu_time == {}
