"""The local Ray a sweep starts without ``RAY_ADDRESS``: its own new instance, whatever another
``ray start`` (alive or dead) left on the machine, listening on loopback only, with MLflow's and
Ray's usage telemetry off.

Each check runs ``cemlab.sweeps.stages.execute.connect_ray`` in a subprocess with a private
``RAY_TMPDIR`` (tests/ray_support.py), so no other Ray on the machine is seen or disturbed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ray_support import listeners, non_loopback, private_ray_tmpdir, ray_head

pytestmark = pytest.mark.slow

# Starts the sweep's Ray, runs one task (so a worker process exists), then reports the GCS
# address, the listening sockets of its process tree and the telemetry settings in force.
PROBE = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import ray
    from cemlab.sweeps.stages.execute import connect_ray
    from ray_support import listeners
    assert connect_ray(1)
    ray.get(ray.remote(lambda: os.getpid()).remote())
    env = ray.get(ray.remote(lambda: {k: os.environ.get(k) for k in
                                      ("RAY_USAGE_STATS_ENABLED", "MLFLOW_DISABLE_TELEMETRY")}).remote())
    print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "listeners": listeners(os.getpid()),
                      "worker_env": env}))
    ray.shutdown()
""")


def _probe(env: dict[str, str]) -> dict:
    tests = os.path.dirname(__file__)
    out = subprocess.run([sys.executable, "-c", PROBE, tests], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_local_ray_is_its_own_loopback_instance_beside_a_live_cluster(tmp_path):
    """A plain ``ray.init`` joins the head that ``ray start`` announced in Ray's "current cluster"
    file (and then refuses ``num_cpus``); the sweep starts its own, on loopback only. (A stale
    file, from a head that died: ``tests/test_tracking_record.py``'s killed-store sweep.)"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "CEMLAB_TELEMETRY", "RAY_USAGE_STATS_ENABLED", "MLFLOW_DISABLE_TELEMETRY")}
    with private_ray_tmpdir() as tmp:
        env["RAY_TMPDIR"] = str(tmp)
        with ray_head(env, tmp_path / "ray-head.log") as head:
            live = _probe(env)
        assert live["gcs"] != head
        assert len(live["listeners"]) >= 3, "the probe saw too few listening sockets: it measures nothing"
        assert not non_loopback(live["listeners"]), f"listening beyond loopback: {non_loopback(live['listeners'])}"
        assert live["worker_env"] == {"RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true"}


def test_telemetry_stays_on_when_the_user_opts_in(monkeypatch):
    from cemlab.tracking.store import TELEMETRY_OFF, telemetry_off

    for k in TELEMETRY_OFF:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CEMLAB_TELEMETRY", "1")
    assert telemetry_off() == {} and not any(k in os.environ for k in TELEMETRY_OFF)
    monkeypatch.delenv("CEMLAB_TELEMETRY")
    assert telemetry_off() == TELEMETRY_OFF and all(os.environ[k] == v for k, v in TELEMETRY_OFF.items())


def test_a_stopping_driver_does_not_wait_on_a_ray_whose_head_is_gone(monkeypatch):
    """After SLURM's SIGTERM the job's GCS is gone with the driver's stop under way, and
    ``ray.shutdown()`` waits on it (seen under a real controller: the driver was SIGKILLed with its
    runs unmarked). The stop gives it ``RAY_SHUTDOWN_WAIT_S`` and goes on; the interpreter's exit
    is not left to wait on it again. The real case: tests/test_slurm.py's requeue test."""
    import atexit
    import threading
    import time

    import ray
    import ray.tune.registry  # loaded, as in a sweep's driver: its exit handler talks to the GCS too

    from cemlab.sweeps import runner
    release = threading.Event()
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: release.wait(60))
    monkeypatch.setattr(runner, "RAY_SHUTDOWN_WAIT_S", 0.5)
    monkeypatch.setattr(runner, "_ray_abandoned", False)  # set below; restored for the tests after this one
    unregistered = []
    monkeypatch.setattr(atexit, "unregister", unregistered.append)
    t0 = time.monotonic()
    runner._shutdown_ray()
    assert time.monotonic() - t0 < 5
    assert unregistered == [ray._private.worker.shutdown, ray.tune.registry._unregister_all]
    release.set()

    unregistered.clear()                                   # a shutdown that returns: nothing more
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: None)
    runner._shutdown_ray()
    assert unregistered == []


# Starts the sweep's Ray, runs a task, begins the driver's background stop, does a second of
# work meanwhile (the report's place), then waits for the stop; reports what it saw.
STOP_LATER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    import ray
    from cemlab import timing
    from cemlab.sweeps import runner
    from cemlab.sweeps.stages.execute import connect_ray
    timing.start_file(sys.argv[2])
    assert connect_ray(1)
    ray.get(ray.remote(lambda: os.getpid()).remote())
    runner._begin_ray_shutdown()
    t0 = time.time()
    while time.time() - t0 < 1.0:
        sum(range(10000))
    work_end = time.time()
    runner.wait_ray_stopped()
    print(json.dumps({"work": [t0, work_end], "initialized": ray.is_initialized(), "again": runner._stopping}))
""")


def test_the_driver_stops_its_ray_while_the_report_is_built(tmp_path):
    """``run_sweep(stop_ray_later=True)`` (what ``cemlab sweep`` asks): ``ray.shutdown()`` runs while
    the caller works on, and ``wait_ray_stopped`` joins it and records its ``ray shutdown`` span."""
    from cemlab import timing

    tests = os.path.dirname(__file__)
    stages = tmp_path / "stages.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with private_ray_tmpdir() as tmp:
        env["RAY_TMPDIR"] = str(tmp)
        out = subprocess.run([sys.executable, "-c", STOP_LATER, tests, str(stages)], env=env, capture_output=True,
                             text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["initialized"] is False and seen["again"] is None
    (span,) = [s for s in timing.read_spans(stages) if s["stage"] == "ray shutdown"]
    work_start, work_end = seen["work"]
    assert span["start"] <= work_start and span["start"] < span["end"]
    assert span["end"] < work_end + 60   # the stop's own end, not the wait's


def test_cemlab_sweep_builds_the_report_before_it_waits_for_ray(monkeypatch):
    """The CLI asks ``run_sweep`` to stop Ray later, runs what follows the sweep (the report), then
    joins the stop, also when what follows fails."""
    import argparse

    from cemlab.sweeps import runner
    from cemlab.sweeps.cli import sweep as sweep_cli
    from cemlab.sweeps.stages.invocation import SweepResult

    events = []

    def run_sweep(*args, stop_ray_later=False, **kwargs):
        events.append(("sweep", stop_ray_later))
        return SweepResult(sweep="s", scale="smoke", tracking_uri="http://127.0.0.1:1", experiment_id="1",
                           parent_run_id="p", parent_reopened=False, outcomes=[], seconds=1.0)

    monkeypatch.setattr(runner, "run_sweep", run_sweep)
    monkeypatch.setattr(runner, "wait_ray_stopped", lambda: events.append("wait"))
    monkeypatch.setattr(runner, "_ray_abandoned", False)  # else the CLI ends this process with os._exit
    args = argparse.Namespace(sweep="s", scale="smoke", overrides=[], retries=1, cpus=None, cache_dir=None,
                              plain=True, interval=30.0, no_seeding=True, no_report=False, mark_interrupted=False)
    assert sweep_cli.run(args, after=lambda result, console: events.append("report")) == 0
    assert events == [("sweep", True), "report", "wait"]

    def failing_report(result, console):
        events.append("report")
        raise KeyboardInterrupt

    events.clear()
    assert sweep_cli.run(args, after=failing_report) != 0
    assert events == [("sweep", True), "report", "wait"]
