"""Every sweep file of the project runs end to end at the smoke scale: real Ray, a real MLflow
server, its report built, so a new sweep file or scale cannot land broken.

Cheap by sharing: one local Ray (``ray_local`` of ``test_sweep_run``), one runs folder and so one
MLflow server for every file, and the token cache of the other sweep tests. A trial whose config
an earlier file already ran (the shared Llama baselines) is reused from the store by its config
hash, as in real use, instead of run again. Expected trial counts come from the YAML itself
(``test_sweep_files.expected_grid``).
"""

from __future__ import annotations

import math

import pytest
from sweep_support import REPO_SWEEPS, SWEEP_FILES, client_for, expected_grid, run

from cemlab.tracking import schema

pytestmark = pytest.mark.slow

RESULTS = ("finished", "diverged", "stopped", "done", "reused")


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory, ray_local):
    """One runs and reports folder for every file; the MLflow server the first sweep starts
    serves them all and is stopped at the end."""
    from cemlab.tracking.server import stop_server

    root = tmp_path_factory.mktemp("all-sweeps")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_RUNS_DIR", str(root / "runs"))
        mp.setenv("CEMLAB_REPORTS_DIR", str(root / "reports"))
        mp.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
        mp.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield root
        stop_server()


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_every_sweep_file_runs_end_to_end_at_smoke(shared_runs, data_cache, path):
    result = run(path.stem, data_cache)
    detail = [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    assert result.exit_code == 0, (detail, result.report_error)
    rows, runs = expected_grid(path, "smoke")
    assert len(result.outcomes) == runs, detail   # every trial (every sample of a searched cell)
    assert len({o.trial.trial_id for o in result.outcomes}) == runs
    assert all(o.status in RESULTS and o.run_id for o in result.outcomes), detail
    if result.searches:
        assert len(result.searches) == rows   # one searched cell per grid cell

    client = client_for(result)
    assert client.get_run(result.parent_run_id).data.tags[schema.STATUS] == "finished"
    for o in result.outcomes:
        run_ = client.get_run(o.run_id)
        assert run_.data.tags[schema.CONFIG_HASH] == o.trial.config_hash
        assert run_.data.tags[schema.STATUS] in ("finished", "diverged", "stopped")
        metric = schema.TEST_RMSE if o.trial.task == "gp" else schema.TEST_PPL
        if run_.data.tags[schema.STATUS] == "finished":
            assert math.isfinite(run_.data.metrics[metric]), (o.trial.trial_id, metric)
        if o.status == "reused":   # another sweep's run: same config, earlier in this module
            assert run_.data.tags.get(schema.SWEEP) != path.stem
    assert result.report is not None and result.report_error is None, result.report_error
    assert result.report.is_file() or (result.report / "index.html").is_file()
