"""MLflow's tracking server on a real PostgreSQL backend store, as the cluster stack runs it.

A throwaway PostgreSQL server (tests/pg_support.py) backs an ``mlflow server`` on 127.0.0.1 with
a local artifact folder served through the server (``--serve-artifacts``), as in
docker/compose.yaml. A client logs a run through HTTP only; the test reads it back through the
server, then checks the rows in PostgreSQL itself (plain SQL, no MLflow) and the artifact bytes in
the server's artifact folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cemlab.tracking import schema
from pg_support import PostgresServer, die_with_parent, free_port, postgres, postgres_server  # noqa: F401

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SERVER_START_TIMEOUT_S = 180.0


def _mlflow_executable() -> str:
    """The ``mlflow`` console script of the Python running the tests."""
    exe = Path(sys.executable).with_name("mlflow")
    return str(exe) if exe.exists() else (shutil.which("mlflow") or "mlflow")


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log_path: Path, extra_args: tuple[str, ...] = (),
                  extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``mlflow server`` on 127.0.0.1 and a free port; yield its URL; stop its process group.
    ``extra_args`` / ``extra_env``: more server options (e.g. ``--app-name basic-auth``) and variables."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(extra_env or {})
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [_mlflow_executable(), "server", "--backend-store-uri", backend_uri,
             "--serve-artifacts", "--artifacts-destination", str(artifacts),
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1", *extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent,
            start_new_session=True, preexec_fn=die_with_parent,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy after {SERVER_START_TIMEOUT_S:.0f}s:\n"
                            f"{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_mlflow_server_on_postgres_logs_and_reads_back_a_run(postgres: PostgresServer, tmp_path):
    from mlflow.tracking import MlflowClient

    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    config_file = tmp_path / schema.CONFIG_ARTIFACT
    config_text = "model:\n  preset: tiny\ntrain:\n  lr: 0.002\n"
    config_file.write_text(config_text)
    losses = [3.5, 2.75, 2.25, 2.0]
    params = {"train.lr": "0.002", "model.d_model": "64"}

    with mlflow_server(postgres.sqlalchemy_uri, artifacts, tmp_path / "mlflow.log") as url:
        client = MlflowClient(tracking_uri=url)
        exp_id = client.create_experiment("cemlab/pg-check")
        run_id = client.create_run(exp_id, tags={schema.ROLE: "trial"}).info.run_id
        for key, value in params.items():
            client.log_param(run_id, key, value)
        for step, loss in enumerate(losses):
            client.log_metric(run_id, schema.TRAIN_LOSS, loss, step=step)
        client.log_artifact(run_id, str(config_file))
        client.set_terminated(run_id)

        run = client.get_run(run_id)
        assert run.data.params == params
        assert run.data.tags[schema.ROLE] == "trial"
        assert run.data.metrics[schema.TRAIN_LOSS] == losses[-1]
        history = client.get_metric_history(run_id, schema.TRAIN_LOSS)
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == list(enumerate(losses))
        assert [f.path for f in client.list_artifacts(run_id)] == [schema.CONFIG_ARTIFACT]
        downloaded = client.download_artifacts(run_id, schema.CONFIG_ARTIFACT, str(tmp_path / "dl"))
        assert Path(downloaded).read_text() == config_text

    # The rows are in PostgreSQL itself (read without MLflow) ...
    conn = postgres.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT key, value FROM params WHERE run_uuid = %s", (run_id,))
            assert dict(cur.fetchall()) == params
            cur.execute("SELECT step, value FROM metrics WHERE run_uuid = %s AND key = %s ORDER BY step",
                        (run_id, schema.TRAIN_LOSS))
            assert cur.fetchall() == list(enumerate(losses))
            cur.execute("SELECT status FROM runs WHERE run_uuid = %s", (run_id,))
            assert cur.fetchone() == ("FINISHED",)
    finally:
        conn.close()
    # ... and the artifact went through the server into its artifact folder.
    stored = list(artifacts.rglob(schema.CONFIG_ARTIFACT))
    assert len(stored) == 1 and stored[0].read_text() == config_text


def test_postgres_server_needs_its_password_and_is_removed_after_an_error():
    """The test database is a real server with password auth, and the context manager stops it
    and deletes its files when the body raises."""
    import psycopg2

    with pytest.raises(RuntimeError, match="boom"):
        with postgres_server() as pg:
            server, root = pg, pg.data_dir.parent
            with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
                psycopg2.connect(host=pg.host, port=pg.port, user=pg.user, password="wrong",
                                 dbname=pg.dbname, connect_timeout=5)
            conn = pg.connect()
            with conn.cursor() as cur:
                cur.execute("SELECT current_database()")
                assert cur.fetchone() == (pg.dbname,)
            conn.close()
            raise RuntimeError("boom")
    assert not root.exists()
    with pytest.raises(psycopg2.OperationalError):
        server.connect()
