"""Stage 4 of a sweep: what MLflow and the log folder hold of an invocation.

The driver creates the sweep's experiment ``cemlab/<sweep>`` and a *parent run*
(``cemlab.role=sweep``, tags sweep, figure, scale; :func:`open_parent_run`); when the latest parent
run of this sweep and scale did not finish (the driver died, was interrupted, or trials failed),
it is reopened instead, so a rerun continues the same invocation. Reused run ids are recorded on
the parent as ``cemlab.reused_from``.

Two drivers of the same sweep and scale at once (one runs folder): the second finds the first's
``driver.lock`` held (``cemlab.sweeps.stages.guards.DriverLock``), does not reopen its parent run but
opens its own, and its trials wait on the per-trial locks; a trial that waited takes the first
sweep's run (``waited``), and the summary names that sweep's parent run.

After the trials (:func:`finish`): every outcome is checked against the store (a trial that
claims a result without an active run holding it is ``missing``, a failure), the parent run is
finished (``finished``, or ``failed`` when a trial failed) with those counts, and
``<runs>/logs/<sweep>-<scale>/summary.json`` and ``summary-<parent run id>.json`` are written
(each replaced atomically). Runs of trials that were stopped, interrupted, or cut off by a store
that went away are marked here too (:func:`mark_stopped`, :func:`mark_interrupted`,
:func:`mark_store_lost`), and so are the runs a driver left running when it died before it could
(:func:`mark_left_running`).

MLflow is imported inside the function that writes metrics with it, so ``cemlab sweep`` refuses a
bad sweep file without loading MLflow (about 1.8 s).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.stages.guards import STOP_WAIT_S, DriverLock, trial_pid, wait_for_exit
from cemlab.sweeps.stages.invocation import Invocation, SweepResult, TrialOutcome, write_json_atomic
from cemlab.sweeps.sweepfile.load import SweepSpec
from cemlab.sweeps.trial.files import TrialFiles
from cemlab.sweeps.trial.lock import lock_is_free
from cemlab.sweeps.trial.tune_report import STEP_KEY
from cemlab.tasks import get_task
from cemlab.tracking import mlflow_run as mr, schema
from cemlab.tracking.conventions import describe_sweep_run, link_reused_runs
from cemlab.tracking.outcomes import SEARCH_RESULTS
from cemlab.tracking.store import ensure_experiment, get_client, run_status, search_runs
from cemlab.train.run_action import is_connection_error

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger("cemlab.sweeps")


def open_invocation(spec: SweepSpec, scale: str, uri: str, n_trials: int, runs_dir: Path, log_dir: Path,
                    driver_lock: DriverLock, *, retries: int, cache_dir: str | None, faults: dict) -> Invocation:
    """The invocation's experiment and parent run in the store at ``uri`` (module docstring)."""
    client = get_client(uri)
    experiment_id = ensure_experiment(f"cemlab/{spec.name}", client)
    other = None if driver_lock.held else driver_lock.other_parent()
    parent_run_id, reopened = open_parent_run(client, experiment_id, spec, scale, n_trials, other)
    driver_lock.record(parent_run_id)
    progress = pg.SweepProgress(f"{spec.name} ({spec.figure}) at scale {scale}")
    return Invocation(spec, scale, client, uri, experiment_id, parent_run_id, reopened, runs_dir, log_dir, retries,
                      cache_dir, faults, progress, other_driver=other)


def open_parent_run(client: "MlflowClient", experiment_id: str, spec: SweepSpec, scale: str,
                    n_trials: int, other_running: str | None = None) -> tuple[str, bool]:
    """The parent run of this invocation: the latest one of this sweep and scale when it did not
    finish (reopened), else a new one. Returns (run id, reopened). ``other_running``: another
    driver of this sweep and scale is running now (its parent run id, or "" when unknown): its
    parent is not reopened, this invocation gets its own, tagged ``cemlab.concurrent_with``."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{schema.ROLE}` = 'sweep' and "
                              f"tags.`{schema.SCALE}` = '{scale}'", order_by=["attributes.start_time DESC"],
                              max_results=1)
    if runs and run_status(runs[0]) != schema.STATUS_FINISHED and other_running is None:
        run_id = runs[0].info.run_id
        mr.reopen_run(client, run_id)
        return run_id, True
    tags = {schema.ROLE: "sweep", schema.SWEEP: spec.name, schema.FIGURE: spec.figure, schema.SCALE: scale,
            schema.TASK: spec.task, schema.STATUS: schema.STATUS_RUNNING}
    if other_running is not None:
        tags[schema.CONCURRENT_WITH] = other_running or (runs[0].info.run_id if runs else "")
    if scale in spec.rungs():  # a ladder rung: its tokens per parameter, as on its trials
        tags[schema.RUNG] = f"{spec.rungs()[scale]:g}"
    commit = mr.git_commit()
    if commit:
        tags[schema.GIT_COMMIT] = commit
    run_id = mr.create_run(client, experiment_id, f"[{scale}] {spec.name}", tags)  # the scale first: the UI cuts long names
    mr.log_params(client, run_id, {"sweep": spec.name, "scale": scale, "search": spec.search, "trials": n_trials,
                                   "figure": spec.figure})
    if spec.path is not None:
        client.log_text(run_id, spec.path.read_text(), "sweep.yaml")
    return run_id, False


def mark_stopped(client: "MlflowClient", run_id: str, metrics: dict[str, Any]) -> None:
    """A run ASHA stopped (its process has ended): the metrics of its last report that the run
    did not get to log, then ``cemlab.status=stopped`` and MLflow status FINISHED (a result)."""
    from mlflow.entities import Metric

    step = int(metrics.get(STEP_KEY, 0))
    now = int(time.time() * 1000)
    values = []
    for k, v in metrics.items():
        if "/" in k and isinstance(v, (int, float)) and math.isfinite(float(v)):
            if not any(m.step >= step for m in client.get_metric_history(run_id, k)):
                values.append(Metric(k, float(v), now, step))
    if values:
        client.log_batch(run_id, metrics=values)
    with contextlib.suppress(Exception):
        client.delete_tag(run_id, schema.ERROR)  # train() saw the stop as an exception
    client.set_tag(run_id, schema.STATUS, schema.STATUS_STOPPED)
    client.set_tag(run_id, schema.STOPPED_STEP, str(step))
    client.set_terminated(run_id, status="FINISHED")


def mark_interrupted(state: Invocation) -> None:
    """After Ctrl-C/SIGTERM (trial processes already ended): the runs of the trials that were
    running say interrupted, unless the store holds their result (a trial that finished while the
    sweep was being stopped is finished, not interrupted); every trial of the table gets an outcome (those that ended during
    the interrupted ``fit`` from what the table saw, the others ``queued``)."""
    for tid, row in list(state.progress.rows.items()):
        if tid in state.outcomes:
            continue
        trial = state.progress.trials[tid]
        log_path = str(state.files.log(tid))
        if row.status not in (pg.RUNNING, pg.RETRYING):
            metrics = _row_metrics(trial, row)
            state.outcomes[tid] = TrialOutcome(trial, row.status, row.run_id or None, metrics, seconds=row.seconds,
                                               wall=row.elapsed, attempts=row.attempts, log_path=log_path)
            continue
        run_id = row.run_id or state.files.run_id(trial)
        wait_for_exit(trial_pid(Path(log_path)), STOP_WAIT_S)  # it may still be saying how it ended
        if run_id:
            try:
                run = state.client.get_run(run_id)
                if run_status(run) in SEARCH_RESULTS:  # it finished while the sweep was being stopped
                    state.progress.set_status(tid, run_status(run))
                    state.outcomes[tid] = TrialOutcome(trial, run_status(run), run_id, dict(run.data.metrics),
                                                       wall=row.elapsed, attempts=row.attempts, log_path=log_path)
                    continue
                if run.info.status == "RUNNING":
                    mr.finish_run(state.client, run_id, schema.STATUS_INTERRUPTED)
            except Exception as e:  # the store may be going down too: the rerun tidies up
                log.warning("could not mark run %s interrupted: %s", run_id, e)
        state.progress.set_status(tid, schema.STATUS_INTERRUPTED)
        state.outcomes[tid] = TrialOutcome(trial, schema.STATUS_INTERRUPTED, run_id or None, wall=row.elapsed,
                                           attempts=row.attempts, log_path=log_path)


def mark_left_running(uri: str, runs_dir: Path, log_dir: Path) -> list[str]:
    """The runs a dead driver of this sweep and scale left ``RUNNING`` -> ``interrupted``: its parent
    run and every trial run under it whose trial no process trains any more (its trial lock is
    free). For a driver that died before it could say how its sweep ended: killed, its node lost,
    or under SLURM, whose SIGTERM reaches the job's Ray too, and Ray ends a driver whose raylet is
    gone (the job script calls this after every stop). Returns the run ids marked; nothing else is
    touched (checkpoints and metrics stay; the next ``cemlab sweep`` resumes the runs). Raises
    ``RuntimeError`` while a driver of this sweep and scale runs."""
    if not log_dir.is_dir():  # no driver of this sweep and scale ever ran here
        return []
    lock = DriverLock(log_dir)
    if not lock.held:
        raise RuntimeError(f"a driver of this sweep (pid {lock.other_pid()}) is running: it records its own runs")
    try:
        parent_id = lock.other_parent()  # what the dead driver wrote in driver.json
        if not parent_id:
            return []
        client = get_client(uri)
        parent = client.get_run(parent_id)
        children = search_runs(client, [parent.info.experiment_id], f"tags.`{schema.PARENT_RUN_ID}` = '{parent_id}'")
        files, marked = TrialFiles(runs_dir, log_dir), []
        for run in children:
            folder = files.checkpoints_of(run.data.tags.get(schema.CONFIG_HASH, ""))
            if run.info.status == "RUNNING" and lock_is_free(folder):
                mr.finish_run(client, run.info.run_id, schema.STATUS_INTERRUPTED)
                marked.append(run.info.run_id)
        if parent.info.status == "RUNNING":
            mr.finish_run(client, parent_id, schema.STATUS_INTERRUPTED)
            marked.append(parent_id)
        return marked
    finally:
        lock.release()  # the dead driver's driver.json goes: no driver runs this sweep


def _row_metrics(trial, row: pg.Row) -> dict[str, float]:
    """The test metric the table saw for a trial, under its task's key (``test/ppl``, ``test/rmse``)."""
    return {} if math.isnan(row.test) else {get_task(trial.task).test_metric: row.test}


def mark_store_lost(state: Invocation, message: str) -> None:
    """The store went away (trial processes already ended): every trial without an outcome is
    interrupted with ``message`` (its checkpoint is kept; nothing is written to the store, which
    does not answer). A rerun once the store is back continues them."""
    for tid, row in list(state.progress.rows.items()):
        if tid in state.outcomes and state.outcomes[tid].status != schema.STATUS_FAILED:
            continue
        trial = state.progress.trials[tid]
        if row.status in SEARCH_RESULTS + pg.NOT_TRAINED:
            metrics = _row_metrics(trial, row)
            state.outcomes[tid] = TrialOutcome(trial, row.status, row.run_id or None, metrics, seconds=row.seconds,
                                               wall=row.elapsed, attempts=row.attempts,
                                               log_path=str(state.files.log(tid)))
            continue
        state.progress.set_status(tid, schema.STATUS_INTERRUPTED, note="MLflow store not answering")
        state.outcomes[tid] = TrialOutcome(trial, schema.STATUS_INTERRUPTED, row.run_id or None, wall=row.elapsed,
                                           attempts=row.attempts, log_path=str(state.files.log(tid)),
                                           error=message)


def _check_against_store(state: Invocation, trial_outcomes: list[TrialOutcome]) -> None:
    """Make every outcome that claims a result agree with the store after the sweep: a trained,
    done or recorded trial needs an active run with a result under this parent; a reused or
    waited one an active run with a result and the trial's config hash, and no other run of that
    hash under this parent may still be ``RUNNING`` (an orphan of an earlier attempt). Otherwise it
    is ``missing`` (a failure), whatever the trial said."""
    results = SEARCH_RESULTS
    children = {r.info.run_id: r for r in search_runs(state.client, [state.experiment_id],
                                                       f"tags.`{schema.PARENT_RUN_ID}` = '{state.parent_run_id}'")}
    for o in trial_outcomes:
        if o.status not in results + pg.NOT_TRAINED:
            continue
        mine = o.status in (pg.DONE, pg.RECORDED)   # must be children of this parent
        run = children.get(o.run_id or "")
        if run is None and not mine and o.run_id:
            try:
                run = state.client.get_run(o.run_id)
            except Exception as e:
                if is_connection_error(e):
                    raise
            if run is not None and run.info.lifecycle_stage != "active":
                run = None
        ok = (run is not None and run_status(run) in results
              and run.data.tags.get(schema.CONFIG_HASH) == o.trial.config_hash)
        stray = [r.info.run_id for r in children.values() if r.info.run_id != o.run_id
                 and r.data.tags.get(schema.CONFIG_HASH) == o.trial.config_hash and r.info.status == "RUNNING"]
        defect = None
        if not ok:
            defect = (f"said {o.status}, but the store {state.uri} holds no active run with a result for it "
                      f"(run {o.run_id}){' under this parent' if mine else ''}")
        elif stray:
            defect = (f"its run {o.run_id} has a result, but the store {state.uri} also holds a RUNNING run of "
                      f"its config under this parent ({', '.join(stray)}): one run per config; delete the stray one")
        if defect:
            o.error = defect
            o.status = pg.MISSING
            state.progress.set_status(o.trial.trial_id, pg.MISSING, note=o.error)


def finish(state: Invocation, interrupted: bool, t0: float, store_error: str | None = None) -> SweepResult:
    """Check the outcomes against the store, record the invocation on the parent run and in
    ``summary.json`` (and ``summary-<parent run id>.json``). With ``store_error`` (the store went
    away) nothing is written to the store and the counts are what this invocation saw."""
    outcomes = [state.outcomes[tid] for tid in state.progress.rows if tid in state.outcomes]
    checked = False
    if store_error is None:
        try:
            _check_against_store(state, outcomes)
            checked = True
        except Exception as e:  # the store went away just now
            store_error = f"the MLflow store at {state.uri} failed while the sweep was checked ({type(e).__name__})"
    reused = sorted({o.run_id for o in outcomes if o.status == pg.REUSED and o.run_id})
    waited_on = sorted({o.waited_on for o in outcomes if o.status == pg.WAITED and o.waited_on})
    result = SweepResult(state.spec.name, state.scale, state.uri, state.experiment_id, state.parent_run_id,
                         state.parent_reopened, outcomes, state.searches, reused, interrupted=interrupted,
                         seconds=time.time() - t0, store_error=store_error, concurrent_with=waited_on,
                         counts_checked=checked, looks=list(state.looks),
                         brackets=list(state.brackets), confirmation=dict(state.confirmation),
                         carried=list(state.carried))
    if store_error is None:
        try:
            _finish_parent_run(state, result)
        except Exception as e:
            result.store_error = f"the MLflow store at {state.uri} failed while the sweep was recorded ({type(e).__name__})"
    _write_summary(state.log_dir, result)
    return result


def _finish_parent_run(state: Invocation, result: SweepResult) -> None:
    """The invocation on its parent run: reused runs, the description, whose sweeps it waited on,
    and the parent's outcome with the trial counts."""
    client, reused, waited_on = state.client, result.reused_run_ids, result.concurrent_with
    if reused:
        before = client.get_run(state.parent_run_id).data.tags.get(schema.REUSED_FROM, "")
        ids = sorted(set(filter(None, before.split(","))) | set(reused))
        client.set_tag(state.parent_run_id, schema.REUSED_FROM, ",".join(ids)[:5000])
        link_reused_runs(client, state.parent_run_id, [client.get_run(i) for i in reused])  # shown under this parent
    describe_sweep_run(client, state.parent_run_id, sweep=state.spec.name, figure=state.spec.figure,
                       scale=state.scale, description=state.spec.description,
                       run_ids=sorted({o.run_id for o in result.outcomes if o.run_id}))
    if waited_on:
        client.set_tag(state.parent_run_id, schema.CONCURRENT_WITH, ",".join(waited_on)[:5000])
    if result.interrupted:
        mr.finish_run(client, state.parent_run_id, schema.STATUS_INTERRUPTED)
    else:
        mr.finish_run(client, state.parent_run_id,
                      schema.STATUS_FAILED if result.failed else schema.STATUS_FINISHED,
                      {"cemlab.trial_counts": json.dumps(result.counts(), sort_keys=True)})


def _test_metric(o: TrialOutcome) -> dict[str, Any]:
    """A trial's test metric in the summary, under its task's key (``test_ppl``, ``test_rmse``)."""
    task = get_task(o.trial.task)
    return {task.summary_key: o.metrics.get(task.test_metric)}


def _write_summary(log_dir: Path, result: SweepResult) -> None:
    """``summary-<parent run id>.json`` and ``summary.json`` (the latest) in the sweep's log folder."""
    summary = {
        "sweep": result.sweep, "scale": result.scale, "tracking_uri": result.tracking_uri,
        "parent_run_id": result.parent_run_id, "seconds": round(result.seconds, 1), "counts": result.counts(),
        "counts_checked_against_store": result.counts_checked, "exit_code": result.exit_code,
        "waited_on_parent_runs": result.concurrent_with, "store_error": result.store_error,
        "trials": [{"trial_id": o.trial.trial_id, "status": o.status, "run_id": o.run_id,
                    "train_seconds": o.seconds, "wall_seconds": o.wall, "attempts": o.attempts,
                    **_test_metric(o), "error": o.error, "note": o.note,
                    "nodes": o.nodes}
                   for o in result.outcomes],
        "searches": [s.__dict__ for s in result.searches],
        "looks": result.looks,
        "brackets": result.brackets,
        "confirmation": result.confirmation,
        **({"carried": result.carried} if result.carried else {}),
    }
    # One file per parent run, and summary.json (the latest), each replaced atomically: a
    # concurrent sweep of the same name never leaves a mix of two.
    write_json_atomic(log_dir / f"summary-{result.parent_run_id}.json", summary)
    write_json_atomic(log_dir / "summary.json", summary)
