"""Running a sweep with Ray Tune, every trial in MLflow: what ``cemlab sweep`` does.

``run_sweep(name, scale)``:

1. expands the sweep file at the scale (``cemlab.sweeps.spec``; every config error is raised here,
   before anything starts) and checks that every data source a trial reads exists
   (``cemlab.data.check_data``); then, still before Ray starts, that the tracking store answers
   (``probe_store``) and that ``$RAY_ADDRESS``, when set, accepts a connection;
2. opens the MLflow store the trials will share: ``$MLFLOW_TRACKING_URI``, or one local
   ``mlflow server`` on the project's sqlite store, started or reused
   (``cemlab.tracking.server.shared_tracking_uri``); trials get its URL and never open the sqlite
   file (docs/tracking.md). The driver creates the sweep's experiment
   ``cemlab/<sweep>`` and a *parent run* (``cemlab.role=sweep``, tags sweep, figure, scale); when
   the latest parent run of this sweep and scale did not finish (the driver died, was interrupted,
   or trials failed), it is reopened instead, so a rerun continues the same invocation;
3. decides per trial from the store, by config hash (the source of truth, not Tune's state nor
   the runs folder; ``cemlab.train.decide``, which ``cemlab train --resume`` uses too):
   a trial with a finished or diverged run anywhere in the store is not run again (``done`` when
   that run is a child of this parent, ``reused`` otherwise: the shared Llama baselines; reused run
   ids are recorded on the parent as ``cemlab.reused_from``). A trial whose result the runs folder
   keeps but the store lacks (another server, a run deleted in the UI, a reset database) is
   ``recorded`` into the store under this parent, without training. Every other trial runs with
   ``train(resume=True)``: an interrupted or failed one continues from its checkpoint in its own
   MLflow run. Runs of the trial under this parent that its checkpoint does not point to (a crash
   between creating a run and recording it) are deleted, so MLflow holds each trial once;
4. runs the trials with Ray Tune (``cemlab.sweeps.trainable.run_trial``): local Ray with the
   machine's CPUs (or ``cpus``), or the cluster at ``$RAY_ADDRESS``; each trial asks for its
   scale's resources, so the CPUs are split between concurrent trials. A trial of several
   workers (``resources.workers > 1``) is a Ray Train run of that many DDP ranks inside its Tune
   trial (``cemlab.sweeps.distributed``): the ranks ask for the CPUs and GPUs, and the sweep runs
   no more such trials at once than the cluster holds (:func:`trial_slots`). A failing trial is retried
   ``retries`` times (Tune ``FailureConfig``) from its last checkpoint; if it still fails it is
   recorded as failed and the others go on. A grid is one Tuner (storage
   ``<runs>/ray/<sweep>-<scale>``). With ``search: optuna`` each grid cell is its own Tuner with an
   ``OptunaSearch`` over the learning rate and an ``ASHAScheduler`` (Tune's ``OptunaSearch`` takes
   no grid axes and never prunes); trials ASHA stops are marked ``stopped`` (a result); the cells'
   Tuners run at once, as many as the cluster holds trials (:func:`search_concurrency`), each
   cell with its share of the trial slots;
5. shows one progress table (``cemlab.sweeps.progress``); trials log to
   ``<runs>/logs/<sweep>-<scale>/<trial>.log``;
6. checks every outcome against the store (a trial that claims a result without an active run
   holding it is ``missing``, a failure), finishes the parent run (``finished``, or ``failed``
   when a trial failed) with those counts, writes ``<runs>/logs/<sweep>-<scale>/summary.json`` and
   ``summary-<parent run id>.json`` (each replaced atomically) and builds the sweep's report
   (``cemlab.report.build_report``).

Two drivers of the same sweep and scale at once (one runs folder): the second finds the first's
``driver.lock`` held, does not reopen its parent run but opens its own, and its trials wait on
the per-trial locks; a trial that waited takes the first sweep's run (``waited``), and the
summary names that sweep's parent run.

A store that goes away: while trials run the driver asks an HTTP store ``GET /health`` every
2 s; after three failures in a row (or when a call of the driver fails and the store does not
answer) it stops every trial (their checkpoints are kept), writes ``summary.json`` with the
error, names the URI and exits with code 4; ``cemlab sweep NAME`` again, once the server is back,
resumes. MLflow's own HTTP retries are shortened for every cemlab process (docs/tracking.md).

On a cluster (``$RAY_ADDRESS``): cemlab must be installed on every node, the runs folder
(``$CEMLAB_RUNS_DIR``: checkpoints, trial logs, Ray's storage) must be storage every node sees at
the same path, and ``$MLFLOW_TRACKING_URI`` must name a server every node reaches (the embedded
server listens on 127.0.0.1 only; the sweep warns when it would be used with a cluster). Each
trial reports the Ray node ids of its ranks (:attr:`TrialOutcome.nodes`, ``summary.json``).
docs/cluster.md has the whole story.

Driver death: Ray's processes share the driver's fate (its trial processes end with it); Ctrl-C
and SIGTERM stop the trials, mark their runs ``interrupted`` and the parent run too. Rerunning
the same command resumes (step 3).

Exit codes (:attr:`SweepResult.exit_code`): 0 every trial has a result (finished, diverged,
stopped early, done or reused); 1 at least one trial failed (after its retries); 2 the sweep
could not start (bad sweep file or scale, store unreachable, resources the cluster cannot give);
3 the trials are fine but the report could not be built; 4 the tracking store stopped answering
(rerun once it is back); 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cemlab.sweeps import progress as pg
from cemlab.sweeps import trainable as tr
from cemlab.sweeps.spec import DEFAULT_SCALE, SweepError, SweepSpec, Trial, load_sweep, sweeps_dir
from cemlab.tracking import schema
from cemlab.tracking.outcomes import SEARCH_RESULTS

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient
    from rich.console import Console

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REPORT = 3
EXIT_STORE_LOST = 4
EXIT_INTERRUPTED = 130

#: Seconds the driver waits for a stopped trial's process to end before marking its run.
STOP_WAIT_S = 30.0
#: Ray's logical memory (bytes) the Tune process of a multi-worker trial asks for (it only waits).
DRIVER_MEMORY = 256 * 2**20
#: The driver asks an HTTP store ``GET /health`` this often while trials run (seconds), with this
#: timeout, and calls it gone after this many failures in a row: named within about 15 s.
STORE_CHECK_EVERY_S = 2.0
STORE_CHECK_TIMEOUT_S = 3.0
STORE_CHECK_FAILURES = 3
#: Files in the sweep's log folder: the lock a running driver holds, and what it records there.
DRIVER_LOCK = "driver.lock"
DRIVER_STATE = "driver.json"

log = logging.getLogger("cemlab.sweeps")


@dataclass
class TrialOutcome:
    """How one trial of the sweep ended in this invocation."""

    trial: Trial
    status: str                    # finished | diverged | stopped | failed | interrupted | reused | done |
                                   # recorded | waited | missing (see cemlab.sweeps.progress)
    run_id: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None   # training time measured by the trial (train's RunResult.seconds)
    wall: float | None = None      # wall time in this invocation, from start to end (process start-up too)
    attempts: int = 0
    resumed: bool = False          # the last attempt continued from a checkpoint
    log_path: str | None = None
    error: str | None = None
    nodes: list[str] = field(default_factory=list)   # Ray node id of each rank (last attempt), when it ran now
    note: str | None = None        # recorded: where from; waited/reused: whose run
    waited_on: str | None = None   # waited: the parent run of the sweep that trained it


@dataclass
class SearchOutcome:
    """One Optuna-searched grid cell: how many trials ran in this invocation, which ASHA stopped."""

    cell: str
    samples: int
    ran: list[str] = field(default_factory=list)          # trial ids run now
    stopped: list[str] = field(default_factory=list)      # of those, stopped early by ASHA
    iterations: dict[str, int] = field(default_factory=dict)  # trial id -> reports (training_iteration)


@dataclass
class SweepResult:
    """What ``run_sweep`` did."""

    sweep: str
    scale: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    parent_reopened: bool
    outcomes: list[TrialOutcome]
    searches: list[SearchOutcome] = field(default_factory=list)
    reused_run_ids: list[str] = field(default_factory=list)
    report: Path | None = None
    report_error: str | None = None
    interrupted: bool = False
    seconds: float = 0.0
    store_error: str | None = None       # the store went away during the sweep (exit code 4)
    concurrent_with: list[str] = field(default_factory=list)   # parent runs of sweeps this one waited on
    counts_checked: bool = False         # the counts were checked against the store after the sweep

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out

    @property
    def failed(self) -> list[TrialOutcome]:
        return [o for o in self.outcomes if o.status in (schema.STATUS_FAILED, pg.MISSING)]

    @property
    def exit_code(self) -> int:
        if self.store_error:
            return EXIT_STORE_LOST
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed:
            return EXIT_FAILED
        if self.report_error:
            return EXIT_REPORT
        return EXIT_OK

    def dashboard_url(self) -> str:
        """The parent run in the MLflow UI (a server), else the store's URI."""
        if self.tracking_uri.startswith(("http://", "https://")):
            return f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.parent_run_id}"
        return self.tracking_uri


# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------


def connect_ray(cpus: int | None = None) -> bool:
    """Join the cluster at ``$RAY_ADDRESS``, or start local Ray with ``cpus`` (default: all of
    this machine's). Returns True when this call started or joined Ray (and should shut it down);
    an already initialised Ray (a test, a notebook) is used as it is."""
    import ray

    if ray.is_initialized():
        return False
    common = dict(logging_level=logging.ERROR, log_to_driver=False, configure_logging=True)
    address = os.environ.get("RAY_ADDRESS")
    if address:
        check_ray_address()
        try:
            ray.init(address=address, **common)
        except ConnectionError as e:  # e.g. "auto" with no cluster on this machine
            raise SweepError(f"RAY_ADDRESS={address}: {e}; {_RAY_HINT}") from None
    else:
        ray.init(num_cpus=cpus or os.cpu_count() or 1, include_dashboard=False, **common)
    return True


_RAY_HINT = ("start the Ray cluster (`ray start --head` on its head node, or `make cluster-up`), fix the address, "
             "or unset RAY_ADDRESS to run on this machine's own Ray")


def check_ray_address(timeout_s: float = 10.0) -> None:
    """A ``$RAY_ADDRESS`` (``host:port`` or ``ray://host:port``) that nothing answers is a
    ``SweepError`` naming it, within ``timeout_s``: ``ray.init`` itself waits on it for minutes with
    only its own log lines. ``auto`` and ``local`` are left to ``ray.init``."""
    import socket

    address = os.environ.get("RAY_ADDRESS", "")
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise SweepError(f"RAY_ADDRESS={address} is not an address of the form host:port (or ray://host:port); "
                         f"{_RAY_HINT}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SweepError(f"RAY_ADDRESS={address}: nothing answers at {host}:{port} ({e.strerror or e}); "
                         f"{_RAY_HINT}") from None


def check_data_sources(spec: SweepSpec, trials: list[Trial]) -> None:
    """Pre-flight: every data source a trial will read exists and is readable
    (``cemlab.data.check_data``, once per distinct data config); a ``SweepError`` names the
    first trial that reads a bad one."""
    from cemlab.data import DataError, check_data

    seen: set[str] = set()
    for t in trials:
        if t.task == "gp":
            continue
        key = t.config.data.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            check_data(t.config.data)
        except DataError as e:
            raise SweepError(f"{spec.source}: trial {t.trial_id}: {e}") from None


def _quiet_tune() -> None:
    """Tune prints nothing (the sweep has its own table) and leaves Ctrl-C to the driver."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    logging.getLogger("ray").setLevel(logging.ERROR)
    for name in ("ray.tune", "ray.train", "ray.air"):  # failures are reported by the sweep itself
        logging.getLogger(name).setLevel(logging.CRITICAL)


def check_resources(trials: list[Trial], scale: str) -> str | None:
    """Refuse, before anything runs, trials that local Ray can never place (``SweepError``); on a
    cluster (``$RAY_ADDRESS``, which may add nodes on demand) return the same finding as a warning."""
    import ray

    if not trials:
        return None
    res = trials[0].resources
    where = f"{sweeps_dir() / 'scales.yaml'}: {scale}.{trials[0].task}.resources"
    total = ray.cluster_resources()
    have_cpu, have_gpu = total.get("CPU", 0), total.get("GPU", 0)
    if res.cpus > have_cpu or res.gpus > have_gpu:
        msg = (f"{where} asks {res.cpus:g} CPUs and {res.gpus:g} GPUs per trial, but this Ray cluster has "
               f"{have_cpu:g} CPUs and {have_gpu:g} GPUs; lower the resources, use another --scale, "
               f"or set RAY_ADDRESS to a cluster that has them")
        if not os.environ.get("RAY_ADDRESS"):
            raise SweepError(msg)
        return f"warning: {msg} (trials wait until the cluster has them)"
    return None


# ---------------------------------------------------------------------------------------------
# MLflow: parent run, what is done, tidying a trial's runs
# ---------------------------------------------------------------------------------------------


def open_parent_run(client: "MlflowClient", experiment_id: str, spec: SweepSpec, scale: str,
                    n_trials: int, other_running: str | None = None) -> tuple[str, bool]:
    """The parent run of this invocation: the latest one of this sweep and scale when it did not
    finish (reopened), else a new one. Returns (run id, reopened). ``other_running``: another
    driver of this sweep and scale is running now (its parent run id, or "" when unknown): its
    parent is not reopened, this invocation gets its own, tagged ``cemlab.concurrent_with``."""
    from cemlab.tracking import mlflow_run as mr
    from cemlab.tracking.store import run_status

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
    commit = mr.git_commit()
    if commit:
        tags[schema.GIT_COMMIT] = commit
    run_id = mr.create_run(client, experiment_id, f"{spec.name} {scale}", tags)
    mr.log_params(client, run_id, {"sweep": spec.name, "scale": scale, "search": spec.search, "trials": n_trials,
                                   "figure": spec.figure})
    if spec.path is not None:
        client.log_text(run_id, spec.path.read_text(), "sweep.yaml")
    return run_id, False


def _parent_of(run: "Run") -> str | None:
    return run.data.tags.get(schema.PARENT_RUN_ID)


def prepare_resume(client: "MlflowClient", trial: Trial, runs: list["Run"], parent_run_id: str, experiment_id: str,
                   runs_dir: Path) -> None:
    """Before (re)running ``trial``: nest the MLflow run its checkpoint points at under this
    parent (same experiment), and delete this parent's other unfinished runs of the trial (a
    driver killed between creating a run and recording it leaves one). The trial finds that run
    again by asking the store (``cemlab.train.run``), whatever address the store has now."""
    from cemlab.train import checkpoint as ckpt

    folder = runs_dir / "checkpoints" / trial.config_hash
    if not tr.lock_is_free(folder):
        return  # another sweep is training this config right now: the trial will wait for it
    state = ckpt.read_state(folder) if folder.is_dir() else None
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


def _skip(state: "_Run", trial: Trial, run: "Run", status: str | None = None) -> None:
    """Record a trial the store already has a result for: ``done`` (a run of this parent) or
    ``reused`` (another sweep's or an earlier invocation's), unless ``status`` says otherwise."""
    mine = _parent_of(run) == state.parent_run_id
    status = status or (pg.DONE if mine else pg.REUSED)
    state.progress.add(trial)
    state.outcomes[trial.trial_id] = TrialOutcome(trial, status, run.info.run_id, _run_metrics(run))
    note = "" if mine else f"run {run.info.run_id[:8]} of {run.data.tags.get(schema.SWEEP, '?')}"
    state.progress.set_status(trial.trial_id, status, note=note)
    state.progress.update(trial.trial_id, {**_run_metrics(run), tr.RUN_ID_KEY: run.info.run_id})


def _record(state: "_Run", trial: Trial, folder: Path, local: dict) -> None:
    """The runs folder holds ``trial``'s result and the store lacks its run: record it under this
    parent (``cemlab.train.decide.record_from_local``), without training; say so in the trial's
    log and the table."""
    from cemlab.train import decide as dc

    cfg = tr.prepare_config(trial, state.job())
    origin = f"run {str(local.get('run_id'))[:8]} of {(local.get('store') or {}).get('tracking_uri') or local.get('tracking_uri') or '?'}"
    result = dc.record_from_local(state.client, cfg, folder, local, state.uri, state.parent_run_id, "trial")
    note = f"recorded from local state ({origin}); not trained"
    log_path = state.log_dir / f"{trial.trial_id}.log"
    with open(log_path, "a") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} (config {trial.config_hash}): "
                 f"{note}: the store {state.uri} lacked it; now run {result.run_id}\n")
    state.progress.add(trial)
    state.outcomes[trial.trial_id] = TrialOutcome(trial, pg.RECORDED, result.run_id, dict(result.metrics),
                                                  seconds=0.0, log_path=str(log_path), note=note)
    state.progress.set_status(trial.trial_id, pg.RECORDED, note=note)
    state.progress.update(trial.trial_id, {**result.metrics, tr.RUN_ID_KEY: result.run_id})


def search_cell_runs(client: "MlflowClient", experiment_id: str, cell: Trial) -> dict[str, list["Run"]]:
    """Runs of an Optuna-searched cell (tag ``cemlab.search_cell``) at its scale, by config hash."""
    from cemlab.tracking.store import search_runs

    runs = search_runs(client, [experiment_id], f"tags.`{schema.SEARCH_CELL}` = '{cell.trial_id}' and "
                                                 f"tags.`{schema.SCALE}` = '{cell.scale}'")
    out: dict[str, list[Run]] = {}
    for r in sorted(runs, key=lambda r: r.info.start_time or 0, reverse=True):
        out.setdefault(r.data.tags.get(schema.CONFIG_HASH, ""), []).append(r)
    return out


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------


class _Interrupt:
    """SIGTERM -> KeyboardInterrupt in the main thread while the sweep runs (Ctrl-C already is)."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    @staticmethod
    def _handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


@dataclass
class _Run:
    """State of one invocation, shared by the steps below."""

    spec: SweepSpec
    scale: str
    client: Any
    uri: str
    experiment_id: str
    parent_run_id: str
    runs_dir: Path
    log_dir: Path
    retries: int
    cache_dir: str | None
    faults: dict
    progress: pg.SweepProgress
    outcomes: dict[str, TrialOutcome] = field(default_factory=dict)
    searches: list[SearchOutcome] = field(default_factory=list)

    def job(self, trials: dict[str, Trial] | None = None, cell: Trial | None = None) -> tr.TrialJob:
        return tr.TrialJob(sweep=self.spec.name, scale=self.scale, tracking_uri=self.uri,
                           parent_run_id=self.parent_run_id, runs_dir=str(self.runs_dir),
                           sweeps_dir=str(self.spec.path.parent if self.spec.path else sweeps_dir()),
                           log_dir=str(self.log_dir), trials=trials or {}, cell=cell, cache_dir=self.cache_dir,
                           faults=self.faults)


def run_sweep(sweep: str | Path, scale: str = DEFAULT_SCALE, *, retries: int = 1, cpus: int | None = None,
              cache_dir: str | Path | None = None, report: bool = True, console: "Console | None" = None,
              live: bool | None = None, interval: float = 30.0, overrides: list[str] | None = None) -> SweepResult:
    """Run ``sweep`` at ``scale`` (see the module docstring). Raises ``SweepError`` (exit code 2)
    for a bad sweep file, scale or resources and ``StoreError`` for an unreachable store.
    ``overrides``: command-line ``key=value`` for every trial, see ``SweepSpec.expand``."""
    from rich.console import Console

    from cemlab.data.prepare import prepare_sweep_data
    from cemlab.paths import runs_dir as project_runs_dir
    from cemlab.tracking.server import shared_tracking_uri
    from cemlab.tracking.store import ensure_experiment, get_client, probe_store

    t0 = time.time()
    console = console or Console(highlight=False)
    if retries < 0:
        raise SweepError(f"retries={retries}: give 0 or more")
    spec = load_sweep(sweep)
    trials = spec.expand(scale, overrides=overrides)
    check_data_sources(spec, trials)
    # What the sweep needs, cheapest first, before anything starts: the store (a bad tracking URI
    # never costs a Ray start-up), the Ray address, then the local MLflow server, then Ray.
    if os.environ.get("MLFLOW_TRACKING_URI"):
        probe_store(os.environ["MLFLOW_TRACKING_URI"])
    check_ray_address()
    uri = shared_tracking_uri()
    probe_store(uri)
    faults = tr.faults_from_env()
    runs = project_runs_dir()
    log_dir = runs / "logs" / f"{spec.name}-{scale}"
    log_dir.mkdir(parents=True, exist_ok=True)

    _quiet_tune()
    if spec.search == "optuna":
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    owns_ray = connect_ray(cpus)
    driver_lock = None
    try:
        warning = check_resources(trials, scale)
        if warning:
            console.print(warning, highlight=False)
        prepare_sweep_data(trials, cache_dir=str(Path(cache_dir).resolve()) if cache_dir else None, workers=cpus,
                           console=console)  # tokenise once, before any trial; trials then only map the store
        if os.environ.get("RAY_ADDRESS") and not os.environ.get("MLFLOW_TRACKING_URI"):
            console.print(f"warning: RAY_ADDRESS is set but MLFLOW_TRACKING_URI is not: trials on other nodes cannot "
                          f"reach the local MLflow server {uri}; set MLFLOW_TRACKING_URI to a shared server",
                          highlight=False)
        client = get_client(uri)
        driver_lock = _DriverLock(log_dir)
        experiment_id = ensure_experiment(f"cemlab/{spec.name}", client)
        other = None if driver_lock.held else driver_lock.other_parent()
        parent_run_id, reopened = open_parent_run(client, experiment_id, spec, scale, len(trials), other)
        driver_lock.record(parent_run_id)
        progress = pg.SweepProgress(f"{spec.name} ({spec.figure}) at scale {scale}")
        state = _Run(spec, scale, client, uri, experiment_id, parent_run_id, runs, log_dir, retries,
                     str(Path(cache_dir).resolve()) if cache_dir else None, faults, progress)
        what = (f"{len(trials)} grid cell(s), learning rate searched ({trials[0].search.samples} samples each)"
                if spec.search == "optuna" and trials else f"{len(trials)} trials")
        console.print(f"Sweep {spec.name} ({spec.figure}), scale {scale}: {what}; MLflow {uri}, "
                      f"parent run {parent_run_id}{' (resumed)' if reopened else ''}; logs {log_dir}")
        if other is not None:
            console.print(f"note: another `cemlab sweep {spec.name} --scale {scale}` is running "
                          f"(pid {driver_lock.other_pid() or '?'}, parent run {other or 'not known yet'}); trials it "
                          f"is training wait for it and take its result", highlight=False)
        interrupted = False
        watch = _StoreWatch(uri)
        with _Interrupt(), pg.ProgressDisplay(progress, console, live=live, interval=interval):
            try:
                try:
                    with watch:
                        if spec.search == "optuna":
                            _run_searches(state, trials)
                        else:
                            _run_grid(state, trials)
                except Exception as e:  # a store call of the driver failed: is the store gone?
                    if not watch.confirm_lost(e):
                        raise
            except KeyboardInterrupt:
                interrupted = True
        if interrupted or watch.lost:
            import ray

            ray.shutdown()  # ends every trial process of this driver before their runs are marked
            owns_ray = False
            if watch.lost:
                _mark_store_lost(state, watch.lost)
            else:
                _mark_interrupted(state)
        result = _finish(state, reopened, interrupted and not watch.lost, t0, store_error=watch.lost)
    finally:
        if driver_lock is not None:
            driver_lock.release()
        if owns_ray:
            import ray

            ray.shutdown()
    _print_end(result, console)
    if report and overrides and not result.interrupted and not result.store_error:  # the report reads the sweep file's own trials
        console.print(f"Report: not built for overridden trials ({' '.join(overrides)}): the report reads the sweep "
                      f"file's own grid; the trials are in MLflow (config overrides in the tag cemlab.overrides)",
                      highlight=False)
    elif report and not result.interrupted and not result.store_error:
        _make_report(result, console)
    return result


class _DriverLock:
    """``<log dir>/driver.lock``, held by the running driver of a sweep and scale (released when
    its process dies); ``driver.json`` beside it names that driver's pid and parent run. A second
    driver that finds it held runs anyway (its trials wait on the per-trial locks), but under a
    parent run of its own, and says whose sweep it found."""

    def __init__(self, log_dir: Path):
        import fcntl

        self.log_dir = log_dir
        self._fh = open(log_dir / DRIVER_LOCK, "a")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            self.held = False
            self._fh.close()

    def _state(self) -> dict:
        try:
            return json.loads((self.log_dir / DRIVER_STATE).read_text())
        except (OSError, ValueError):
            return {}

    def other_parent(self) -> str:
        """The running driver's parent run id ("" until it has recorded it)."""
        return str(self._state().get("parent_run_id") or "")

    def other_pid(self) -> int | None:
        return self._state().get("pid")

    def record(self, parent_run_id: str) -> None:
        if self.held:
            _write_atomic(self.log_dir / DRIVER_STATE, {"pid": os.getpid(), "parent_run_id": parent_run_id,
                                                         "started": time.time()})

    def release(self) -> None:
        if self.held:
            (self.log_dir / DRIVER_STATE).unlink(missing_ok=True)
            self._fh.close()  # closing the file releases the lock
            self.held = False


def _write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class _StoreWatch:
    """While the trials run: ask an HTTP store ``GET /health`` every :data:`STORE_CHECK_EVERY_S`
    seconds; after :data:`STORE_CHECK_FAILURES` failures in a row, record why in ``lost`` and
    interrupt the main thread (the sweep then stops its trials, see :func:`_mark_store_lost`).
    A sqlite store (a file) is not watched."""

    def __init__(self, uri: str):
        self.uri = uri
        self.lost: str | None = None
        self._armed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _down(self) -> bool:
        from cemlab.tracking.store import healthy

        return not healthy(self.uri, timeout=STORE_CHECK_TIMEOUT_S)

    def _message(self) -> str:
        return (f"the MLflow store at {self.uri} stopped answering (GET /health failed "
                f"{STORE_CHECK_FAILURES} times, {time.strftime('%H:%M:%S')})")

    def _loop(self) -> None:
        import _thread

        failures = 0
        while not self._stop.wait(STORE_CHECK_EVERY_S):
            failures = failures + 1 if self._down() else 0
            if failures >= STORE_CHECK_FAILURES:
                with self._lock:
                    if self._armed and self.lost is None:
                        self.lost = self._message()
                        log.error("%s: stopping the sweep", self.lost)
                        _thread.interrupt_main()
                return

    def confirm_lost(self, error: BaseException) -> bool:
        """After ``error`` in the driver: True (and ``lost`` set) when the store does not answer."""
        if self.lost is None and self.uri.startswith(("http://", "https://")) and self._down():
            self.lost = self._message() + f"; the driver's last call failed with {type(error).__name__}"
        return self.lost is not None

    def __enter__(self) -> "_StoreWatch":
        if self.uri.startswith(("http://", "https://")):
            self._armed = True
            self._thread = threading.Thread(target=self._loop, name="cemlab-store-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        with self._lock:
            self._armed = False
        self._stop.set()
        return False


def _mark_store_lost(state: _Run, message: str) -> None:
    """The store went away (trial processes already ended): every trial without an outcome is
    interrupted with ``message`` (its checkpoint is kept; nothing is written to the store, which
    does not answer). A rerun once the store is back continues them."""
    for tid, row in list(state.progress.rows.items()):
        if tid in state.outcomes and state.outcomes[tid].status != schema.STATUS_FAILED:
            continue
        trial = state.progress.trials[tid]
        if row.status in SEARCH_RESULTS + pg.NOT_TRAINED:
            metrics = {k: v for k, v in ((schema.TEST_PPL, row.test_ppl),) if not math.isnan(v)}
            state.outcomes[tid] = TrialOutcome(trial, row.status, row.run_id or None, metrics, seconds=row.seconds,
                                               wall=row.elapsed, attempts=row.attempts,
                                               log_path=str(state.log_dir / f"{tid}.log"))
            continue
        state.progress.set_status(tid, schema.STATUS_INTERRUPTED, note="MLflow store not answering")
        state.outcomes[tid] = TrialOutcome(trial, schema.STATUS_INTERRUPTED, row.run_id or None, wall=row.elapsed,
                                           attempts=row.attempts, log_path=str(state.log_dir / f"{tid}.log"),
                                           error=message)


def _run_grid(state: _Run, trials: list[Trial]) -> None:
    from cemlab.train import checkpoint as ckpt
    from cemlab.train import decide as dc
    from cemlab.tracking.store import find_runs_by_hash

    for t in trials:
        state.progress.add(t)
    by_hash = find_runs_by_hash([t.config_hash for t in trials], state.client)
    todo: dict[str, Trial] = {}
    for t in trials:
        runs = by_hash[t.config_hash]
        folder = state.runs_dir / "checkpoints" / t.config_hash
        # The store decides (cemlab.train.decide); a folder another sweep is training in is its business.
        local = ckpt.read_state(folder) if folder.is_dir() and tr.lock_is_free(folder) else None
        decision = dc.decide(state.client, t.config_hash, folder, local or {}, runs)
        if decision.action == dc.REUSE:
            _skip(state, t, decision.run)
            continue
        if decision.action == dc.RECORD:
            with tr.try_trial_lock(folder) as mine:  # another driver may be recording or training it
                if mine:  # decided again under the lock: what the store and the folder hold now
                    decision = dc.decide(state.client, t.config_hash, folder)
                    if decision.action == dc.REUSE:
                        _skip(state, t, decision.run)
                        continue
                    if decision.action == dc.RECORD:
                        _record(state, t, folder, decision.state)
                        continue
        prepare_resume(state.client, t, runs, state.parent_run_id, state.experiment_id, state.runs_dir)
        todo[t.trial_id] = t
    if not todo:
        return
    from ray import tune

    job = state.job(trials=todo)
    _fit(state, job, param_space={"trial_id": tune.grid_search(list(todo))}, name=f"{state.spec.name}-{state.scale}",
         resources=next(iter(todo.values())).resources)


def _run_searches(state: _Run, cells: list[Trial]) -> None:
    """One Tuner per grid cell: Optuna over the learning rate, ASHA stopping (module docstring).
    Samples of a cell that have a result (finished, diverged, stopped) count towards its number;
    the others (interrupted, failed) are tried again first, from their checkpoints."""
    from cemlab.tracking.store import best_run, run_status

    for cell in cells:  # the time-left estimate counts every cell's samples from the start
        state.progress.expect(cell, cell.search.samples)
    jobs = []
    for cell in cells:
        found = search_cell_runs(state.client, state.experiment_id, cell)
        samples = cell.search.samples
        done_runs, pending_lrs = [], []
        for runs in found.values():
            best = best_run(runs, SEARCH_RESULTS)
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
                           state.runs_dir)
        jobs.append((cell, points, remaining, search, done_runs))
    if not jobs:
        return
    cells_at_once, per_cell = search_concurrency(len(jobs), trial_slots(jobs[0][0].resources))
    if cells_at_once == 1:
        for job in jobs:
            _fit_search(state, *job, concurrency=per_cell)
        return
    from concurrent.futures import ThreadPoolExecutor

    # One Tuner per cell, in threads of this driver (Tune runs in a non-main thread); Ray queues
    # their trials on the cluster's resources.
    pool = ThreadPoolExecutor(max_workers=cells_at_once, thread_name_prefix="cemlab-search")
    try:
        for future in [pool.submit(_fit_search, state, *job, concurrency=per_cell) for job in jobs]:
            future.result()
    finally:  # on Ctrl-C the driver shuts Ray down, which ends the Tuners still running
        pool.shutdown(wait=False, cancel_futures=True)


def search_concurrency(cells: int, slots: int) -> tuple[int, int]:
    """``(cells searched at once, trials at once per cell)`` for ``cells`` searched cells on a
    cluster that holds ``slots`` trials: as many cells as slots, and the slots shared among them
    (a searcher learns from finished samples, so a cell gets no more than its share)."""
    at_once = max(1, min(cells, slots))
    return at_once, max(1, slots // at_once)


def _fit_search(state: _Run, cell: Trial, points: list[float], num_samples: int, search: SearchOutcome,
                done_runs: list["Run"], concurrency: int | None = None) -> None:
    """Optuna samples ``num_samples`` learning rates (``points`` first) for ``cell``; ASHA stops the
    worse ones. Samples done in an earlier invocation are told to Optuna first, and its seed moves on
    with their number, so a resumed search does not draw the same rates again."""
    from optuna.distributions import FloatDistribution
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from cemlab.tracking.store import run_status

    s = cell.search
    reports = _validation_reports(cell)
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
    job = state.job(cell=cell)
    results = _fit(state, job, param_space={}, name=f"{state.spec.name}-{state.scale}-{cell.trial_id}",
                   resources=cell.resources, searcher=searcher, scheduler=scheduler, num_samples=num_samples,
                   concurrency=concurrency)
    for r in results:
        t = job.resolve(r.config)
        search.ran.append(t.trial_id)
        search.iterations[t.trial_id] = int((r.metrics or {}).get("training_iteration", 0))
        if state.outcomes[t.trial_id].status == schema.STATUS_STOPPED:
            search.stopped.append(t.trial_id)


def _validation_reports(trial: Trial) -> int:
    """Reports a trial sends to Tune: one per validation before the last step, plus the final one.
    This is ASHA's ``max_t``, so its rungs fall on validations, never after training ended."""
    from cemlab.train.plan import make_plan

    total = make_plan(trial.config, trial.resources.workers).total_steps
    return (total - 1) // trial.config.train.val_interval + 1


_REGISTRY_LOCK = threading.Lock()


def _fit(state: _Run, job: tr.TrialJob, *, param_space: dict, name: str, resources, searcher=None,
         scheduler=None, num_samples: int = 1, concurrency: int | None = None):
    """One ``Tuner.fit`` over ``job``'s trials; records every trial's outcome. ``concurrency``:
    at most this many trials at once (default: what the cluster holds, for searches and multi-worker
    trials)."""
    from ray import tune

    callback = pg.TuneCallback(state.progress, job.resolve, str(state.log_dir))
    distributed = resources.workers > 1
    # A multi-worker trial's Tune process only waits for its Ray Train workers, which ask for the
    # CPUs and GPUs themselves (cemlab.sweeps.distributed): the process asks for memory only (Tune
    # takes no empty request), and since Tune cannot count the workers, the number of trials at
    # once is limited to what the cluster holds. A searcher learns from finished trials: no more at
    # once than fit either.
    slots = concurrency or (trial_slots(resources) if distributed or searcher is not None else None)
    request = ({"cpu": 0, "gpu": 0, "memory": DRIVER_MEMORY} if distributed
               else {"cpu": resources.cpus, "gpu": resources.gpus})
    trainable = tune.with_resources(tune.with_parameters(tr.run_trial, job=job), request)
    # Registered by name under a lock: Tune's trainable registry is not safe to fill from the
    # threads that run searched cells at once (it iterates a dict another thread adds to).
    with _REGISTRY_LOCK:
        tune.register_trainable(f"cemlab-{name}", trainable)
    tuner = tune.Tuner(
        f"cemlab-{name}", param_space=param_space,
        tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=num_samples,
                                    max_concurrent_trials=slots, reuse_actors=False,
                                    trial_dirname_creator=lambda t: f"{job.resolve(t.config).trial_id[:100]}_{t.trial_id}"),
        run_config=tune.RunConfig(name=name, storage_path=str(state.runs_dir / "ray"), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=state.retries),
                                  callbacks=[callback]),
    )
    results = tuner.fit()
    for r in results:
        t = job.resolve(r.config)
        row = state.progress.rows[t.trial_id]
        state.outcomes[t.trial_id] = _tune_outcome(state, t, r, row, callback.errors.get(t.trial_id))
        o = state.outcomes[t.trial_id]
        state.progress.set_status(t.trial_id, o.status, note=o.error and f"log {o.log_path}" or "")
    return results


def trial_slots(resources) -> int:
    """How many trials of ``resources`` the Ray cluster holds at once (at least 1)."""
    import ray

    total = ray.cluster_resources()
    fits = [total.get("CPU", 0) // resources.cpus]
    if resources.gpus > 0:
        fits.append(total.get("GPU", 0) // resources.gpus)
    return max(1, int(min(fits)))


def _tune_outcome(state: _Run, trial: Trial, result, row: pg.Row, error_file: str | None) -> TrialOutcome:
    """A Tune result -> the trial's outcome, with its MLflow run's terminal status made right:
    failed when the trial errored outside ``train`` (or its process died), stopped when ASHA
    stopped it."""
    from cemlab.train import checkpoint as ckpt
    from cemlab.tracking import mlflow_run as mr

    metrics = dict(result.metrics or {})
    run_id = metrics.get(tr.RUN_ID_KEY) or (ckpt.read_state(state.runs_dir / "checkpoints" / trial.config_hash)
                                            or {}).get("run_id")
    log_path = str(state.log_dir / f"{trial.trial_id}.log")
    values = {k: float(v) for k, v in metrics.items() if "/" in k and isinstance(v, (int, float))}
    o = TrialOutcome(trial, schema.STATUS_FAILED, run_id, values, seconds=metrics.get(tr.SECONDS_KEY),
                     wall=row.elapsed, attempts=row.attempts, resumed=bool(metrics.get(tr.RESUMED_KEY)),
                     log_path=log_path, nodes=[n for n in str(metrics.get(tr.NODES_KEY) or "").split(",") if n])
    if result.error is not None:
        error = getattr(result.error, "cause", None) or result.error  # Ray wraps the trial's exception
        o.error = f"{type(error).__name__}: {_last_line(error)}"
        if run_id:
            run = state.client.get_run(run_id)
            if run.info.status == "RUNNING":  # the process died before train() could say so
                mr.finish_run(state.client, run_id, schema.STATUS_FAILED, {schema.ERROR: o.error[:500]})
            state.client.set_tag(run_id, schema.LOG_FILE, log_path)
        return o
    if metrics.get(tr.STATUS_KEY):
        o.status = metrics[tr.STATUS_KEY]
        if o.status == pg.WAITED:
            o.waited_on = str(metrics.get(tr.WAITED_ON_KEY) or "") or None
            o.note = f"another sweep (parent run {o.waited_on or '?'}) trained it; its run {run_id}"
        elif o.status == pg.RECORDED:
            o.note = "recorded from local state; not trained"
        if run_id and o.attempts > 1:  # an earlier attempt's error is not this run's outcome
            with contextlib.suppress(Exception):
                state.client.delete_tag(run_id, schema.ERROR)
        return o
    # Ended without a final report and without an error: the scheduler stopped it.
    o.status = schema.STATUS_STOPPED
    _wait_for_exit(metrics.get(tr.PID_KEY))
    if run_id:
        _mark_stopped(state.client, run_id, metrics)
    return o


def _last_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[-1] if text else repr(error))[:400]


def _wait_for_exit(pid: Any, timeout: float = STOP_WAIT_S) -> None:
    """Wait until a stopped trial's process (on this machine) is gone, so that nothing it still
    writes can race the driver's marking of its run."""
    if not isinstance(pid, (int, float)) or os.environ.get("RAY_ADDRESS"):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        try:
            if Path(f"/proc/{int(pid)}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.2)


def _mark_stopped(client: "MlflowClient", run_id: str, metrics: dict[str, Any]) -> None:
    """A run ASHA stopped (its process has ended): the metrics of its last report that the run
    did not get to log, then ``cemlab.status=stopped`` and MLflow status FINISHED (a result)."""
    from mlflow.entities import Metric

    step = int(metrics.get(tr.STEP_KEY, 0))
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


def _mark_interrupted(state: _Run) -> None:
    """After Ctrl-C/SIGTERM (trial processes already ended): the runs of the trials that were
    running say interrupted; every trial of the table gets an outcome (those that ended during
    the interrupted ``fit`` from what the table saw, the others ``queued``)."""
    from cemlab.train import checkpoint as ckpt
    from cemlab.tracking import mlflow_run as mr

    for tid, row in list(state.progress.rows.items()):
        if tid in state.outcomes:
            continue
        trial = state.progress.trials[tid]
        log_path = str(state.log_dir / f"{tid}.log")
        if row.status not in (pg.RUNNING, pg.RETRYING):
            metrics = {k: v for k, v in ((schema.TEST_PPL, row.test_ppl),) if not math.isnan(v)}
            state.outcomes[tid] = TrialOutcome(trial, row.status, row.run_id or None, metrics, seconds=row.seconds,
                                               wall=row.elapsed, attempts=row.attempts, log_path=log_path)
            continue
        run_id = row.run_id or (ckpt.read_state(state.runs_dir / "checkpoints" / trial.config_hash) or {}).get("run_id")
        if run_id:
            try:
                if state.client.get_run(run_id).info.status == "RUNNING":
                    mr.finish_run(state.client, run_id, schema.STATUS_INTERRUPTED)
            except Exception as e:  # the store may be going down too: the rerun tidies up
                log.warning("could not mark run %s interrupted: %s", run_id, e)
        state.progress.set_status(tid, schema.STATUS_INTERRUPTED)
        state.outcomes[tid] = TrialOutcome(trial, schema.STATUS_INTERRUPTED, run_id or None, wall=row.elapsed,
                                           attempts=row.attempts, log_path=log_path)


def _check_against_store(state: _Run, outcomes: list[TrialOutcome]) -> None:
    """Make every outcome that claims a result agree with the store after the sweep: a trained,
    done or recorded trial needs an active run with a result under this parent; a reused or
    waited one an active run with a result and the trial's config hash. Otherwise it is
    ``missing`` (a failure), whatever the trial said."""
    from cemlab.tracking.store import run_status, search_runs

    results = SEARCH_RESULTS
    children = {r.info.run_id: r for r in search_runs(state.client, [state.experiment_id],
                                                       f"tags.`{schema.PARENT_RUN_ID}` = '{state.parent_run_id}'")}
    for o in outcomes:
        if o.status not in results + pg.NOT_TRAINED:
            continue
        mine = o.status in (pg.DONE, pg.RECORDED)   # must be children of this parent
        run = children.get(o.run_id or "")
        if run is None and not mine and o.run_id:
            try:
                run = state.client.get_run(o.run_id)
            except Exception as e:
                from cemlab.train.decide import is_connection_error

                if is_connection_error(e):
                    raise
            if run is not None and run.info.lifecycle_stage != "active":
                run = None
        ok = (run is not None and run_status(run) in results
              and run.data.tags.get(schema.CONFIG_HASH) == o.trial.config_hash)
        if not ok:
            o.error = (f"said {o.status}, but the store {state.uri} holds no active run with a result for it "
                       f"(run {o.run_id}){' under this parent' if mine else ''}")
            o.status = pg.MISSING
            state.progress.set_status(o.trial.trial_id, pg.MISSING, note=o.error)


def _finish(state: _Run, reopened: bool, interrupted: bool, t0: float, store_error: str | None = None) -> SweepResult:
    """Check the outcomes against the store, record the invocation on the parent run and in
    ``summary.json`` (and ``summary-<parent run id>.json``). With ``store_error`` (the store went
    away) nothing is written to the store and the counts are what this invocation saw."""
    from cemlab.tracking import mlflow_run as mr

    outcomes = [state.outcomes[tid] for tid in state.progress.rows if tid in state.outcomes]
    client = state.client
    checked = False
    if store_error is None:
        try:
            _check_against_store(state, outcomes)
            checked = True
        except Exception as e:  # the store went away just now
            store_error = f"the MLflow store at {state.uri} failed while the sweep was checked ({type(e).__name__})"
    reused = sorted({o.run_id for o in outcomes if o.status == pg.REUSED and o.run_id})
    waited_on = sorted({o.waited_on for o in outcomes if o.status == pg.WAITED and o.waited_on})
    result = SweepResult(state.spec.name, state.scale, state.uri, state.experiment_id, state.parent_run_id, reopened,
                         outcomes, state.searches, reused, interrupted=interrupted, seconds=time.time() - t0,
                         store_error=store_error, concurrent_with=waited_on, counts_checked=checked)
    counts = result.counts()
    if store_error is None:
        try:
            if reused:
                before = client.get_run(state.parent_run_id).data.tags.get(schema.REUSED_FROM, "")
                ids = sorted(set(filter(None, before.split(","))) | set(reused))
                client.set_tag(state.parent_run_id, schema.REUSED_FROM, ",".join(ids)[:5000])
                from cemlab.tracking.conventions import link_reused_runs

                link_reused_runs(client, state.parent_run_id, [client.get_run(i) for i in reused])  # shown under this parent
            from cemlab.tracking.conventions import describe_sweep_run

            describe_sweep_run(client, state.parent_run_id, sweep=state.spec.name, figure=state.spec.figure,
                               scale=state.scale, description=state.spec.description,
                               run_ids=sorted({o.run_id for o in outcomes if o.run_id}))
            if waited_on:
                client.set_tag(state.parent_run_id, schema.CONCURRENT_WITH, ",".join(waited_on)[:5000])
            if interrupted:
                mr.finish_run(client, state.parent_run_id, schema.STATUS_INTERRUPTED)
            else:
                mr.finish_run(client, state.parent_run_id,
                              schema.STATUS_FAILED if result.failed else schema.STATUS_FINISHED,
                              {"cemlab.trial_counts": json.dumps(counts, sort_keys=True)})
        except Exception as e:
            result.store_error = f"the MLflow store at {state.uri} failed while the sweep was recorded ({type(e).__name__})"
    summary = {
        "sweep": result.sweep, "scale": result.scale, "tracking_uri": result.tracking_uri,
        "parent_run_id": result.parent_run_id, "seconds": round(result.seconds, 1), "counts": counts,
        "counts_checked_against_store": result.counts_checked, "exit_code": result.exit_code,
        "waited_on_parent_runs": result.concurrent_with, "store_error": result.store_error,
        "trials": [{"trial_id": o.trial.trial_id, "status": o.status, "run_id": o.run_id,
                    "train_seconds": o.seconds, "wall_seconds": o.wall, "attempts": o.attempts,
                    "test_ppl": o.metrics.get(schema.TEST_PPL), "error": o.error, "note": o.note,
                    "nodes": o.nodes}
                   for o in outcomes],
        "searches": [s.__dict__ for s in result.searches],
    }
    # One file per parent run, and summary.json (the latest), each replaced atomically: a
    # concurrent sweep of the same name never leaves a mix of two.
    _write_atomic(state.log_dir / f"summary-{result.parent_run_id}.json", summary)
    _write_atomic(state.log_dir / "summary.json", summary)
    return result


def _print_end(result: SweepResult, console: "Console") -> None:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts().items()))
    checked = " (checked against the store)" if result.counts_checked else ""
    console.print(f"Sweep {result.sweep} at scale {result.scale}: {counts or 'no trials'}{checked} in "
                  f"{pg._duration(result.seconds)}", highlight=False)
    for o in result.failed:
        console.print(f"  {o.status}: {o.trial.trial_id}: {o.error or 'see its log'}\n          log {o.log_path}",
                      highlight=False)
    for o in result.outcomes:
        if o.status == pg.RECORDED:
            console.print(f"  recorded: {o.trial.trial_id}: {o.note} (run {o.run_id})", highlight=False)
    if result.concurrent_with:
        n = sum(o.status == pg.WAITED for o in result.outcomes)
        console.print(f"  waited: {n} trial(s) were trained meanwhile by another sweep (parent run(s) "
                      f"{', '.join(result.concurrent_with)}); this sweep took their runs", highlight=False)
    if result.store_error:
        console.print(f"Stopped: {result.store_error}. Finished trials are kept in the store, stopped ones keep "
                      f"their checkpoints. Once the server answers again, run `cemlab sweep {result.sweep} --scale "
                      f"{result.scale}` again to resume.", highlight=False)
    elif result.interrupted:
        console.print("Interrupted: rerun the same command to resume (finished trials are kept, interrupted "
                      "ones continue from their checkpoints).", highlight=False)
    console.print(f"MLflow: {result.dashboard_url()}", highlight=False)


def _make_report(result: SweepResult, console: "Console") -> None:
    """The sweep's report (``cemlab.report.build_report``); a failure here keeps the runs and says why."""
    try:
        from cemlab.report import build_report

        result.report = build_report(result.sweep, scale=result.scale, tracking_uri=result.tracking_uri)
    except Exception as e:  # the sweep's runs are safe in MLflow; `cemlab report` can retry
        result.report_error = f"{type(e).__name__}: {e}"
        console.print(f"Report: not built ({result.report_error}); run `cemlab report {result.sweep}` to retry",
                      highlight=False)
        return
    console.print(f"Report: {result.report}", highlight=False)
