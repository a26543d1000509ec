"""Running a sweep with Ray Tune, every trial in MLflow: what ``cemlab sweep`` does.

``run_sweep(name, scale)`` calls the stages in order; each is a module with one job, and a trial
goes down them once:

1. **expand** the sweep file at the scale into trials (``cemlab.sweeps.sweepfile.load``; every config error
   is raised here, before anything starts), then check what the sweep needs, cheapest first
   (``cemlab.sweeps.stages.preflight``): data sources, the tracking store, ``$RAY_ADDRESS``; the shared
   MLflow server (a local one that has to be started boots while Ray starts); resources; a ladder rung
   with ``ladder.carry`` then starts each family from its carried rates (``cemlab.sweeps.stages.carrying``;
   refused, before any trial, without its rung below); the data is tokenised once;
2. open the sweep's experiment and *parent run* in MLflow, or reopen an unfinished one
   (``cemlab.sweeps.stages.record.open_invocation``);
3. **decide**, per trial, from the store by config hash: reuse, record, resume or run
   (``cemlab.sweeps.stages.trial_actions``);
4. **execute** the trials that need running on Ray Tune, one Tuner for a grid or one per searched
   cell, and turn each Tune result into the trial's outcome (``cemlab.sweeps.stages.execute``; inside a
   trial: ``cemlab.sweeps.trial.trainable``); a sweep with ``tuning:`` then gives each cell whose
   best learning rate is an end of its rates the rate beyond it, step by step
   (``cemlab.sweeps.stages.bracketing``), and a sweep with ``seeding:`` then judges its claims at
   each planned look and runs more seeds of the cells still open, both through the same two stages
   (``cemlab.sweeps.stages.seeding``), and a sweep with ``confirmation:`` runs fresh seeds at each
   cell's chosen rates (``cemlab.sweeps.stages.confirmation``);
5. **record** the outcomes: check them against the store, finish the parent run, write
   ``<runs>/logs/<sweep>-<scale>/summary.json`` (``cemlab.sweeps.stages.record.finish``);
6. **report progress** all along: one table while trials run, a summary at the end
   (``cemlab.sweeps.stages.progress``); trials log to ``<runs>/logs/<sweep>-<scale>/<trial>.log``.

While the trials run, ``cemlab.sweeps.stages.guards`` keeps the invocation safe: one driver lock per
sweep and scale, a watch on the tracking store, SIGTERM handled as Ctrl-C. The state the stages
share and the result are in ``cemlab.sweeps.stages.invocation``. The sweep's report is not built here:
``cemlab sweep`` (``cemlab.cli``) builds it after ``run_sweep`` returns.

On a cluster (``$RAY_ADDRESS``): cemlab must be installed on every node, the runs folder
(``$CEMLAB_RUNS_DIR``: checkpoints, trial logs, Ray's storage) must be storage every node sees at
the same path, and ``$MLFLOW_TRACKING_URI`` must name a server every node reaches (the embedded
server listens on 127.0.0.1 only; the sweep warns when it would be used with a cluster). Each
trial reports the Ray node ids of its ranks (``TrialOutcome.nodes``, ``summary.json``).
docs/cluster.md has the whole story.

Exit codes (``SweepResult.exit_code``): 0 every trial has a result (finished, diverged, stopped
early, done or reused); 1 at least one trial failed (after its retries); 2 the sweep could not
start (bad sweep file or scale, store unreachable, resources the cluster cannot give); 3 the
trials are fine but the report could not be built; 4 the tracking store stopped answering (rerun
once it is back); 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import atexit
import logging
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from rich.console import Console

from cemlab import timing
from cemlab.paths import runs_dir, sweep_log_dir
from cemlab.sweeps.stages import bracketing, carrying, confirmation, execute, preflight, record, seeding, trial_actions
from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.stages.guards import DriverLock, SigtermAsInterrupt, StoreWatch
from cemlab.sweeps.gpu_slots import with_share
from cemlab.sweeps.stages.invocation import Invocation, SweepResult
from cemlab.sweeps.sweepfile.schema import DEFAULT_SCALE, SweepError, Trial
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.trial.job import faults_from_env
from cemlab.sweeps.trial.memory import limit_from_env

if TYPE_CHECKING:
    from rich.console import Console

#: Seconds a stopping driver gives ``ray.shutdown()`` before it goes on without it.
RAY_SHUTDOWN_WAIT_S = 15.0
_ray_abandoned = False

log = logging.getLogger("cemlab.sweeps")


def run_sweep(sweep: str | Path, scale: str = DEFAULT_SCALE, *, retries: int = 1, cpus: int | None = None,
              cache_dir: str | Path | None = None, console: "Console | None" = None, live: bool | None = None,
              interval: float = 30.0, overrides: list[str] | None = None, command: str | None = None,
              looker: "seeding.Looker | None" = None, stop_ray_later: bool = False,
              bracketer: "bracketing.Bracketer | None" = None, gpu_slots: str = "scale",
              confirmer: "confirmation.Confirmer | None" = None, carrier: "carrying.Carrier | None" = None) -> SweepResult:
    """Run ``sweep`` at ``scale`` (see the module docstring). Raises ``SweepError`` (exit code 2) for a bad
    sweep file, scale or resources and ``StoreError`` for an unreachable store. ``overrides``: command-line
    ``key=value`` for every trial, see ``SweepSpec.expand``; ``command``: the command line that resumes it,
    printed on every exit that can be resumed (default: rebuilt from the sweep, scale and overrides);
    ``looker``: judges the looks of a sweep with ``seeding`` (``cemlab.report.looks.interim_look_store.sweep_look``,
    handed in by ``cemlab sweep``); ``bracketer``: judges the bracketing steps of a sweep with ``tuning``
    (``cemlab.report.looks.interim_look_store.sweep_bracket``; None: the grid's rates only); ``confirmer``:
    judges the confirmation stage of a sweep with ``confirmation``
    (``cemlab.report.looks.confirmation_look.sweep_confirm``; None: the selection seeds only); ``carrier``:
    what the rungs below a rung with ``ladder.carry`` found (``cemlab.report.looks.carry_look.sweep_found``);
    ``gpu_slots``: ``scale`` (the scale's ``gpus_per_worker``) or ``measured`` (trials per GPU from the
    store's finished runs of this scale, ``cemlab.sweeps.gpu_slots``; refused without them);
    ``stop_ray_later``: a Ray this driver started stops in the background once the sweep has ended,
    and the caller calls :func:`wait_ray_stopped` once it has done what follows (``cemlab sweep``
    builds the report meanwhile: Ray's shutdown waits on its processes and uses little CPU)."""
    t0 = time.time()
    started = timing.process_start()
    console = console or Console(highlight=False)
    if retries < 0:
        raise SweepError(f"retries={retries}: give 0 or more")
    spec = load_sweep(sweep)
    share = None
    if gpu_slots == "measured":
        from cemlab.sweeps.plan import measured_share

        share, line = measured_share(spec, scale, overrides)
        console.print(line, markup=False)
    elif gpu_slots != "scale":
        raise SweepError(f"--gpu-slots {gpu_slots}: choose scale (the scale's setting) or measured")
    trials = with_share(spec.expand(scale, overrides=overrides), share)
    limit_from_env(1.0)  # a $CEMLAB_WORKER_MEMORY_MB that is not a number: refused here, not in every trial
    preflight.check_before_ray(spec, trials)
    faults = faults_from_env()
    runs = runs_dir()
    log_dir = sweep_log_dir(spec.name, scale, runs)
    cache = str(Path(cache_dir).resolve()) if cache_dir else None
    uri, owns_ray, store_ready = _start_store_and_ray(spec.search, cpus, log_dir)
    timing.record("driver start", started, t0)
    timing.record("sweep file and store", t0, store_ready)  # the sweep expanded, the store checked, its server started
    log_dir.mkdir(parents=True, exist_ok=True)
    driver_lock = result = None
    try:
        trials, carried = carrying.begin(spec, scale, trials, overrides, uri, carrier, share)  # before any trial
        with timing.stage("data step"):
            preflight.prepare_on_ray(trials, scale, uri, cache, cpus, console)
        with timing.stage("open invocation"):
            driver_lock = DriverLock(log_dir)
            inv = record.open_invocation(spec, scale, uri, len(trials), runs, log_dir, driver_lock, retries=retries,
                                         cache_dir=cache, faults=faults)
        inv.overrides, inv.gpu_share = list(overrides or []), share
        carrying.record(inv, carried)
        pg.print_start(inv, trials, console, driver_lock.other_pid())
        with timing.stage("trials"):
            interrupted, lost = _run_trials(inv, trials, console, live, interval, looker, bracketer, confirmer)
        if interrupted or lost:
            _shutdown_ray()  # ends every trial process of this driver before their runs are marked
            owns_ray = False
            if lost:
                record.mark_store_lost(inv, lost)
            else:
                record.mark_interrupted(inv)
        with timing.stage("finish"):
            result = record.finish(inv, interrupted and not lost, t0, store_error=lost)
        result.command = command or shlex.join(["cemlab", "sweep", str(sweep), "--scale", scale, *(overrides or [])])
    finally:
        if driver_lock is not None:
            driver_lock.release()
        if owns_ray and stop_ray_later and result is not None:
            _begin_ray_shutdown()  # the caller's wait_ray_stopped() joins it
        elif owns_ray:
            _shutdown_ray()
        timing.flush()
    pg.print_end(result, console)
    return result


def _start_store_and_ray(search: str, cpus: int | None, log_dir: Path) -> tuple[str, bool, float]:
    """The tracking store the trials share, with Ray started while a local MLflow server that has
    to be started boots (``preflight.store_starting``; the ``ray start`` span then lies inside the
    ``sweep file and store`` one). Returns the store's URI, whether this driver started or joined
    Ray, and when the store was ready. A store that fails once Ray is up is the error raised, as if
    it had failed first; a Ray this driver started is shut down before it is."""
    owns_ray = False
    try:
        with preflight.store_starting() as store:
            timing.start_file(log_dir / timing.STAGES_NAME)  # where this sweep's stage timestamps go (trials too)
            execute.quiet_tune(search)
            with timing.stage("ray start"):
                owns_ray = execute.connect_ray(cpus)
            return store.ready(), owns_ray, store.ready_at
    except BaseException:
        if owns_ray:
            _shutdown_ray()
        raise


def _shutdown_ray() -> None:
    """``ray.shutdown()``, given ``RAY_SHUTDOWN_WAIT_S``. A SIGTERM from SLURM (requeue, preemption,
    scancel) reaches the job's Ray together with the driver; a shutdown that waits on a GCS that is
    gone would hold the driver past SLURM's KillWait with its runs still marked running."""
    _begin_ray_shutdown()
    wait_ray_stopped()


#: The shutdown under way (:func:`_begin_ray_shutdown`): its thread, when it began, and when
#: ``ray.shutdown()`` returned (empty until then); None once :func:`wait_ray_stopped` joined it.
_stopping: tuple[threading.Thread, float, list[float]] | None = None


def _begin_ray_shutdown() -> None:
    """Start ``ray.shutdown()`` in a thread (``run_sweep(stop_ray_later=True)`` leaves it running)."""
    global _stopping
    done: list[float] = []

    def stop() -> None:
        ray.shutdown()
        done.append(time.time())

    worker = threading.Thread(target=stop, name="cemlab-ray-shutdown", daemon=True)
    _stopping = (worker, time.time(), done)
    worker.start()


def wait_ray_stopped() -> None:
    """Join the shutdown under way, given ``RAY_SHUTDOWN_WAIT_S`` from now, and record its ``ray
    shutdown`` stage; nothing when none is. Past the wait, go on without Ray (see
    :func:`ray_abandoned`)."""
    global _stopping, _ray_abandoned
    if _stopping is None:
        return
    worker, began, done = _stopping
    _stopping = None
    worker.join(RAY_SHUTDOWN_WAIT_S)
    timing.record("ray shutdown", began, done[0] if done else None)
    timing.flush()
    if worker.is_alive():
        log.warning("Ray did not shut down within %.0f s (its head is gone?); going on without it",
                    RAY_SHUTDOWN_WAIT_S)
        _ray_abandoned = True
        atexit.unregister(ray._private.worker.shutdown)  # the interpreter's exit would wait on it again
        registry = sys.modules.get("ray.tune.registry")  # so would Tune's: it deletes its keys in that GCS
        if registry is not None:
            atexit.unregister(registry._unregister_all)


def ray_abandoned() -> bool:
    """Whether this process went on without a Ray that did not shut down (its head gone): Ray's
    native side then crashes the interpreter's own exit (a segmentation fault, exit code 139 in
    place of the sweep's), so ``cemlab sweep`` ends such a process with ``os._exit``."""
    return _ray_abandoned


def _run_trials(inv: Invocation, trials: list[Trial], console: "Console", live: bool | None,
                interval: float, looker: "seeding.Looker | None" = None,
                bracketer: "bracketing.Bracketer | None" = None,
                confirmer: "confirmation.Confirmer | None" = None) -> tuple[bool, str | None]:
    """Decide and execute every trial under the progress table and the guards. Returns whether
    Ctrl-C / SIGTERM interrupted them, and why the store was lost (None: it was not)."""
    interrupted = False
    watch = inv.watch = StoreWatch(inv.uri)
    with SigtermAsInterrupt(), pg.ProgressDisplay(inv.progress, console, live=live, interval=interval):
        try:
            try:
                with watch:
                    if inv.spec.search == "optuna":
                        execute.run_searches(inv, trial_actions.decide_searches(inv, trials))
                    else:
                        execute.run_grid(inv, trial_actions.decide_grid(inv, trials))
                        bracketing.add_rates(inv, trials, inv.overrides, bracketer)  # rates beyond a best edge
                        seeding.add_seeds(inv, trials, inv.overrides, looker)  # more seeds where a verdict is open
                        confirmation.add_seeds(inv, trials, inv.overrides, confirmer)  # fresh seeds at chosen rates
            except Exception as e:  # a store call of the driver failed: is the store gone?
                if not watch.confirm_lost(e):
                    raise
        except KeyboardInterrupt:
            interrupted = True
    return interrupted, watch.lost
