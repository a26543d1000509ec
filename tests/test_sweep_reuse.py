"""A grid sweep runs its trials in warm, reused worker processes (Tune's ``reuse_actors``), and that
gives nothing up: a trial that follows another in the same process gets exactly the numbers it
gets in a fresh process (every logged training loss, validation and test metric, bit for bit), and
so do the trials after one that crashed (Tune does not reuse a worker whose trial failed: they run
in a new one, then share it), and a trial that leaked memory past its worker's limit
(``cemlab.sweeps.trial.memory``: its worker ends itself, the trial resumes from its checkpoint on
a fresh one, with the numbers of a run that never leaked, and the next trial shares that one).

Real Ray with one CPU (so the trials run one after another and the process is reused), a real
MLflow server per runs folder, the smoke scale. The same three-trial sweep runs twice: once with
reused workers, once with a fresh process per trial (``CEMLAB_SWEEP_REUSE_WORKERS=0``); its last two
trials run once more with reused workers and a leak.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from sweep_support import client_for, local_sweeps, run

from cemlab import timing
from cemlab.tracking import schema

pytestmark = pytest.mark.slow

THREE = """\
figure: "test: reuse"
axes: {size: [86m], lr: [1.0e-3, 2.0e-3, 3.0e-3]}
variants:
  - {group: llama, label: llama}
"""
CRASHED = "86m__llama__lr1e-3__s0"
LEAKED = "86m__llama__lr2e-3__s0"
LIMIT_MB, LEAK_MB = 2500, 3000  # a smoke worker holds well under the limit until it leaks


@pytest.fixture(scope="module")
def ray_one_cpu():
    import ray

    from cemlab.sweeps.stages.execute import quiet_tune

    quiet_tune()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


def _sweep(tmp_path: Path, name: str, data_cache: Path, monkeypatch, reuse: bool, overrides=None,
           leak: bool = False) -> dict:
    """Run the sweep in its own runs folder; per trial: its outcome, the pid that ran it and the
    metric histories of its run."""
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / name / "runs"))
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / name / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEP_REUSE_WORKERS", "1" if reuse else "0")
    # the first trial in the grid crashes at its first validation on every attempt; with ``leak``,
    # the second leaks LEAK_MB at its first validation on its first attempt, over a LIMIT_MB limit,
    # and has a retry
    faults = {"*lr1e-3*": {"times": -1, "at_report": 1}}
    if leak:
        faults[LEAKED] = {"leak_mb": LEAK_MB, "times": 1, "at_report": 1}
        monkeypatch.setenv("CEMLAB_WORKER_MEMORY_MB", str(LIMIT_MB))
    else:
        monkeypatch.delenv("CEMLAB_WORKER_MEMORY_MB", raising=False)
    monkeypatch.setenv("CEMLAB_SWEEP_FAULTS", json.dumps(faults))
    try:
        result = run("three", data_cache, report=False, retries=1 if leak else 0, overrides=overrides)
        client = client_for(result)
        out = {}
        for o in result.outcomes:
            pids = re.findall(r"pid (\d+) node", Path(o.log_path).read_text())
            histories = {}
            if o.status == "finished":
                run_ = client.get_run(o.run_id)
                for key in sorted(run_.data.metrics):
                    if key.startswith(("train/loss", "val/", "test/")):
                        histories[key] = sorted((m.step, m.value) for m in client.get_metric_history(o.run_id, key))
            out[o.trial.trial_id] = {"status": o.status, "pids": pids, "metrics": histories}
        spans = timing.read_spans(tmp_path / name / "runs" / "logs" / "three-smoke" / timing.STAGES_NAME)
        out["_stages"] = spans
        return out
    finally:
        stop_server()


def test_reused_worker_trials_are_bit_identical_to_fresh_ones_after_a_crash_and_a_leak(tmp_path, data_cache, monkeypatch,
                                                                               ray_one_cpu):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, three=THREE)))
    warm = _sweep(tmp_path, "warm", data_cache, monkeypatch, reuse=True)
    # the baseline: the two trials that follow the crash, each in a fresh process
    cold = _sweep(tmp_path, "cold", data_cache, monkeypatch, reuse=False, overrides=["lr=[2.0e-3,3.0e-3]"])
    leaky = _sweep(tmp_path, "leaky", data_cache, monkeypatch, reuse=True, overrides=["lr=[2.0e-3,3.0e-3]"], leak=True)

    stages = {"warm": warm.pop("_stages"), "cold": cold.pop("_stages")}
    finished = ["86m__llama__lr2e-3__s0", "86m__llama__lr3e-3__s0"]
    assert {t: v["status"] for t, v in warm.items()} == {CRASHED: "failed", **{t: "finished" for t in finished}}
    assert {t: v["status"] for t, v in cold.items()} == {t: "finished" for t in finished}
    assert len({v["pids"][-1] for v in cold.values()}) == 2   # cold: a process per trial
    pids = {t: v["pids"] for t, v in warm.items()}
    assert pids[finished[0]][-1] == pids[finished[1]][-1], f"the worker was not reused: {pids}"
    # the stage timestamps: a worker start per process, a fit for every finished trial (the crashed
    # one has one too: it crashed inside it), in both sweeps
    for label, runs in (("warm", warm), ("cold", cold)):
        starts = [x for x in stages[label] if x["stage"] == "worker start"]
        assert len(starts) == len({v["pids"][-1] for v in runs.values()}), label
        assert set(finished) <= {x["trial"] for x in stages[label] if x["stage"] == "fit"}, label
    for t in finished:
        metrics = warm[t]["metrics"]
        assert metrics[schema.TRAIN_LOSS] and metrics[schema.TEST_PPL] and any(k.startswith("val/") for k in metrics)
        assert metrics == cold[t]["metrics"], t   # exact: every step's value, bit for bit

    # the leak: the first attempt's worker ended itself at the limit, which the trial's log names;
    # the trial was retried in another process (from its last checkpoint, if it had written one),
    # which the other trial shared
    stages["leaky"] = leaky.pop("_stages")
    assert {t: v["status"] for t, v in leaky.items()} == {t: "finished" for t in finished}
    pids = {t: v["pids"] for t, v in leaky.items()}
    assert len(pids[LEAKED]) == 2 and pids[LEAKED][0] != pids[LEAKED][1], pids
    assert pids[finished[0]][-1] == pids[finished[1]][-1], f"the worker was not reused: {pids}"
    log = (tmp_path / "leaky" / "runs" / "logs" / "three-smoke" / f"{LEAKED}.log").read_text()
    assert f"over its limit of {LIMIT_MB} MiB (CEMLAB_WORKER_MEMORY_MB" in log
    runs = re.findall(r"MLflow run ([0-9a-f]{32})", log)
    assert len(runs) == 2 and runs[0] == runs[1], runs   # the retry continued the trial's own run
    # the process the guard ended wrote no stage timestamps; the one after it did
    assert {x["trial"] for x in stages["leaky"] if x["stage"] == "worker start"} <= set(finished)
    assert len([x for x in stages["leaky"] if x["stage"] == "worker start"]) == 1
    for t in finished:
        assert leaky[t]["metrics"] == cold[t]["metrics"], t   # each step once, bit for bit
