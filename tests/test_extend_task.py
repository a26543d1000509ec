"""Extending cemlab in one place: a task registered from outside the package
(``tests/plugins/toy_task.py``, named in ``CEMLAB_PLUGINS``, no file of ``cemlab/`` touched) runs a
smoke sweep and gets its report with its own metric (``mae``) everywhere a metric is named; and a
GP sweep keeps its RMSE under RMSE keys, never under perplexity ones.

Ray starts after ``CEMLAB_PLUGINS`` and ``PYTHONPATH`` are set (module fixture ``plugin_ray``), so
that its workers import the plugin too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from cemlab.models.registry import plugins_scope
from cemlab.sweeps.stages import progress as pg
from ray_support import local_ray
from sweep_support import client_for, experiment_runs, local_sweeps, run

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent

TOY_SWEEP = """
    figure: "toy"
    description: A task from outside cemlab.
    task: toy
    base:
      gp: {n_inputs: 4, latent_dim: 8}
    axes:
      seed: [0]
    variants:
      - group: toy
        label: "toy T{T}"
        set: {gp.steps: "{T}", gp.kernel: rbf}
        axes: {T: [1, 2]}
"""

GP_SWEEP = """
    figure: "Table 3"
    task: gp
    base:
      gp: {n_inputs: 4, latent_dim: 8}
    axes:
      seed: [0]
    variants:
      - group: cem-mlp
        label: "rbf T{T}"
        set: {gp.steps: "{T}", gp.kernel: rbf}
        axes: {T: [2]}
"""


@pytest.fixture(scope="module")
def plugin_ray():
    """CEMLAB_PLUGINS and tests/ on PYTHONPATH, then local Ray (its workers inherit both)."""
    with pytest.MonkeyPatch.context() as mp, plugins_scope():
        mp.setenv("CEMLAB_PLUGINS", "plugins.toy_task")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        with local_ray(num_cpus=1):  # one reused worker per sweep (see conftest.ray_local)
            yield


@pytest.fixture
def sweep_env(plugin_ray, runs_dir, tmp_path, monkeypatch):
    """The sweep folder (the project's scales plus a ``toy:`` section at smoke, and the test sweeps),
    isolated runs and reports folders, the progress tables the sweeps make; the MLflow server the
    sweep starts is stopped after."""
    from cemlab.tracking.server import stop_server

    folder = local_sweeps(tmp_path, toy_sweep=TOY_SWEEP, gp_small=GP_SWEEP)
    scales = yaml.safe_load((folder / "scales.yaml").read_text())
    scales["smoke"]["toy"] = scales["smoke"]["gp"]  # the toy task's own section of the scale
    (folder / "scales.yaml").write_text(yaml.safe_dump(scales))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(folder))
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    tables: list[pg.SweepProgress] = []

    class Recorded(pg.SweepProgress):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            tables.append(self)

    monkeypatch.setattr(pg, "SweepProgress", Recorded)
    yield runs_dir, tables
    stop_server()


def _metric_names(result) -> set[str]:
    client = client_for(result)
    return {k for r in experiment_runs(client, result.sweep) if r.data.tags.get("cemlab.role") == "trial"
            for k in r.data.metrics}


def test_a_task_from_outside_runs_a_sweep_and_its_report_under_its_own_metric(sweep_env, data_cache):
    runs_dir, tables = sweep_env
    result = run("toy_sweep", data_cache)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    assert result.report is not None, result.report_error

    rows = list(tables[-1].rows.values())
    assert len(rows) == 2 and {r.status for r in rows} == {"finished"}
    assert {r.metric for r in rows} == {"mae"} and all(0 < r.test < 10 and 0 < r.val < 10 for r in rows)

    summary = json.loads((runs_dir / "logs" / "toy_sweep-smoke" / "summary.json").read_text())
    for trial in summary["trials"]:
        assert trial["test_mae"] > 0 and "test_ppl" not in trial and "test_rmse" not in trial

    names = _metric_names(result)
    assert {"val/mae", "test/mae", "test/mae_at_steps", "train/loss"} <= names
    assert not {n for n in names if "ppl" in n or "rmse" in n}, names

    folder = result.report.parent
    trials = (folder / "trials.csv").read_text()
    assert "test/mae" in trials and "ppl" not in trials
    training = [p for p in folder.glob("*.csv") if "val/mae" in p.read_text()]
    assert training, sorted(p.name for p in folder.iterdir())
    page = result.report.read_text()
    assert "validation metric (mean absolute error)" in page and "validation metric (perplexity" not in page


def test_a_gp_trial_keeps_its_rmse_under_rmse_keys(sweep_env, data_cache):
    runs_dir, tables = sweep_env
    result = run("gp_small", data_cache, report=False)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    (row,) = tables[-1].rows.values()
    assert row.metric == "rmse" and 0 < row.test < 10 and not hasattr(row, "test_ppl")
    (trial,) = json.loads((runs_dir / "logs" / "gp_small-smoke" / "summary.json").read_text())["trials"]
    assert trial["test_rmse"] == pytest.approx(row.test) and "test_ppl" not in trial
    names = _metric_names(result)
    assert {"val/rmse", "test/rmse"} <= names and not {n for n in names if "ppl" in n}, names

    # Interrupted: the outcome keeps the test value the table saw under the task's key.
    from cemlab.sweeps.stages import record
    trial_obj = tables[-1].trials[row.trial_id]
    assert record._row_metrics(trial_obj, row) == {"test/rmse": row.test}
