"""``cemlab ui``: start or reuse the local MLflow server on the project's store, print its address,
stop it; with ``MLFLOW_TRACKING_URI`` only print (or refuse) that address."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from cemlab.cli import main

pytestmark = pytest.mark.slow


def _url(text: str) -> str:
    m = re.search(r"MLflow dashboard: (http://127\.0\.0\.1:\d+)", text)
    assert m, text
    return m.group(1)


def test_ui_starts_reuses_and_stops_the_local_server(runs_dir, capsys, monkeypatch):
    from cemlab.tracking.server import stop_server

    try:
        assert main(["ui"]) == 0
        first = capsys.readouterr().out
        url = _url(first)
        assert "(started;" in first and str(runs_dir / "mlflow" / "mlflow.db") in first
        with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
            assert r.status == 200
        assert json.loads((runs_dir / "mlflow" / "server.json").read_text())["url"] == url

        from mlflow.tracking import MlflowClient

        exp = MlflowClient(url).create_experiment("cemlab/recursion_ablation")
        assert main(["ui"]) == 0
        second = capsys.readouterr().out
        assert _url(second) == url and "(running;" in second   # reused, not a second server
        # each experiment's runs table, in MLflow 3's model-training view (not its GenAI overview)
        assert f"cemlab/recursion_ablation: {url}/#/experiments/{exp}?workflowType=machine_learning" in second

        assert main(["ui", "--stop"]) == 0
        assert "stopped" in capsys.readouterr().out
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/health", timeout=3)
        assert main(["ui", "--stop"]) == 1
    finally:
        stop_server()


def test_ui_with_a_tracking_uri_names_it_or_refuses(runs_dir, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")   # nothing answers there
    assert main(["ui"]) == 2
    assert "http://127.0.0.1:9 does not answer" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{runs_dir}/other.db")
    assert main(["ui"]) == 2
    assert "is not a server" in capsys.readouterr().err
    assert not (runs_dir / "mlflow" / "server.json").exists()
