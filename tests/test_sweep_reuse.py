"""A grid sweep runs its trials in warm, reused worker processes (Tune's ``reuse_actors``), and that
gives nothing up: a trial that follows another in the same process gets exactly the numbers it
gets in a fresh process (every logged training loss, validation and test metric, bit for bit);
a trial whose attempt crashed, and one whose attempt leaked memory past its worker's limit
(``cemlab.sweeps.trial.memory``: the worker ends itself), are retried on a fresh worker (Tune does
not reuse a worker whose trial failed) with the numbers of a run that never failed, and the trials
around them keep theirs.

Real Ray with one CPU (so the trials run one after another and the process is reused), a real
MLflow server per runs folder, the smoke scale. The same three-trial sweep runs twice: once with
reused workers, a crash and a leak; once with a fresh process per trial
(``CEMLAB_SWEEP_REUSE_WORKERS=0``) and no fault.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ray_support import local_ray
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
    with local_ray(num_cpus=1):
        yield


def _sweep(tmp_path: Path, name: str, data_cache: Path, monkeypatch, reuse: bool, faults: bool) -> dict:
    """Run the sweep in its own runs folder; per trial: its outcome, the pids that ran its attempts
    and the metric histories of its run. ``faults``: the first trial crashes at its first validation
    and the second leaks LEAK_MB there, over a LIMIT_MB limit, each on its first attempt only."""
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / name / "runs"))
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / name / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEP_REUSE_WORKERS", "1" if reuse else "0")
    spec = {CRASHED: {"times": 1, "at_report": 1}, LEAKED: {"leak_mb": LEAK_MB, "times": 1, "at_report": 1}}
    monkeypatch.setenv("CEMLAB_SWEEP_FAULTS", json.dumps(spec if faults else {}))
    monkeypatch.setenv("CEMLAB_WORKER_MEMORY_MB", str(LIMIT_MB))
    try:
        result = run("three", data_cache, report=False, retries=1 if faults else 0)
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


def test_reused_worker_trials_are_bit_identical_to_fresh_ones_around_a_crash_and_a_leak(tmp_path, data_cache,
                                                                                         monkeypatch, ray_one_cpu):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, three=THREE)))
    warm = _sweep(tmp_path, "warm", data_cache, monkeypatch, reuse=True, faults=True)
    cold = _sweep(tmp_path, "cold", data_cache, monkeypatch, reuse=False, faults=False)  # the baseline
    stages = {"warm": warm.pop("_stages"), "cold": cold.pop("_stages")}
    trials = [CRASHED, LEAKED, "86m__llama__lr3e-3__s0"]
    for label, runs in (("warm", warm), ("cold", cold)):
        assert {t: v["status"] for t, v in runs.items()} == {t: "finished" for t in trials}, label
    assert len({p for v in cold.values() for p in v["pids"]}) == 3   # cold: a process per trial
    pids = {t: v["pids"] for t, v in warm.items()}
    # the crashed and the leaking attempt each had a process of their own, which nothing reused
    attempts = [p for t in trials for p in pids[t]]
    for t in (CRASHED, LEAKED):
        assert len(pids[t]) == 2 and attempts.count(pids[t][0]) == 1, pids
    # ...and the clean attempts (three: the two retries and the last trial) shared a worker
    clean = [pids[CRASHED][1], pids[LEAKED][1], *pids[trials[2]]]
    assert len(set(clean)) < len(clean), f"no worker was reused: {pids}"
    log = (tmp_path / "warm" / "runs" / "logs" / "three-smoke" / f"{LEAKED}.log").read_text()
    assert f"over its limit of {LIMIT_MB} MiB (CEMLAB_WORKER_MEMORY_MB" in log
    ids = re.findall(r"MLflow run ([0-9a-f]{32})", log)
    assert len(ids) == 2 and ids[0] == ids[1], ids   # the retry continued the trial's own run
    # the stage timestamps: a worker start per process (the one the guard ended wrote none) and a
    # fit for every trial, in both sweeps
    for label, runs in (("warm", warm), ("cold", cold)):
        starts = [x for x in stages[label] if x["stage"] == "worker start"]
        ended = {pids[LEAKED][0]} if label == "warm" else set()
        assert len(starts) == len({p for v in runs.values() for p in v["pids"]} - ended), label
        assert set(trials) <= {x["trial"] for x in stages[label] if x["stage"] == "fit"}, label
    for t in trials:
        metrics = warm[t]["metrics"]
        assert metrics[schema.TRAIN_LOSS] and metrics[schema.TEST_PPL] and any(k.startswith("val/") for k in metrics)
        assert metrics == cold[t]["metrics"], t   # exact: every step's value, once, bit for bit
