"""The MLflow store helpers and the local tracking server, on real stores and a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cemlab.tracking import schema


def test_tracking_uri_default_and_env(runs_dir, monkeypatch, tmp_path):
    from cemlab.tracking.store import artifact_root, store_exists, tracking_uri

    monkeypatch.chdir(tmp_path)
    uri = tracking_uri()
    assert uri == f"sqlite:///{runs_dir.resolve() / 'mlflow' / 'mlflow.db'}"
    assert uri.startswith("sqlite:////")  # absolute: trials change directory
    assert artifact_root() == runs_dir.resolve() / "mlflow" / "artifacts" and artifact_root().is_dir()
    assert not store_exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking_uri() == "http://mlflow.example:5000" and store_exists()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real sqlite store (created once: its migration takes seconds)."""
    with pytest.MonkeyPatch.context() as mp:
        runs = tmp_path_factory.mktemp("store") / "runs"
        mp.setenv("CEMLAB_RUNS_DIR", str(runs))
        from cemlab.tracking.store import get_client

        yield runs, get_client()


def _run(client, exp, config_hash, status=None, mlflow_status="FINISHED", start=None):
    tags = {schema.CONFIG_HASH: config_hash}
    if status:
        tags[schema.STATUS] = status
    r = client.create_run(exp, tags=tags, start_time=start)
    if mlflow_status != "RUNNING":
        client.set_terminated(r.info.run_id, status=mlflow_status)
    return r.info.run_id


@pytest.mark.slow
def test_ensure_experiment_is_idempotent_and_keeps_artifacts_in_the_runs_folder(store, monkeypatch):
    from cemlab.tracking.store import ensure_experiment

    runs, client = store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    eid = ensure_experiment("cemlab/test_ensure", client)
    assert ensure_experiment("cemlab/test_ensure", client) == eid
    location = client.get_experiment(eid).artifact_location
    assert location.startswith(f"file://{runs.resolve()}/mlflow/artifacts/")
    client.delete_experiment(eid)
    assert ensure_experiment("cemlab/test_ensure", client) == eid  # restored, not a second one
    assert client.get_experiment(eid).lifecycle_stage == "active"


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True], ids=["per-hash", "scan"])
def test_find_runs_by_hash_across_experiments(store, monkeypatch, scan):
    from cemlab.tracking import store as store_mod

    runs, client = store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    if scan:
        monkeypatch.setattr(store_mod, "SCAN_THRESHOLD", 0)
    tag = "scan" if scan else "each"
    e1 = store_mod.ensure_experiment(f"cemlab/find_a_{tag}", client)
    e2 = store_mod.ensure_experiment(f"cemlab/find_b_{tag}", client)
    h1, h2, h3, h_none = (f"{tag}-h1", f"{tag}-h2", f"{tag}-h3", f"{tag}-none")
    old = _run(client, e1, h1, schema.STATUS_FAILED, "FAILED", start=1_000)
    new = _run(client, e2, h1, schema.STATUS_FINISHED, start=2_000)
    other = _run(client, e2, h2, schema.STATUS_FINISHED)
    gone = _run(client, e1, h3, schema.STATUS_FINISHED)
    client.delete_run(gone)
    _run(client, e1, f"{tag}-unasked", schema.STATUS_FINISHED)
    found = store_mod.find_runs_by_hash([h1, h2, h3, h_none], client)
    assert set(found) == {h1, h2, h3, h_none}
    assert [r.info.run_id for r in found[h1]] == [new, old]  # both experiments, newest first
    assert [r.info.run_id for r in found[h2]] == [other]
    assert found[h3] == [] and found[h_none] == []  # deleted runs are not found
    assert store_mod.find_runs_by_hash([], client) == {}


@pytest.mark.slow
def test_finished_run_for_prefers_finished_then_diverged(store, monkeypatch):
    from cemlab.tracking.store import ensure_experiment, finished_run_for

    runs, client = store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    e = ensure_experiment("cemlab/finished_for", client)
    finished = _run(client, e, "ff-a", schema.STATUS_FINISHED, start=1_000)
    _run(client, e, "ff-a", schema.STATUS_DIVERGED, start=2_000)        # newer, but only diverged
    _run(client, e, "ff-a", schema.STATUS_FAILED, "FAILED", start=3_000)
    assert finished_run_for("ff-a", client).info.run_id == finished
    diverged = _run(client, e, "ff-b", schema.STATUS_DIVERGED, start=1_000)
    _run(client, e, "ff-b", schema.STATUS_FAILED, "FAILED", start=2_000)
    assert finished_run_for("ff-b", client).info.run_id == diverged
    _run(client, e, "ff-c", schema.STATUS_FAILED, "FAILED")
    _run(client, e, "ff-c", schema.STATUS_RUNNING, "RUNNING")
    _run(client, e, "ff-c", schema.STATUS_RUNNING, "KILLED")  # died without updating its tag
    assert finished_run_for("ff-c", client) is None
    assert finished_run_for("ff-none", client) is None


@pytest.mark.slow
def test_run_status_reads_the_tag_then_mlflow(store, monkeypatch):
    from cemlab.tracking.store import ensure_experiment, run_status

    runs, client = store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    e = ensure_experiment("cemlab/status", client)
    cases = [((schema.STATUS_DIVERGED, "FINISHED"), "diverged"), ((None, "FINISHED"), "finished"),
             ((None, "FAILED"), "failed"), ((None, "KILLED"), "failed"), ((None, "RUNNING"), "running"),
             ((schema.STATUS_RUNNING, "RUNNING"), "running"), ((schema.STATUS_RUNNING, "FAILED"), "failed"),
             ((schema.STATUS_RUNNING, "FINISHED"), "failed")]
    for (tag, mlflow_status), expected in cases:
        run = client.get_run(_run(client, e, "st", tag, mlflow_status))
        assert run_status(run) == expected, (tag, mlflow_status)


# ---------------------------------------------------------------------------------------------
# The local server
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def server_runs(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    monkeypatch.chdir(tmp_path)
    yield runs
    from cemlab.tracking.server import stop_server

    stop_server()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.slow
def test_server_starts_is_reused_serves_the_store_and_stops(server_runs, tmp_path):
    from mlflow.tracking import MlflowClient

    from cemlab.tracking import server
    from cemlab.tracking.store import default_tracking_uri, ensure_experiment, find_runs_by_hash

    # Two concurrent starts (threads of one process, as two drivers would race) give one server.
    urls: list[str] = []
    threads = [threading.Thread(target=lambda: urls.append(server.start_server())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(urls) == 2 and urls[0] == urls[1] and urls[0].startswith("http://127.0.0.1:")
    info = server.running_server()
    assert info.url == urls[0] and info.backend_store_uri == default_tracking_uri() and _alive(info.pid)
    assert server.healthy(info.url)
    assert server.start_server() == info.url and server.running_server().pid == info.pid  # reused

    # A second process sees the same server through the state file.
    out = subprocess.run([sys.executable, "-c", "from cemlab.tracking.server import start_server; "
                          "print(start_server())"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CEMLAB_RUNS_DIR": str(server_runs)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == info.url

    # It serves the project's store: runs, tags and artifacts land under the runs folder.
    client = MlflowClient(info.url)
    eid = ensure_experiment("cemlab/served", client)
    run = client.create_run(eid, tags={schema.CONFIG_HASH: "served-hash"})
    artifact = tmp_path / "note.txt"
    artifact.write_text("hello")
    client.log_artifact(run.info.run_id, str(artifact))
    client.log_metric(run.info.run_id, schema.TEST_PPL, 12.5)
    client.set_terminated(run.info.run_id)
    assert [r.info.run_id for r in find_runs_by_hash(["served-hash"], client)["served-hash"]] == [run.info.run_id]
    stored = list((server_runs / "mlflow" / "artifacts").rglob("note.txt"))
    assert len(stored) == 1 and stored[0].read_text() == "hello"
    assert (server_runs / "mlflow" / "mlflow.db").is_file()

    assert server.stop_server() is True
    deadline = time.monotonic() + 10
    while _alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(info.pid)
    assert server.running_server() is None and not server.state_path().exists()
    assert not server.healthy(info.url)
    assert server.stop_server() is False

    # A stale record (its process is gone) is replaced, and the data outlives the server.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server.state_path().write_text(
        '{"url": "http://127.0.0.1:9", "pid": %d, "port": 9, "backend_store_uri": "%s", '
        '"artifacts_destination": "x", "log": "x", "started_at": 0}' % (dead.pid, default_tracking_uri()))
    assert server.running_server() is None
    url2 = server.start_server()
    assert url2 != "http://127.0.0.1:9" and server.running_server().pid not in (dead.pid, info.pid)
    assert MlflowClient(url2).get_run(run.info.run_id).data.metrics[schema.TEST_PPL] == 12.5


def test_server_refuses_a_port_in_use(server_runs):
    import socket

    from cemlab.tracking import server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(server.ServerError, match=rf"port {port} on 127.0.0.1 is in use"):
            server.start_server(port=port)
    assert server.running_server() is None and not server.state_path().exists()


def test_server_that_exits_while_starting_is_reported_with_its_log(server_runs, monkeypatch):
    """Whatever makes the server process exit (here a stand-in that fails like a broken store),
    start_server retries on other ports, then raises quoting the log; nothing is recorded."""
    from cemlab.tracking import server

    calls = []

    def failing_command(backend, artifacts, port):
        calls.append(port)
        return [sys.executable, "-c", f"print('cannot open store {backend}'); raise SystemExit(3)"]

    monkeypatch.setattr(server, "_server_command", failing_command)
    with pytest.raises(server.ServerError, match=r"exited while starting; log .*server\.log:\n(.|\n)*cannot open store"):
        server.start_server(timeout=60)
    assert len(calls) == 3 and server.running_server() is None and not server.state_path().exists()
