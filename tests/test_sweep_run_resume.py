"""Killing the sweep driver mid-sweep, then running the same command again.

``cemlab sweep`` runs as a subprocess (its own local Ray and its own MLflow server). Once one
trial has finished and a long one has written a checkpoint, the driver gets SIGKILL: no trial
process may outlive it. The rerun must finish the sweep in the same parent run, rerun no finished
trial (same run id, same end time), continue the interrupted trial from its checkpoint in its own
MLflow run (each step logged once), and leave each trial exactly once in MLflow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cemlab.tracking import schema
from sweep_support import REPO_SWEEPS, trial_state

pytestmark = pytest.mark.slow


# A short Llama trial, a long CEM-attention trial (512 steps) and a short CEM-MLP trial: with two
# trials at a time, the Llama one finishes (16 steps, about 2 s) while the long one is still
# training (killed within its first hundred steps here; 512 steps take about 6 s at full speed, mostly its
# checkpoints every 8 steps, and every step the kill spares is trained again by the rerun).
LONG_STEPS = 512   # train.tokens / (batch 8 x context 32) at the smoke scale
RESUME = f"""\
figure: "test: resume"
axes: {{size: [86m], lr: [2.0e-3]}}
variants:
  - {{group: llama, label: llama}}
  - {{group: cem-attn, label: cem-attn long, set: {{model.attention: cem, train.tokens: {LONG_STEPS * 8 * 32}}}}}
  - {{group: cem-mlp, label: cem-mlp, set: {{model.mlp: cem}}}}
"""
SHORT, LONG = "86m__llama__lr2e-3__s0", "86m__cem-attn_long__lr2e-3__s0"


def _pids(log_dir: Path) -> set[int]:
    return {int(p) for f in log_dir.glob("*.log") for p in re.findall(r"\) pid (\d+)", f.read_text())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_driver_resumes_without_duplicates(runs_dir, tmp_path, tmp_path_factory, monkeypatch):
    from mlflow.tracking import MlflowClient

    from cemlab.tracking.server import stop_server

    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    shutil.copy(REPO_SWEEPS / "scales.yaml", sweeps / "scales.yaml")
    (sweeps / "resume.yaml").write_text(textwrap.dedent(RESUME))
    cache = tmp_path_factory.getbasetemp() / "sweep-data-cache"   # shared with test_sweep_run.py
    env = {**os.environ, "CEMLAB_RUNS_DIR": str(runs_dir), "CEMLAB_SWEEPS_DIR": str(sweeps),
           "CEMLAB_REPORTS_DIR": str(tmp_path / "reports")}
    env.pop("CEMLAB_SWEEP_FAULTS", None)
    cmd = [sys.executable, "-m", "cemlab.cli", "sweep", "resume", "--scale", "smoke", "--cpus", "2",
           "--cache-dir", str(cache), "--no-report", "--plain"]
    log_dir = runs_dir / "logs" / "resume-smoke"
    try:
        driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            short, long_ = trial_state(runs_dir, log_dir, SHORT), trial_state(runs_dir, log_dir, LONG)
            if short.get("status") == "finished" and long_.get("step", 0) >= 8 and long_.get("status") == "running":
                break
            time.sleep(0.2)
        else:
            driver.kill()
            pytest.fail(f"the sweep never reached the kill point:\n{driver.communicate()[0]}")
        driver.send_signal(signal.SIGKILL)
        driver.communicate(timeout=30)
        pids = _pids(log_dir)
        assert len(pids) >= 2
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.5)
        assert not [p for p in pids if _alive(p)], "trial processes outlived the killed driver"

        uri = json.loads((runs_dir / "mlflow" / "server.json").read_text())["url"]   # the server outlives it
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("cemlab/resume")
        before = {r.data.tags[schema.TRIAL_ID]: r for r in client.search_runs([exp.experiment_id])
                  if r.data.tags.get(schema.ROLE) == "trial"}
        assert before[SHORT].data.tags[schema.STATUS] == "finished"
        assert before[LONG].info.status == "RUNNING"   # killed hard: nobody could say otherwise
        killed_at = trial_state(runs_dir, log_dir, LONG)["step"]

        rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert "(resumed)" in rerun.stdout   # the same parent run, reopened

        runs = client.search_runs([exp.experiment_id])
        parents = [r for r in runs if r.data.tags.get(schema.ROLE) == "sweep"]
        trials = [r for r in runs if r.data.tags.get(schema.ROLE) == "trial"]
        assert len(parents) == 1 and parents[0].data.tags[schema.STATUS] == "finished"
        assert sorted(r.data.tags[schema.TRIAL_ID] for r in trials) == sorted([SHORT, LONG, "86m__cem-mlp__lr2e-3__s0"])
        assert len({r.data.tags[schema.CONFIG_HASH] for r in trials}) == 3
        after = {r.data.tags[schema.TRIAL_ID]: r for r in trials}
        assert all(r.data.tags[schema.STATUS] == "finished" for r in trials)
        assert all(r.data.tags[schema.PARENT_RUN_ID] == parents[0].info.run_id for r in trials)
        # the finished trial was not rerun
        assert after[SHORT].info.run_id == before[SHORT].info.run_id
        assert after[SHORT].info.end_time == before[SHORT].info.end_time
        assert re.search(rf"done\s+{SHORT}", rerun.stdout)
        # the interrupted trial continued from its checkpoint, in its own run, each step once
        assert after[LONG].info.run_id == before[LONG].info.run_id
        assert f"resuming from {runs_dir}/checkpoints/" in (log_dir / f"{LONG}.log").read_text()
        assert killed_at < LONG_STEPS
        steps = [m.step for m in client.get_metric_history(after[LONG].info.run_id, schema.TRAIN_LOSS)]
        assert sorted(steps) == list(range(1, LONG_STEPS + 1))
    finally:
        monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs_dir))
        stop_server()
