"""Stage 2 of a sweep: per trial, from the store, what to do: reuse, record, resume or run.

The store decides, by config hash (the source of truth, not Tune's state nor the runs folder;
``cemlab.train.run_action``, which ``cemlab train --resume`` uses too): a trial with a finished or
diverged run anywhere in the store is not run again (``done`` when that run is a child of this
parent, ``reused`` otherwise: the shared Llama baselines). A trial whose result the runs folder
keeps but the store lacks (another server, a run deleted in the UI, a reset database) is
``recorded`` into the store under this parent, without training. Every other trial is handed to
the next stage (``cemlab.sweeps.stages.execute``) to run with ``train(resume=True)``: an interrupted or
failed one continues from its checkpoint in its own MLflow run. Runs of the trial under this
parent that its checkpoint does not point to (a crash between creating a run and recording it)
are deleted first (:func:`prepare_resume`), so MLflow holds each trial once.

``search: optuna`` cells (:func:`decide_searches`): samples of a cell that have a result
(finished, diverged, stopped) count towards its number and are not run again; the others
(interrupted, failed) are tried again first, from their checkpoints.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.stages.invocation import Invocation, SearchOutcome, TrialOutcome
from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.sweeps.trial.files import TrialFiles
from cemlab.sweeps.trial.job import prepare_config
from cemlab.sweeps.trial.lock import lock_is_free, try_trial_lock
from cemlab.sweeps.trial.tune_report import RUN_ID_KEY
from cemlab.tracking import outcomes, schema
from cemlab.tracking.store import best_run, find_runs_by_hash, run_status, search_runs
from cemlab.train import run_action as dc

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger("cemlab.sweeps")


@dataclass
class CellSearch:
    """A ``search: optuna`` cell that still needs samples: the learning rates to try first
    (interrupted samples, or the range's centre), how many samples to draw, and the samples that
    already have a result (told to Optuna before it draws)."""

    cell: Trial
    points: list[float]
    num_samples: int
    search: SearchOutcome
    done_runs: list["Run"] = field(default_factory=list)


def decide_grid(state: Invocation, trials: list[Trial]) -> dict[str, Trial]:
    """Decide every trial of a grid (module docstring); returns the trials to run, by id. The
    others get their outcome (done, reused, recorded) now."""
    state.progress.add_many(trials)
    by_hash = find_runs_by_hash([t.config_hash for t in trials], state.client)
    todo: dict[str, Trial] = {}
    for t in trials:
        runs = by_hash[t.config_hash]
        folder = state.files.checkpoints(t)
        # The store decides (cemlab.train.run_action); a folder another sweep is training in is its business.
        local = state.files.state(t) if lock_is_free(folder) else None
        decision = dc.decide(state.client, t.config_hash, folder, local or {}, runs)
        if decision.action == dc.REUSE:
            _skip(state, t, decision.run)
            continue
        if decision.action == dc.RECORD:
            with try_trial_lock(folder) as mine:  # another driver may be recording or training it
                if mine:  # decided again under the lock: what the store and the folder hold now
                    decision = dc.decide(state.client, t.config_hash, folder)
                    if decision.action == dc.REUSE:
                        _skip(state, t, decision.run)
                        continue
                    if decision.action == dc.RECORD:
                        _record(state, t, folder, decision.state)
                        continue
        prepare_resume(state.client, t, runs, state.parent_run_id, state.experiment_id, state.files)
        todo[t.trial_id] = t
    return todo


def decide_searches(state: Invocation, cells: list[Trial]) -> list[CellSearch]:
    """Decide every ``search: optuna`` cell (module docstring); returns the cells that still need
    samples. Samples with a result get their outcome now."""
    for cell in cells:  # the time-left estimate counts every cell's samples from the start
        state.progress.expect(cell, cell.search.samples)
    jobs = []
    for cell in cells:
        found = find_search_runs(state.client, state.experiment_id, cell)
        samples = cell.search.samples
        done_runs, pending_lrs = [], []
        for runs in found.values():
            best = best_run(runs, outcomes.SEARCH_RESULTS)
            if best is not None:
                done_runs.append(best)
            else:
                lr = runs[0].data.params.get("train.lr")
                if lr is not None:
                    pending_lrs.append(float(lr))
        search = SearchOutcome(cell.trial_id, samples)
        state.searches.append(search)
        for run in done_runs:
            t = state.job(cell=cell).resolve({"lr": float(run.data.params.get("train.lr"))})
            _skip(state, t, run, schema.STATUS_STOPPED if run_status(run) == schema.STATUS_STOPPED else None)
        remaining = samples - len(done_runs)
        if remaining <= 0:
            continue
        state.progress.expect(cell, remaining)  # for the time-left estimate
        points = pending_lrs[:remaining] if (found or pending_lrs) else [cell.config.train.lr]
        for lr in points:  # interrupted samples continue from their checkpoints
            t = state.job(cell=cell).resolve({"lr": lr})
            prepare_resume(state.client, t, found.get(t.config_hash, []), state.parent_run_id, state.experiment_id,
                           state.files)
        jobs.append(CellSearch(cell, points, remaining, search, done_runs))
    return jobs


def _parent_of(run: "Run") -> str | None:
    return run.data.tags.get(schema.PARENT_RUN_ID)


def prepare_resume(client: "MlflowClient", trial: Trial, runs: list["Run"], parent_run_id: str, experiment_id: str,
                   files: TrialFiles) -> None:
    """Before (re)running ``trial``: nest the MLflow run its checkpoint points at under this
    parent (same experiment), and delete this parent's other unfinished runs of the trial (a
    driver killed between creating a run and recording it leaves one). The trial finds that run
    again by asking the store (``cemlab.train.run``), whatever address the store has now."""
    if not lock_is_free(files.checkpoints(trial)):
        return  # another sweep is training this config right now: the trial will wait for it
    state = files.state(trial)
    keep = None
    if state and state.get("run_id"):
        keep = next((r for r in runs if r.info.run_id == state["run_id"]), None)
    if keep is not None:
        if _parent_of(keep) != parent_run_id and keep.info.experiment_id == experiment_id:
            client.set_tag(keep.info.run_id, schema.PARENT_RUN_ID, parent_run_id)
    for run in runs:
        if run is not keep and _parent_of(run) == parent_run_id:
            log.info("deleting run %s of %s: its checkpoint does not point to it", run.info.run_id, trial.trial_id)
            client.delete_run(run.info.run_id)


def _run_metrics(run: "Run") -> dict[str, float]:
    return {k: float(v) for k, v in run.data.metrics.items()}


def _skip(state: Invocation, trial: Trial, run: "Run", status: str | None = None) -> None:
    """Record a trial the store already has a result for: ``done`` (a run of this parent) or
    ``reused`` (another sweep's or an earlier invocation's), unless ``status`` says otherwise."""
    mine = _parent_of(run) == state.parent_run_id
    status = status or (pg.DONE if mine else pg.REUSED)
    state.progress.add(trial)
    state.outcomes[trial.trial_id] = TrialOutcome(trial, status, run.info.run_id, _run_metrics(run))
    note = "" if mine else f"run {run.info.run_id[:8]} of {run.data.tags.get(schema.SWEEP, '?')}"
    state.progress.set_status(trial.trial_id, status, note=note)
    state.progress.update(trial.trial_id, {**_run_metrics(run), RUN_ID_KEY: run.info.run_id})


def _record(state: Invocation, trial: Trial, folder: Path, local: dict) -> None:
    """The runs folder holds ``trial``'s result and the store lacks its run: record it under this
    parent (``cemlab.train.run_action.record_from_local``), without training; say so in the trial's
    log and the table."""
    cfg = prepare_config(trial, state.job())
    origin = f"run {str(local.get('run_id'))[:8]} of {(local.get('store') or {}).get('tracking_uri') or local.get('tracking_uri') or '?'}"
    result = dc.record_from_local(state.client, cfg, folder, local, state.uri, state.parent_run_id, "trial")
    note = f"recorded from local state ({origin}); not trained"
    log_path = state.files.log(trial.trial_id)
    with open(log_path, "a") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} (config {trial.config_hash}): "
                 f"{note}: the store {state.uri} lacked it; now run {result.run_id}\n")
    state.progress.add(trial)
    state.outcomes[trial.trial_id] = TrialOutcome(trial, pg.RECORDED, result.run_id, dict(result.metrics),
                                                  seconds=0.0, log_path=str(log_path), note=note)
    state.progress.set_status(trial.trial_id, pg.RECORDED, note=note)
    state.progress.update(trial.trial_id, {**result.metrics, RUN_ID_KEY: result.run_id})


def find_search_runs(client: "MlflowClient", experiment_id: str, cell: Trial) -> dict[str, list["Run"]]:
    """Runs of an Optuna-searched cell (tag ``cemlab.search_cell``) at its scale, by config hash."""
    runs = search_runs(client, [experiment_id], f"tags.`{schema.SEARCH_CELL}` = '{cell.trial_id}' and "
                                                 f"tags.`{schema.SCALE}` = '{cell.scale}'")
    out: dict[str, list[Run]] = {}
    for r in sorted(runs, key=lambda r: r.info.start_time or 0, reverse=True):
        out.setdefault(r.data.tags.get(schema.CONFIG_HASH, ""), []).append(r)
    return out
