"""A shared tracking server with MLflow's basic-auth app: without credentials a run is refused,
with them (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, as cemlab's docs tell a
researcher to set) it lands; the admin password comes from the environment, never a default.

A real ``mlflow server --app-name basic-auth`` on 127.0.0.1 and a free port, on a sqlite store.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request

import pytest

from mlflow_support import mlflow_server

pytestmark = pytest.mark.slow

pytest.importorskip("flask_wtf", reason="MLflow's basic-auth app needs Flask-WTF (pip install 'cemlab[auth]')")


def auth_ini(tmp_path) -> str:
    """An auth config as docker/mlflow-auth.ini.example, with the test's user database."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "docker" / "mlflow-auth.ini.example"
    text = example.read_text().replace("sqlite:////data/mlflow-auth/basic_auth.db",
                                       f"sqlite:///{tmp_path / 'auth.db'}")
    assert "admin_password" not in text.replace("# admin_password", "")  # no password in the file
    path = tmp_path / "basic_auth.ini"
    path.write_text(text)
    return str(path)


def test_runs_without_credentials_are_refused_and_with_them_land(tmp_path, monkeypatch, capsys):
    """Also cemlab's pre-flight (``probe_store``, which every command calls before it starts
    anything): it names missing or wrong credentials and a host name the server refuses
    (``--allowed-hosts``), which ``/health`` alone lets through."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient
    from mlflow.tracking import MlflowClient

    from cemlab.cli import main
    from cemlab.tracking.store import StoreError, probe_store

    admin_pw = secrets.token_hex(12)
    (tmp_path / "artifacts").mkdir()
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path / "server.log",
                       extra_args=("--app-name", "basic-auth", "--allowed-hosts", "127.0.0.1:*"),
                       extra_env={"MLFLOW_AUTH_CONFIG_PATH": auth_ini(tmp_path),
                                  "MLFLOW_AUTH_ADMIN_PASSWORD": admin_pw,
                                  "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16)}) as url:
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            monkeypatch.delenv(k, raising=False)
        # the health check stays open (cemlab checks reachability there); the API does not
        with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=10)
        assert e.value.code == 401
        with pytest.raises(MlflowException, match=r"401|[Uu]nauthori[sz]ed|credentials"):
            MlflowClient(url).create_experiment("no-credentials")
        with pytest.raises(StoreError, match=r"wants credentials \(HTTP 401\): set MLFLOW_TRACKING_USERNAME and "
                                             r"MLFLOW_TRACKING_PASSWORD"):
            probe_store(url)
        assert main(["train", "--tracking-uri", url]) == 2   # named before anything starts
        err = capsys.readouterr().err
        assert "wants credentials" in err and "Traceback" not in err
        assert not (tmp_path / "runs").exists()
        # a host name the server does not allow: /health answers, the API does not
        other = url.replace("127.0.0.1", "localhost")
        with urllib.request.urlopen(f"{other}/health", timeout=10) as r:
            assert r.status == 200
        with pytest.raises(StoreError, match=r"refuses its API for the host name 'localhost:\d+' \(HTTP 403: "
                                             r".*Invalid Host header.*--allowed-hosts listing localhost:\d+"):
            probe_store(other)

        # the admin makes a researcher's account; the researcher logs a run with it
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin_pw)
        user_pw = secrets.token_hex(12)
        AuthServiceClient(url).create_user("researcher", user_pw)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "researcher")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "wrong-" + user_pw)
        with pytest.raises(MlflowException):
            MlflowClient(url).create_experiment("wrong-password")
        with pytest.raises(StoreError, match="refuses the credentials of MLFLOW_TRACKING_USERNAME=researcher"):
            probe_store(url)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", user_pw)
        probe_store(url)  # the right account passes
        client = MlflowClient(url)
        exp = client.create_experiment("cemlab/auth-test")
        run = client.create_run(exp)
        client.log_metric(run.info.run_id, "test/ppl", 12.5, step=3)
        client.set_terminated(run.info.run_id)

        # read back as the admin: the run is there, with its metric
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin_pw)
        got = MlflowClient(url).get_run(run.info.run_id)
        assert got.data.metrics == {"test/ppl": 12.5} and got.info.status == "FINISHED"
        assert [r.info.run_id for r in MlflowClient(url).search_runs([exp])] == [run.info.run_id]
