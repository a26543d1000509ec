"""Sweeps end to end: real Ray (local), a real MLflow server started by the sweep, real files.

At the smoke scale: two project sweep files run end to end (one parent run and one child run per
trial, with metrics; the second reuses the shared Llama baseline and runs only its new trials;
the report it builds has every file its page links); a trial that fails once succeeds on retry
from its checkpoint while one that always fails is recorded as failed, one that diverges is a
result, and the sweep completes; an Optuna learning-rate search with ASHA runs its samples once each, with what ASHA stopped
recorded as stopped. The driver-kill test is in ``test_sweep_run_resume.py``.

Ray runs in this process (``ray.init(address="local", num_cpus=2)``, once for the module: a new
local instance, never a cluster that a test in the other pytest process started); every test has
its own runs folder (MLflow store, checkpoints, logs) and stops the MLflow server the sweep started.
The token cache is shared by the tests of a pytest process so that the corpus is tokenised once there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tracking import schema
from sweep_support import REPO_SWEEPS, all_runs, client_for, experiment_runs, linked_files, local_sweeps, run

pytestmark = pytest.mark.slow
RAY_CPUS = 2  # the module's Ray (conftest.ray_local): two searched cells' trials run at once



# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def sweep_env(runs_dir, tmp_path, monkeypatch, ray_local):
    """Isolated runs and reports folders; the MLflow server the sweep starts is stopped after."""
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield runs_dir
    stop_server()


# ---------------------------------------------------------------------------------------------
# 1, 4, 5: two project sweeps end to end, shared baseline reused, the report's files
# ---------------------------------------------------------------------------------------------


def test_project_sweeps_end_to_end_reuse_and_report(sweep_env, data_cache):
    first = run("attention_replacement", data_cache)
    assert first.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in first.outcomes]
    assert first.tracking_uri.startswith("http://127.0.0.1:")   # the local server, not the sqlite file
    client = client_for(first)
    trials = load_sweep("attention_replacement").expand("smoke")

    runs = experiment_runs(client, "attention_replacement")
    parents = [r for r in runs if r.data.tags.get(schema.ROLE) == "sweep"]
    children = [r for r in runs if r.data.tags.get(schema.ROLE) == "trial"]
    assert len(parents) == 1 and len(runs) == 1 + len(trials)
    parent = parents[0]
    assert parent.info.run_id == first.parent_run_id
    assert (parent.data.tags[schema.SWEEP], parent.data.tags[schema.SCALE], parent.data.tags[schema.FIGURE]) == \
        ("attention_replacement", "smoke", "Fig 2a")
    assert parent.data.tags[schema.STATUS] == schema.STATUS_FINISHED and parent.info.status == "FINISHED"
    assert sorted(r.data.tags[schema.CONFIG_HASH] for r in children) == sorted(t.config_hash for t in trials)
    for r in children:
        assert r.data.tags[schema.PARENT_RUN_ID] == parent.info.run_id
        assert r.data.tags[schema.STATUS] == schema.STATUS_FINISHED and r.info.status == "FINISHED"
        ppl = r.data.metrics[schema.TEST_PPL]
        # test ppl = exp(test loss), both logged by the trial: an independent consistency check
        assert math.isfinite(ppl) and ppl == pytest.approx(math.exp(r.data.metrics[schema.TEST_LOSS]), rel=1e-6)
        # a smoke model learns something: better than uniform over the 320-token vocabulary
        assert ppl < 320
    assert {o.trial.trial_id: o.run_id for o in first.outcomes} == \
        {r.data.tags[schema.TRIAL_ID]: r.info.run_id for r in children}

    # 4: the second sweep shares the Llama baseline (same config hash): it is reused, not rerun.
    second = run("mlp_replacement", data_cache)
    assert second.exit_code == 0
    mlp_trials = load_sweep("mlp_replacement").expand("smoke")
    shared = {t.config_hash for t in trials} & {t.config_hash for t in mlp_trials}
    assert len(shared) == 1, "the smoke Llama baseline should be shared by both sweeps"
    status = {o.trial.config_hash: o.status for o in second.outcomes}
    assert [status[h] for h in shared] == ["reused"]
    assert sorted(status.values()) == ["finished", "finished", "reused"]
    new_runs = [r for r in experiment_runs(client, "mlp_replacement") if r.data.tags.get(schema.ROLE) == "trial"]
    assert len(new_runs) == len(mlp_trials) - 1
    assert {r.data.tags[schema.CONFIG_HASH] for r in new_runs} == {t.config_hash for t in mlp_trials} - shared
    llama_run = next(r for r in children if r.data.tags[schema.CONFIG_HASH] in shared)
    assert second.reused_run_ids == [llama_run.info.run_id]
    parent2 = client.get_run(second.parent_run_id)
    assert parent2.data.tags[schema.REUSED_FROM] == llama_run.info.run_id
    # ... and shown under the new parent by a link run (MLflow nests a run under one parent only)
    (link,) = [r for r in experiment_runs(client, "mlp_replacement") if r.data.tags.get(schema.ROLE) == "link"]
    assert link.data.tags[schema.PARENT_RUN_ID] == second.parent_run_id
    assert link.data.tags["cemlab.linked_run_id"] == llama_run.info.run_id and schema.CONFIG_HASH not in link.data.tags
    assert link.data.params == llama_run.data.params
    assert link.data.metrics[schema.TEST_PPL] == llama_run.data.metrics[schema.TEST_PPL]
    assert llama_run.info.run_id in link.data.tags["mlflow.note.content"]
    by_hash = {}
    for r in all_runs(client):
        if r.data.tags.get(schema.ROLE) == "trial":
            by_hash.setdefault(r.data.tags[schema.CONFIG_HASH], []).append(r.info.run_id)
    assert all(len(ids) == 1 for ids in by_hash.values()), by_hash   # every configuration ran once

    # 5: each sweep ended with its report: every file the page links exists and is not empty.
    for result, figure in ((first, "fig2a"), (second, "fig2b")):
        assert result.report is not None and result.report_error is None
        out = result.report.parent
        promised = set(linked_files(result.report)) | {"index.html", "index.md", "trials.csv", "cells.csv",
                                                       "claims.csv", "missing.csv", f"{figure}.png",
                                                       f"{figure}.pdf", f"{figure}.csv"}
        for name in promised:
            assert (out / name).is_file() and (out / name).stat().st_size > 0, (result.sweep, name)
        rows = (out / "trials.csv").read_text().splitlines()
        assert len(rows) == 1 + len(load_sweep(result.sweep).expand("smoke"))
        assert all(",finished," in row for row in rows[1:])

    summary = json.loads((sweep_env / "logs" / "mlp_replacement-smoke" / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["counts"] == {"finished": 2, "reused": 1}


# ---------------------------------------------------------------------------------------------
# 3: retries from the last checkpoint; a trial that always fails is recorded, the sweep completes
# ---------------------------------------------------------------------------------------------

FAULTY = """\
figure: "test: faults"
axes: {size: [86m], lr: [1.0e-3, 2.0e-3, 3.0e-3]}
variants:
  - {group: llama, label: llama}
"""


def test_failing_trials_retry_or_are_recorded_failed_and_divergence_is_a_result(sweep_env, data_cache, tmp_path,
                                                                                 monkeypatch):
    from cemlab.sweeps.stages.invocation import EXIT_FAILED

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, faulty=FAULTY)))
    # lr 1e-3 fails at its 2nd validation (step 16; the checkpoint of step 8 exists) on its first
    # attempt only; lr 3e-3 fails at its 1st validation on every attempt; lr 2e-3 diverges (NaN
    # loss at step 5).
    monkeypatch.setenv("CEMLAB_SWEEP_FAULTS", json.dumps({"*lr1e-3*": {"times": 1, "at_report": 2},
                                                          "*lr3e-3*": {"times": -1, "at_report": 1},
                                                          "*lr2e-3*": {"nan_at_step": 5}}))
    result = run("faulty", data_cache, retries=1, report=False)
    assert result.exit_code == EXIT_FAILED
    out = {o.trial.trial_id: o for o in result.outcomes}
    once, always, nan = out["86m__llama__lr1e-3__s0"], out["86m__llama__lr3e-3__s0"], out["86m__llama__lr2e-3__s0"]
    assert nan.status == "diverged" and nan.attempts == 1   # a result: not retried, not a failure

    assert once.status == "finished" and once.attempts == 2 and once.resumed
    assert always.status == "failed" and always.attempts == 2 and "InjectedFault" in always.error
    log = Path(always.log_path).read_text()
    assert log.count("InjectedFault: injected failure") >= 2 and "Traceback" in log
    assert "resuming from" in Path(once.log_path).read_text()

    client = client_for(result)
    runs = {r.data.tags[schema.TRIAL_ID]: r for r in experiment_runs(client, "faulty")
            if r.data.tags.get(schema.ROLE) == "trial"}
    assert len(runs) == 3   # each trial once, retries included
    diverged = runs[nan.trial.trial_id]
    assert diverged.info.status == "FINISHED" and diverged.data.tags[schema.STATUS] == "diverged"
    assert diverged.data.tags[schema.DIVERGED_STEP] == "5"
    ok, bad = runs[once.trial.trial_id], runs[always.trial.trial_id]
    assert ok.info.run_id == once.run_id and ok.info.status == "FINISHED"
    assert ok.data.tags[schema.STATUS] == "finished" and schema.ERROR not in ok.data.tags
    steps = [m.step for m in client.get_metric_history(ok.info.run_id, schema.TRAIN_LOSS)]
    assert sorted(steps) == list(range(1, 17))   # resumed at step 8: every step logged exactly once
    assert bad.info.status == "FAILED" and bad.data.tags[schema.STATUS] == "failed"
    assert "InjectedFault" in bad.data.tags[schema.ERROR]
    assert bad.data.tags[schema.LOG_FILE] == always.log_path
    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags[schema.STATUS] == "failed"   # the next run of the command reopens it


# ---------------------------------------------------------------------------------------------
# 6: Optuna over the learning rate with ASHA
# ---------------------------------------------------------------------------------------------

# One grid cell; 4 learning rates; validation every 4 of the 16 smoke steps, so a trial reports
# 3 validations and a final result and ASHA (grace 1, factor 2) has rungs at 1 and 2 reports.
LRSEARCH = """\
figure: "test: lr search"
description: "Optuna over the learning rate of one grid cell, ASHA stopping (a test of search optuna)."
base: {train.val_interval: 4}
axes: {size: [86m]}
variants:
  - {group: llama, label: llama}
search: optuna
optuna:
  lr: [1.0e-5, 1.0e-1]
  samples: {smoke: 4, tiny: 8, paper: 16}
  grace_period: 1
  reduction_factor: 2
"""


def test_optuna_search_with_asha_runs_each_sample_once(sweep_env, data_cache, tmp_path, monkeypatch):
    from cemlab.sweeps.stages.execute import validation_reports

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, lrsearch=LRSEARCH)))
    (cell,) = load_sweep("lrsearch").expand("smoke")
    assert cell.search.samples == 4 and cell.config.train.lr == pytest.approx(1e-3)   # geometric centre
    max_t = validation_reports(cell)
    assert max_t == 4

    result = run("lrsearch", data_cache, report=False)
    assert result.exit_code == 0
    (search,) = result.searches
    assert len(search.ran) == len(set(search.ran)) == 4
    assert search.ran[0] == cell.trial_id   # the first point is the range's centre
    stopped = set(search.stopped)
    # What Tune's results say ASHA did: a stopped trial reported fewer than max_t times.
    assert stopped == {t for t, n in search.iterations.items() if n < max_t}
    assert all(n == max_t for t, n in search.iterations.items() if t not in stopped)

    client = client_for(result)
    runs = [r for r in experiment_runs(client, "lrsearch") if r.data.tags.get(schema.ROLE) == "trial"]
    assert sorted(r.data.tags[schema.TRIAL_ID] for r in runs) == sorted(search.ran)   # each sample once
    assert len({r.data.tags[schema.CONFIG_HASH] for r in runs}) == 4
    for r in runs:
        assert r.data.tags[schema.SEARCH_CELL] == cell.trial_id
        lr = float(r.data.params["train.lr"])
        assert 1e-5 <= lr <= 1e-1 and r.data.tags[schema.axis_tag("lr")] == str(lr)
        assert r.info.status == "FINISHED" and schema.ERROR not in r.data.tags   # stopped is not failed
        if r.data.tags[schema.TRIAL_ID] in stopped:
            assert r.data.tags[schema.STATUS] == "stopped" and schema.TEST_PPL not in r.data.metrics
            step = int(r.data.tags[schema.STOPPED_STEP])
            assert step in (4, 8) and r.data.metrics[schema.VAL_LOSS] > 0
            assert sorted(m.step for m in client.get_metric_history(r.info.run_id, schema.TRAIN_LOSS)) == \
                list(range(1, step + 1))
        else:
            assert r.data.tags[schema.STATUS] == "finished" and math.isfinite(r.data.metrics[schema.TEST_PPL])

    # Running the command again finds every sample done: nothing new runs.
    again = run("lrsearch", data_cache, report=False)
    assert again.exit_code == 0 and again.searches[0].ran == []
    assert sorted(o.status for o in again.outcomes) == sorted(
        "stopped" if t in stopped else "reused" for t in search.ran)
    assert len([r for r in experiment_runs(client, "lrsearch") if r.data.tags.get(schema.ROLE) == "trial"]) == 4


TWO_CELLS = """\
figure: "test: two searched cells"
base: {train.val_interval: 8}
axes: {size: [86m]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: cem-attn, set: {model.attention: cem}}
search: optuna
optuna:
  lr: [1.0e-4, 1.0e-2]
  samples: 2
"""


def test_searched_cells_run_at_once_when_the_cluster_holds_them(sweep_env, data_cache, tmp_path, monkeypatch):
    """Two searched cells on 2 CPUs (1 CPU per trial): each cell gets one slot and the two cells'
    Tuners run at the same time, which the runs' own start and end times in MLflow show."""
    from cemlab.sweeps.stages.execute import search_concurrency

    assert search_concurrency(2, 2) == (2, 1) and search_concurrency(3, 8) == (3, 2)
    assert search_concurrency(4, 1) == (1, 1)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, twocells=TWO_CELLS)))
    result = run("twocells", data_cache, report=False)
    assert result.exit_code == 0 and sorted(len(s.ran) for s in result.searches) == [2, 2]
    client = client_for(result)
    runs = [r for r in experiment_runs(client, "twocells") if r.data.tags.get(schema.ROLE) == "trial"]
    cells = {r.data.tags[schema.SEARCH_CELL] for r in runs}
    assert len(cells) == 2 and len(runs) == 4
    # each trial's span as Tune ran it (the stage timestamps, cemlab.timing): the MLflow run alone
    # covers only its training, a fraction of a second at smoke scale, too short to show the overlap
    from cemlab import timing

    spans: dict[str, list[tuple[float, float]]] = {}
    for span in timing.read_spans(sweep_env / "logs" / "twocells-smoke" / "stages.jsonl"):
        cell = next((c for c in cells if span.get("stage") == "trial" and str(span.get("trial", "")).startswith(c)), None)
        if cell is not None:
            spans.setdefault(cell, []).append((span["start"], span["end"]))
    (a, b) = spans.values()
    assert a and b, spans  # at least one recorded trial span of each cell
    assert any(sa < eb and sb < ea for sa, ea in a for sb, eb in b), spans  # a trial of each cell at once


# ---------------------------------------------------------------------------------------------
# Errors before anything runs
# ---------------------------------------------------------------------------------------------


def test_cli_refuses_a_broken_sweep_before_starting(runs_dir, tmp_path, monkeypatch, capsys):
    from cemlab.cli import main

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, broken="""\
        figure: "x"
        axes: {size: [86m]}
        variants:
          - {group: llama, label: llama, set: {model.atention: cem}}
        """)))
    assert main(["sweep", "broken", "--scale", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml" in err and "atention" in err
    assert main(["sweep", "no_such_sweep"]) == 2
    assert "no_such_sweep" in capsys.readouterr().err
    assert not (runs_dir / "mlflow" / "server.json").exists()   # nothing was started
