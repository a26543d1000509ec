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
