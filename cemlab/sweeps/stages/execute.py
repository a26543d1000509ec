"""Stage 3 of a sweep: run the trials that need running on Ray Tune, and learn how each ended.

Local Ray with the machine's CPUs (or ``cpus``), or the cluster at ``$RAY_ADDRESS``
(:func:`connect_ray`); each trial asks for its scale's resources, so the CPUs are split between
concurrent trials. Every trial runs ``cemlab.sweeps.trial.trainable.run_trial``. A trial of several
workers (``resources.workers > 1``) is a Ray Train run of that many DDP ranks inside its Tune
trial (``cemlab.sweeps.trial.distributed``): the ranks ask for the CPUs and GPUs, and the sweep runs no
more such trials at once than the cluster holds (:func:`trial_slots`). A failing trial is retried
``retries`` times (Tune ``FailureConfig``) from its last checkpoint; if it still fails it is
recorded as failed and the others go on.

A grid is one Tuner (:func:`run_grid`, storage ``<runs>/ray/<sweep>-<scale>``). With
``search: optuna`` each grid cell is its own Tuner (:func:`run_searches`) with an ``OptunaSearch``
over the learning rate and an ``ASHAScheduler`` (Tune's ``OptunaSearch`` takes no grid axes and
never prunes); trials ASHA stops are marked ``stopped`` (a result); the cells' Tuners run at once,
as many as the cluster holds trials (:func:`search_concurrency`), each cell with its share of the
trial slots.

Each Tune result becomes the trial's :class:`~cemlab.sweeps.stages.invocation.TrialOutcome`
(:func:`_tune_outcome`), with its MLflow run's terminal status made right (failed when the trial
died outside ``train``, stopped when ASHA stopped it: ``cemlab.sweeps.stages.record.mark_stopped``).

Optuna and Tune's ASHA scheduler and Optuna searcher are imported only for ``search: optuna`` cells,
so a grid sweep does not load them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ray
from ray import tune

from cemlab import timing
from cemlab.sweeps.gpu_slots import with_share
from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.trial import tune_report as rk
from cemlab.sweeps.stages.trial_actions import CellSearch
from cemlab.sweeps.stages.guards import STOP_WAIT_S, wait_for_exit
from cemlab.sweeps.stages.invocation import Invocation, TrialOutcome
from cemlab.sweeps.stages.preflight import RAY_HINT, check_ray_address
from cemlab.sweeps.stages.record import mark_stopped
from cemlab.sweeps.sweepfile.schema import SweepError, Trial
from cemlab.sweeps.trial.trainable import run_trial
from cemlab.sweeps.trial.job import TrialJob
from cemlab.tracking import mlflow_run as mr, schema
from cemlab.tracking.store import run_status, telemetry_off
from cemlab.train.plan import make_plan

#: Ray's logical memory (bytes) the Tune process of a multi-worker trial asks for (it only waits).
DRIVER_MEMORY = 256 * 2**20


#: Set to 0: every grid trial in a fresh worker process instead of a reused one.
REUSE_WORKERS_ENV = "CEMLAB_SWEEP_REUSE_WORKERS"


#: The address local Ray binds to: loopback only (Ray has no authentication here).
LOCAL_RAY_HOST = "127.0.0.1"


def connect_ray(cpus: int | None = None) -> bool:
    """Join the cluster at ``$RAY_ADDRESS``, or start local Ray with ``cpus`` (default: all of
    this machine's). Returns True when this call started or joined Ray (and should shut it down);
    an already initialised Ray (a test, a notebook) is used as it is.

    Local Ray is always a new instance of this driver (``address="local"``: never a cluster that
    another ``ray start``, live or dead, left in Ray's "current cluster" file), bound to
    :data:`LOCAL_RAY_HOST` with no dashboard, so nothing of it listens on another interface."""
    if ray.is_initialized():
        return False
    telemetry_off()
    common = dict(logging_level=logging.ERROR, log_to_driver=False, configure_logging=True)
    address = os.environ.get("RAY_ADDRESS")
    if address:
        check_ray_address()
        try:
            ray.init(address=address, **common)
        except ConnectionError as e:  # e.g. "auto" with no cluster on this machine
            raise SweepError(f"RAY_ADDRESS={address}: {e}; {RAY_HINT}") from None
    else:
        with _loopback_node():
            ray.init(address="local", num_cpus=cpus or os.cpu_count() or 1, include_dashboard=False,
                     _node_ip_address=LOCAL_RAY_HOST, **common)
    return True


@contextlib.contextmanager
def _loopback_node():
    """While local Ray starts, its node address stays :data:`LOCAL_RAY_HOST`: on Linux Ray replaces
    a loopback ``_node_ip_address`` by the machine's external address, and its processes then bind
    every interface, unless Ray's "no cluster" setting is off (as it is on macOS and Windows:
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` for the processes it starts, and the same flag in this
    one, read when ``ray`` was imported)."""
    from ray._private import ray_constants

    key, flag = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER
    before = os.environ.get(key)
    os.environ[key], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = flag
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def quiet_tune(search: str = "grid") -> None:
    """Tune prints nothing (the sweep has its own table) and leaves Ctrl-C to the driver; Optuna
    (``search: optuna``) only warns."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    logging.getLogger("ray").setLevel(logging.ERROR)
    for name in ("ray.tune", "ray.train", "ray.air"):  # failures are reported by the sweep itself
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if search == "optuna":
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


class HaltOnLostStore(tune.Callback):
    """Once the store is lost (``cemlab.sweeps.stages.guards.StoreWatch``), nothing new starts: the Tune
    loop ends before its next step (no retry, no queued trial), and a trial that fails (to be
    retried or not) makes the store be probed at once, before Tune could retry it."""

    def __init__(self, watch):
        self.watch = watch

    def __getstate__(self):   # Tune pickles its callbacks into the experiment state: not the live watch
        return {"watch": None}

    def _halt(self) -> None:
        raise KeyboardInterrupt(f"store lost: {self.watch.lost}")

    def on_step_begin(self, iteration, trials, **info):
        if self.watch is not None and self.watch.lost:
            self._halt()

    def on_trial_error(self, iteration, trials, trial, **info):
        if self.watch is not None and self.watch.confirm_lost(f"trial {trial.trial_id} failed"):
            self._halt()

    on_trial_recover = on_trial_error   # a failed trial about to be retried


class TrialSpans(tune.Callback):
    """Each trial's span as the driver sees it, from Tune's start to its end (``cemlab.timing``)."""

    def __init__(self, resolve):
        self.resolve, self.started = resolve, {}

    def __getstate__(self):   # Tune pickles its callbacks into the experiment state
        return {"resolve": None, "started": {}}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started[trial.trial_id] = time.time()

    def on_trial_complete(self, iteration, trials, trial, **info):
        start = self.started.pop(trial.trial_id, None)
        if start is not None and self.resolve is not None:
            timing.record("trial", start, trial=self.resolve(trial.config).trial_id)

    on_trial_error = on_trial_complete


def run_grid(state: Invocation, todo: dict[str, Trial]) -> None:
    """The grid's trials that need running (``cemlab.sweeps.stages.trial_actions.decide_grid``), as one Tuner."""
    if not todo:
        return
    todo = dict(zip(todo, with_share(todo.values(), state.gpu_share)))
    job = state.job(trials=todo)
    _fit(state, job, param_space={"trial_id": tune.grid_search(list(todo))}, name=f"{state.spec.name}-{state.scale}",
         resources=next(iter(todo.values())).resources)


def run_searches(state: Invocation, jobs: list[CellSearch]) -> None:
    """One Tuner per searched cell that needs samples (``cemlab.sweeps.stages.trial_actions.decide_searches``):
    Optuna over the learning rate, ASHA stopping (module docstring)."""
    if not jobs:
        return
    cells_at_once, per_cell = search_concurrency(len(jobs), trial_slots(jobs[0].cell.resources))
    if cells_at_once == 1:
        for job in jobs:
            _fit_search(state, job, concurrency=per_cell)
        return

    # One Tuner per cell, in threads of this driver (Tune runs in a non-main thread); Ray queues
    # their trials on the cluster's resources.
    pool = ThreadPoolExecutor(max_workers=cells_at_once, thread_name_prefix="cemlab-search")
    try:
        for future in [pool.submit(_fit_search, state, job, concurrency=per_cell) for job in jobs]:
            future.result()
    finally:  # on Ctrl-C the driver shuts Ray down, which ends the Tuners still running
        pool.shutdown(wait=False, cancel_futures=True)


def search_concurrency(cells: int, slots: int) -> tuple[int, int]:
    """``(cells searched at once, trials at once per cell)`` for ``cells`` searched cells on a
    cluster that holds ``slots`` trials: as many cells as slots, and the slots shared among them
    (a searcher learns from finished samples, so a cell gets no more than its share)."""
    at_once = max(1, min(cells, slots))
    return at_once, max(1, slots // at_once)


def trial_slots(resources) -> int:
    """How many trials of ``resources`` the Ray cluster holds at once (at least 1)."""
    total = ray.cluster_resources()
    fits = [total.get("CPU", 0) // resources.cpus]
    if resources.gpus > 0:
        fits.append(total.get("GPU", 0) // resources.gpus)
    return max(1, int(min(fits)))


def _fit_search(state: Invocation, job: CellSearch, concurrency: int | None = None) -> None:
    """Optuna samples ``job.num_samples`` learning rates (``job.points`` first) for ``job.cell``; ASHA
    stops the worse ones. Samples done in an earlier invocation are told to Optuna first, and its seed moves on
    with their number, so a resumed search does not draw the same rates again."""
    from optuna.distributions import FloatDistribution
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    cell, points, num_samples, search, done_runs = job.cell, job.points, job.num_samples, job.search, job.done_runs
    s = cell.search
    reports = validation_reports(cell)
    searcher = OptunaSearch(space={"lr": FloatDistribution(s.lr[0], s.lr[1], log=True)}, metric=s.metric,
                            mode=s.mode, points_to_evaluate=[{"lr": lr} for lr in points] or None,
                            sampler=s.make_sampler(s.samples, s.seed + len(done_runs)))
    for run in done_runs:
        value = run.data.metrics.get(s.metric)
        if value is not None and math.isfinite(value):
            searcher.add_evaluated_point({"lr": float(run.data.params["train.lr"])}, value,
                                         pruned=run_status(run) == schema.STATUS_STOPPED)
    scheduler = ASHAScheduler(time_attr="training_iteration", metric=s.metric, mode=s.mode, max_t=reports,
                              grace_period=min(s.grace_period, reports), reduction_factor=s.reduction_factor)
    tune_job = state.job(cell=cell)
    results = _fit(state, tune_job, param_space={}, name=f"{state.spec.name}-{state.scale}-{cell.trial_id}",
                   resources=cell.resources, searcher=searcher, scheduler=scheduler, num_samples=num_samples,
                   concurrency=concurrency)
    for r in results:
        t = tune_job.resolve(r.config)
        search.ran.append(t.trial_id)
        search.iterations[t.trial_id] = int((r.metrics or {}).get("training_iteration", 0))
        if state.outcomes[t.trial_id].status == schema.STATUS_STOPPED:
            search.stopped.append(t.trial_id)


def validation_reports(trial: Trial) -> int:
    """Reports a trial sends to Tune: one per validation before the last step, plus the final one.
    This is ASHA's ``max_t``, so its rungs fall on validations, never after training ended."""
    total = make_plan(trial.config, trial.resources.workers).total_steps
    return (total - 1) // trial.config.train.val_interval + 1


_REGISTRY_LOCK = threading.Lock()


def _fit(state: Invocation, job: TrialJob, *, param_space: dict, name: str, resources, searcher=None,
         scheduler=None, num_samples: int = 1, concurrency: int | None = None):
    """One ``Tuner.fit`` over ``job``'s trials; records every trial's outcome. ``concurrency``:
    at most this many trials at once (default: what the cluster holds, for searches and multi-worker
    trials)."""
    callback = pg.TuneCallback(state.progress, job.resolve, state.files.log)
    distributed = resources.workers > 1
    # A multi-worker trial's Tune process only waits for its Ray Train workers, which ask for the
    # CPUs and GPUs themselves (cemlab.sweeps.trial.distributed): the process asks for memory only (Tune
    # takes no empty request), and since Tune cannot count the workers, the number of trials at
    # once is limited to what the cluster holds. A searcher learns from finished trials: no more at
    # once than fit either.
    slots = concurrency or (trial_slots(resources) if distributed or searcher is not None else None)
    request = ({"cpu": 0, "gpu": 0, "memory": DRIVER_MEMORY} if distributed
               else {"cpu": resources.cpus, "gpu": resources.gpus})
    # A grid's trials run one after another in a warm worker per slot (its imports and Ray actor
    # paid once; each trial starts from a clean state, cemlab.sweeps.trial.job.trial_scope). Not for
    # searches, whose stopped trials end their process (the driver waits for that to mark them), nor
    # for multi-worker trials, whose process only waits for its Ray Train workers.
    # $CEMLAB_SWEEP_REUSE_WORKERS=0: a fresh process for every trial (tests compare the two).
    reuse = (searcher is None and scheduler is None and not distributed
             and os.environ.get(REUSE_WORKERS_ENV, "1") != "0")
    trainable = tune.with_resources(tune.with_parameters(run_trial, job=job), request)
    # Registered by name under a lock: Tune's trainable registry is not safe to fill from the
    # threads that run searched cells at once (it iterates a dict another thread adds to).
    with _REGISTRY_LOCK:
        tune.register_trainable(f"cemlab-{name}", trainable)
    tuner = tune.Tuner(
        f"cemlab-{name}", param_space=param_space,
        tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=num_samples,
                                    max_concurrent_trials=slots, reuse_actors=reuse,
                                    trial_dirname_creator=lambda t: f"{job.resolve(t.config).trial_id[:100]}_{t.trial_id}"),
        run_config=tune.RunConfig(name=name, storage_path=str(state.runs_dir / "ray"), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=state.retries),
                                  callbacks=[HaltOnLostStore(state.watch), callback, TrialSpans(job.resolve)]),
    )
    results = tuner.fit()
    for r in results:
        t = job.resolve(r.config)
        row = state.progress.rows[t.trial_id]
        state.outcomes[t.trial_id] = _tune_outcome(state, t, r, row, callback.errors.get(t.trial_id))
        o = state.outcomes[t.trial_id]
        state.progress.set_status(t.trial_id, o.status, note=o.error and f"log {o.log_path}" or "")
    return results


def _tune_outcome(state: Invocation, trial: Trial, result, row: pg.Row, error_file: str | None) -> TrialOutcome:
    """A Tune result -> the trial's outcome, with its MLflow run's terminal status made right:
    failed when the trial errored outside ``train`` (or its process died), stopped when ASHA
    stopped it."""
    metrics = dict(result.metrics or {})
    run_id = metrics.get(rk.RUN_ID_KEY) or state.files.run_id(trial)
    log_path = str(state.files.log(trial.trial_id))
    values = {k: float(v) for k, v in metrics.items() if "/" in k and isinstance(v, (int, float))}
    o = TrialOutcome(trial, schema.STATUS_FAILED, run_id, values, seconds=metrics.get(rk.SECONDS_KEY),
                     wall=row.elapsed, attempts=row.attempts, resumed=bool(metrics.get(rk.RESUMED_KEY)),
                     log_path=log_path, nodes=[n for n in str(metrics.get(rk.NODES_KEY) or "").split(",") if n])
    if result.error is not None:
        error = getattr(result.error, "cause", None) or result.error  # Ray wraps the trial's exception
        o.error = f"{type(error).__name__}: {_last_line(error)}"
        if run_id:
            run = state.client.get_run(run_id)
            if run.info.status == "RUNNING":  # the process died before train() could say so
                mr.finish_run(state.client, run_id, schema.STATUS_FAILED, {schema.ERROR: o.error[:500]})
            state.client.set_tag(run_id, schema.LOG_FILE, log_path)
        return o
    if metrics.get(rk.STATUS_KEY):
        o.status = metrics[rk.STATUS_KEY]
        if o.status == pg.WAITED:
            o.waited_on = str(metrics.get(rk.WAITED_ON_KEY) or "") or None
            o.note = f"another sweep (parent run {o.waited_on or '?'}) trained it; its run {run_id}"
        elif o.status == pg.RECORDED:
            o.note = "recorded from local state; not trained"
        if run_id and o.attempts > 1:  # an earlier attempt's error is not this run's outcome
            with contextlib.suppress(Exception):
                state.client.delete_tag(run_id, schema.ERROR)
        return o
    # Ended without a final report and without an error: the scheduler stopped it.
    o.status = schema.STATUS_STOPPED
    wait_for_exit(metrics.get(rk.PID_KEY), STOP_WAIT_S)
    if run_id:
        mark_stopped(state.client, run_id, metrics)
    return o


def _last_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[-1] if text else repr(error))[:400]
