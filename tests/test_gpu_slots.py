"""Trials per GPU from measurements (``cemlab.sweeps.gpu_slots``): the rule against hand-computed cases,
the plan's line and ``cemlab sweep --gpu-slots measured`` on a real local MLflow store (sqlite in
tmp_path) holding fabricated finished runs of ``gpu``-scale trials, and the training callback logging
nothing of it on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from cemlab.sweeps.gpu_slots import trials_per_gpu
from cemlab.tracking import schema

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
GRID = ["size=[86m]", "precond=[dplr]", "lr=[2.0e-3]", "seed=[0]"]   # 9 trials of recursion_ablation at gpu
GIB = 1024.0


# -- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("peaks, total, busy, cpus, per_trial, expected", [
    # memory: floor(0.85 * 80 / 11) = 6; busy mean 0.31: ceil(1 / 0.31) = 4; CPUs 16 // 4 = 4 -> 4
    ([10 * GIB, 11 * GIB], 80 * GIB, [0.30, 0.32], 16, 4, 4),
    # memory binds: floor(0.85 * 80 / 30) = 2
    ([30 * GIB], 80 * GIB, [0.1], 64, 4, 2),
    # utilisation binds: busy 100% -> 1
    ([1 * GIB], 80 * GIB, [1.0], 64, 4, 1),
    # CPUs bind: 16 // 8 = 2
    ([1 * GIB], 80 * GIB, [0.1], 16, 8, 2),
    # busy 0: no utilisation bound, the memory bound floor(0.85 * 80 / 20) = 3
    ([20 * GIB], 80 * GIB, [0.0], 64, 1, 3),
    # the cap: memory 68, busy 10 -> 8
    ([1 * GIB], 80 * GIB, [0.1], 64, 1, 8),
    # a trial larger than the headroom still gets its GPU: at least 1
    ([79 * GIB], 80 * GIB, [0.5], 16, 4, 1),
])
def test_trials_per_gpu_takes_the_tightest_bound(peaks, total, busy, cpus, per_trial, expected):
    n, reason = trials_per_gpu(peaks, total, busy, cpus, per_trial)
    assert n == expected, reason
    assert "\n" not in reason


def test_the_reason_names_every_bound():
    n, reason = trials_per_gpu([10 * GIB, 11 * GIB], 80 * GIB, [0.30, 0.32], 16, 4)
    assert n == 4
    assert reason == "memory: 11 of 80 GiB at peak allows 6; the GPU busy 31% of a trial allows 4; 16 CPUs / 4 allows 4"
    assert "capped at 8" in trials_per_gpu([1 * GIB], 80 * GIB, [0.1], 64, 1)[1]
    assert "busy 0%" in trials_per_gpu([20 * GIB], 80 * GIB, [0.0], 64, 1)[1]


def test_no_measurement_keeps_the_scales_setting():
    for peaks, total in (([], 80 * GIB), ([10 * GIB], 0.0)):
        n, reason = trials_per_gpu(peaks, total, [], 16, 4)
        assert n == 0 and "keeping the scale's setting" in reason
    n, reason = trials_per_gpu([10 * GIB], 80 * GIB, [], 16, 4)   # memory without a busy share: memory and CPUs
    assert n == 4 and "no busy share measured" in reason


# -- the store -----------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path, monkeypatch):
    """A local sqlite MLflow store in tmp_path, the project's sweeps, and a way to add finished runs."""
    from mlflow.tracking import MlflowClient

    from cemlab.tracking.store import ensure_experiment

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    exp = ensure_experiment("cemlab/recursion_ablation", client)

    def add(trial, metrics: dict[str, float], status: str = schema.STATUS_FINISHED) -> str:
        r = client.create_run(exp, tags={schema.CONFIG_HASH: trial.config_hash, schema.STATUS: status,
                                         schema.SCALE: trial.scale})
        for k, v in metrics.items():
            client.log_metric(r.info.run_id, k, v, step=10)
        client.set_terminated(r.info.run_id, status="FINISHED" if status == schema.STATUS_FINISHED else "FAILED")
        return r.info.run_id

    return client, add


def gpu_trials():
    from cemlab.sweeps.sweepfile.load import load_sweep

    return load_sweep("recursion_ablation").expand("gpu", overrides=GRID)


def measured(peak_gib: float, busy: float) -> dict[str, float]:
    return {schema.GPU_PEAK_MIB: peak_gib * GIB, schema.GPU_TOTAL_MIB: 80 * GIB, schema.GPU_BUSY_SHARE: busy}


def fill(add, trials) -> None:
    """Three finished runs measured (peak 11 GiB, busy 31% on average), one failed run with a larger
    peak (not counted), one finished run without measurements (a CPU run: not counted)."""
    add(trials[0], measured(10, 0.30))
    add(trials[1], measured(11, 0.32))
    add(trials[2], measured(9, 0.31))
    add(trials[3], measured(70, 0.9), status=schema.STATUS_FAILED)
    add(trials[4], {schema.TEST_LOSS: 3.0})


def test_plan_prints_the_measured_trials_per_gpu(store, monkeypatch, capsys):
    from cemlab.cli import main
    from cemlab.sweeps import gpu_slots

    client, add = store
    fill(add, gpu_trials())
    monkeypatch.setattr(gpu_slots, "cpus_per_node", lambda: 16)
    assert main(["plan", "recursion_ablation", "--scale", "gpu", *GRID]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("Trials per GPU"))
    assert line == ("Trials per GPU: measured 4 (memory: 11 of 80 GiB at peak allows 6; the GPU busy 31% of a trial "
                    "allows 4; 16 CPUs / 4 allows 4; 3 finished runs) against the scale's 4 (gpus_per_worker 0.25)")


def test_plan_prints_no_line_without_measurements(store, capsys):
    from cemlab.cli import main

    client, add = store
    add(gpu_trials()[0], {schema.TEST_LOSS: 3.0})
    assert main(["plan", "recursion_ablation", "--scale", "gpu", *GRID]) == 0
    assert "Trials per GPU" not in capsys.readouterr().out
    assert main(["plan", "recursion_ablation", "--scale", "gpu", "--no-store", *GRID]) == 0
    assert "Trials per GPU" not in capsys.readouterr().out


def _stop_before_ray(monkeypatch) -> list:
    """run_sweep up to its first check on the trials, which records them and stops it (nothing runs)."""
    from cemlab.sweeps.stages import preflight

    seen = []

    def stop(spec, trials):
        seen.append(trials)
        raise KeyboardInterrupt

    monkeypatch.setattr(preflight, "check_before_ray", stop)
    return seen


def test_gpu_slots_measured_sets_gpus_per_worker_to_one_over_the_count(store, monkeypatch):
    from cemlab.sweeps import gpu_slots
    from cemlab.sweeps.runner import run_sweep

    client, add = store
    trials = gpu_trials()
    fill(add, trials)
    monkeypatch.setattr(gpu_slots, "cpus_per_node", lambda: 8)   # 8 CPUs / 4: 2 trials per GPU
    seen = _stop_before_ray(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_sweep("recursion_ablation", "gpu", overrides=GRID, gpu_slots="measured")
    assert {t.resources.gpus_per_worker for t in seen[0]} == {0.5}
    assert [t.config_hash for t in seen[0]] == [t.config_hash for t in trials]   # resources are outside the hash
    with pytest.raises(KeyboardInterrupt):   # the default keeps the file's setting
        run_sweep("recursion_ablation", "gpu", overrides=GRID)
    assert {t.resources.gpus_per_worker for t in seen[1]} == {0.25}


def test_gpu_slots_measured_reaches_trials_added_later(store, monkeypatch):
    """Seeds and bracketing rates are expanded from the parsed file later and run through the same stage
    (``execute.run_grid``), which applies the sweep's runtime share (kept on its ``Invocation``, never on
    the parsed file): they get the measured share too; CPU trials keep no GPU."""
    from cemlab.sweeps.gpu_slots import with_share
    from cemlab.sweeps.stages import execute
    from cemlab.sweeps.stages.invocation import Invocation
    from cemlab.sweeps.sweepfile.load import load_sweep

    spec = load_sweep("recursion_ablation")
    added = spec.expand("gpu", overrides=[*GRID[:3], "seed=[5]"])
    assert {t.resources.gpus_per_worker for t in added} == {0.25}   # the parsed file is left as it is
    seen = {}
    monkeypatch.setattr(execute, "_fit", lambda state, job, **kw: seen.update(job=job, **kw))
    inv = Invocation.__new__(Invocation)
    inv.gpu_share, inv.spec, inv.scale = 1 / 3, spec, "gpu"
    monkeypatch.setattr(Invocation, "job", lambda self, trials=None, cell=None: trials)
    execute.run_grid(inv, {t.trial_id: t for t in added})
    assert {t.resources.gpus_per_worker for t in seen["job"].values()} == {1 / 3}
    assert seen["resources"].gpus_per_worker == 1 / 3
    assert {t.resources.gpus_per_worker for t in with_share(spec.expand("smoke"), 1 / 3)} == {0}


def test_gpu_slots_measured_without_measurements_is_refused_naming_the_flag(store, monkeypatch, capsys):
    from cemlab.cli import main
    from cemlab.sweeps.gpu_slots import NoMeasurement
    from cemlab.sweeps.runner import run_sweep

    seen = _stop_before_ray(monkeypatch)
    with pytest.raises(NoMeasurement, match="--gpu-slots measured: no finished run .* measured its GPU") as e:
        run_sweep("recursion_ablation", "gpu", overrides=GRID, gpu_slots="measured")
    assert "--gpu-slots scale" in str(e.value) and seen == []
    assert main(["sweep", "recursion_ablation", "--scale", "gpu", *GRID, "--gpu-slots", "measured",
                 "--no-report"]) == 2
    assert "--gpu-slots measured" in capsys.readouterr().err


def test_the_flag_reaches_the_runner_and_its_resume_command(monkeypatch):
    import cemlab.sweeps.runner as runner
    from cemlab.cli import main

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    got = []

    def fake_run_sweep(*args, **kwargs):
        got.append(kwargs)
        raise KeyboardInterrupt   # stop before anything runs

    monkeypatch.setattr(runner, "run_sweep", fake_run_sweep)
    assert main(["sweep", "recursion_ablation", "--scale", "gpu", "--gpu-slots", "measured", "--no-report"]) == 130
    assert main(["sweep", "recursion_ablation", "--scale", "gpu", "--no-report"]) == 130
    assert [k["gpu_slots"] for k in got] == ["measured", "scale"]
    assert "--gpu-slots measured" in got[0]["command"] and "--gpu-slots" not in got[1]["command"]


# -- the measurement -----------------------------------------------------------------------------
def test_the_callback_logs_no_gpu_metrics_on_the_cpu():
    """On the CPU, the end of training logs nothing of the GPU (the CUDA branch is checked in
    ``test_the_callback_logs_gpu_metrics_on_cuda`` with torch.cuda stood in for)."""
    from types import SimpleNamespace

    import torch

    cb, logged = _callback()
    module = SimpleNamespace(device=torch.device("cpu"))
    cb.on_train_start(SimpleNamespace(global_step=0), module)
    cb.on_train_end(SimpleNamespace(global_step=10), module)
    assert logged == [] and not any(k.startswith("system/") for k in cb.latest)


def test_the_callback_logs_gpu_metrics_on_cuda(monkeypatch):
    from types import SimpleNamespace

    import torch

    from cemlab import timing

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(timing, "_trial_start", None)
    monkeypatch.setattr(timing, "process_start", lambda: 1000.0)
    monkeypatch.setattr("cemlab.train.callbacks.time.time", lambda: 1100.0)   # 100 s of slot time
    cb, logged = _callback()
    cb.train_seconds = 25.0
    module = SimpleNamespace(device=torch.device("cuda", 0))
    cb.on_train_start(SimpleNamespace(global_step=0), module)
    cb.on_train_end(SimpleNamespace(global_step=10), module)
    assert logged == [({schema.GPU_PEAK_MIB: 3 * GIB, schema.GPU_TOTAL_MIB: 80 * GIB, schema.GPU_BUSY_SHARE: 0.25}, 10)]


def _callback():
    from types import SimpleNamespace

    from cemlab.tasks import get_task
    from cemlab.train.callbacks import RunCallback

    logged = []
    metrics = SimpleNamespace(add_many=lambda values, step: logged.append((values, step)))
    plan = SimpleNamespace(tokens_per_step=128, micro_batch_size=8, total_steps=10)
    cb = RunCallback(plan=plan, task=get_task("lm"), val_dataset=list(range(16)), energy_batch=None, folder=None,
                     state={}, metrics=metrics, flops_per_unit=1.0, val_batches=1, peak_flops=None)
    return cb, logged
