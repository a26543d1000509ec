"""``cemlab report`` as a command: its exit codes, logging the reports through the store's server,
and a store that dies while the reports are built.

The store is real: an MLflow sqlite file written with ``MlflowClient`` (``report_support``), and
for logging and the dying store cemlab's own local ``mlflow server`` on the project's store
(127.0.0.1, a free port), killed with SIGKILL as a crash would, and its record removed after.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_support as rs  # noqa: E402
from pg_support import free_port  # noqa: E402

from cemlab.report import cli  # noqa: E402
from cemlab.report.pages.build import EXIT_NO_RUNS, EXIT_NOT_LOGGED, EXIT_OK, EXIT_STORE_LOST  # noqa: E402
from cemlab.tracking import schema  # noqa: E402


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def _write_some(uri: str, artifacts: Path, sweep: str, n: int) -> str:
    """A parent run and the first ``n`` trials of ``sweep`` (smoke) as finished runs; the parent's id."""
    from cemlab.sweeps.sweepfile.load import load_sweep

    w = rs.RunWriter(uri, artifacts)
    parent = w.parent(sweep)
    for i, t in enumerate(load_sweep(sweep).expand("smoke")[:n]):
        w.trial(t, metrics=rs.lm_metrics(30.0 + i), parent_id=parent)
    return parent


#: Two sweeps without figures or claims: the exit codes are the point, not the drawing.
PLAIN = """\
figure: "none"
axes: {size: [s1], seed: [0, 1]}
variants:
  - {group: llama, label: "llama %s"}
"""


def test_report_without_names_lists_the_sweeps_without_runs(tmp_path, monkeypatch, capsys):
    """Without sweep names (and with --all) a store where one sweep has runs and another none is
    exit 0, naming the sweep without runs; a named sweep without runs stays exit 3."""
    sweeps = rs.write_sweeps(tmp_path / "sweeps", [])
    for name, lr in (("with_runs", "1.0e-3"), ("without_runs", "2.0e-3")):
        (sweeps / f"{name}.yaml").write_text(PLAIN.replace("seed: [0, 1]", f"seed: [0, 1], lr: [{lr}]") % name)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(sweeps))
    uri = rs.migrated_store(tmp_path / "template.db", tmp_path / "m.db")
    _write_some(uri, tmp_path / "art", "with_runs", 2)
    common = ["--scale", "smoke", "--tracking-uri", uri, "--no-log"]
    for flags in (["--all"], []):
        assert cli.run(_parse([*flags, *common, "--out", str(tmp_path / f"out{len(flags)}")])) == EXIT_OK
        out = capsys.readouterr().out
        assert "with_runs [smoke]: 2/2 trials finished" in out
        assert "sweeps without runs at scale smoke: without_runs" in out
    assert cli.run(_parse(["without_runs", *common, "--out", str(tmp_path / "one")])) == EXIT_NO_RUNS


@pytest.mark.slow
def test_report_logs_through_the_local_server_and_names_a_dying_store(tmp_path, monkeypatch, capsys):
    """The project's store as a sweep leaves it (experiments whose artifacts the local server keeps,
    ``mlflow-artifacts:``): ``cemlab report`` starts the local server and logs the report to the
    parent run (exit 0); pointed at the sqlite file it says in one line why it could not log
    (exit 5, no port advice); and when the server dies mid-report it names the store in one line
    within 15 s (exit 4, no traceback)."""
    from mlflow.tracking import MlflowClient

    from cemlab.report.figures import catalog as figures
    from cemlab.tracking import server
    from cemlab.tracking.store import default_tracking_uri, open_sqlite_store

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CEMLAB_UI_PORT", str(free_port()))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(rs.write_sweeps(tmp_path / "sweeps", ["recursion_ablation"])))
    sqlite = default_tracking_uri()
    open_sqlite_store(sqlite)
    MlflowClient(sqlite).create_experiment("cemlab/recursion_ablation",
                                           artifact_location="mlflow-artifacts:/cemlab_recursion_ablation")
    parent = _write_some(sqlite, tmp_path / "unused", "recursion_ablation", 6)
    args = ["recursion_ablation", "--scale", "smoke", "--out", str(tmp_path / "reports")]
    capsys.readouterr()  # MLflow's lines on creating the store
    try:
        # the sqlite file itself: written, not logged, one line on why, exit 5
        assert cli.run(_parse([*args, "--tracking-uri", sqlite])) == EXIT_NOT_LOGGED
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and "not logged to MLflow run" in err[0] and "--tracking-uri" in err[0], captured.err
        assert "FAILED" not in captured.out + captured.err and "localhost:5000" not in captured.err
        assert (tmp_path / "reports" / "recursion_ablation" / "index.html").is_file()

        # the project's store: through its local server, started here
        assert server.running_server() is None
        assert cli.run(_parse(args)) == EXIT_OK, capsys.readouterr()
        captured = capsys.readouterr()
        info = server.running_server()
        assert info is not None and f"logged to MLflow run {parent}" in captured.out and not captured.err
        # the parent run's page, whole on one line, not the server's bare address (its welcome page)
        assert any(f"{info.url}/#/experiments/" in line and f"/runs/{parent}?workflowType=machine_learning" in line
                   for line in captured.out.splitlines()), captured.out
        files = {a.path for a in MlflowClient(info.url).list_artifacts(parent, schema.REPORT_ARTIFACT_DIR)}
        assert {"report/index.html", "report/fig2c.png", "report/cells.csv"} <= files

        # the server dies while the figures are drawn
        killed = {}
        training = figures.GENERIC_FIGURES["training"]

        def kill_then_draw(ctx):
            os.killpg(info.pid, signal.SIGKILL)
            killed["at"] = time.monotonic()
            return training(ctx)

        monkeypatch.setitem(figures.GENERIC_FIGURES, "training", kill_then_draw)
        code = cli.run(_parse(args))
        elapsed = time.monotonic() - killed["at"]
        captured = capsys.readouterr()
        print(f"kill to exit: {elapsed:.1f} s")
        assert code == EXIT_STORE_LOST and elapsed < 15, (code, elapsed, captured.err)
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and info.url in err[0] and "stopped answering" in err[0], captured.err
        assert "Traceback" not in captured.err
    finally:
        server.stop_server()
