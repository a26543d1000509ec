"""What runs inside one Ray Tune trial: a single ``cemlab.train.run.train`` call, set up for a sweep
(or, for a trial of several workers, a Ray Train run whose every worker makes that call:
``cemlab.sweeps.distributed``).

The driver (``cemlab.sweeps.runner``) ships a :class:`TrialJob` to every trial with
``tune.with_parameters``; the Tune config of a trial only names it (``{"trial_id": ...}`` for a
grid, ``{"lr": ...}`` for an Optuna-searched cell). :func:`run_trial` then

1. resolves the :class:`~cemlab.sweeps.spec.Trial` (:meth:`TrialJob.resolve`) and sets the
   environment explicitly: Ray trials start in a temporary directory, possibly on another node, so
   the runs folder, the sweeps folder and the MLflow URL travel in the job, as absolute paths;
2. sends the process's stdout, stderr and logging to ``<runs>/logs/<sweep>-<scale>/<trial>.log``
   (the sweep's output stays one table; the log path is printed when a trial fails);
3. changes only fields that the config hash leaves out (:func:`prepare_config`: torch threads =
   the trial's CPUs, no progress bar, the accelerator its resources ask for, the checkpoint and
   data cache folders), so the trial keeps the hash of its grid cell;
4. holds an exclusive lock on the trial's checkpoint folder while training, so that two sweeps
   sharing a trial (the Llama baselines) never train it at the same time: the second waits, and
   ``train(resume=True)`` then returns the first one's result without training, reported as
   ``waited`` with the first sweep's parent run (``cemlab_waited_on``);
5. calls ``train(..., resume=True)``: a retried trial (Tune's ``FailureConfig``) or one rerun
   after the driver died continues from its last checkpoint and logs into the same MLflow run.
   With ``resources.workers > 1`` every Ray Train worker calls it (``distributed.fit_trial``);
   rank zero's reports reach Tune through this trial.

Reports to Tune: every validation before the last step (``training_iteration`` counts them; ASHA
compares trials on them), then one final report with ``cemlab_status`` (finished | diverged), the
run id, the test metrics and the Ray node of every rank (``cemlab_nodes``). When the scheduler
stops a trial, Ray ends its reporting thread with ``SystemExit`` inside ``tune.report``;
:func:`deliver_to_tune` turns that into :class:`TrialStopped`, so that ``train`` flushes the run's
metrics on its way out (it marks the run failed, which is not the last word: once Ray has ended
the trial's process, the driver marks the run ``stopped``).

Test hook (fault injection, never part of a config or its hash): ``TrialJob.faults`` maps a trial
id (a glob pattern) to ``{"times": N, "at_report": K}``: the K-th report of an attempt raises
:class:`InjectedFault`, for the first N attempts (``times: -1``: every attempt); or to
``{"nan_at_step": S}``: the training loss of step S is NaN (the training module's own hook,
``CEMLAB_INJECT_NAN_STEP``, set for that trial's process only), so the trial diverges. The driver
fills it from the environment variable ``CEMLAB_SWEEP_FAULTS`` (JSON); attempts are counted in
files under ``<runs>/logs/<sweep>-<scale>/faults/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cemlab.data.store import READ_ONLY_ENV
from cemlab.sweeps.spec import Trial, round_lr, trial_with_lr

#: Environment variable with the fault-injection spec (JSON), read by the driver.
FAULTS_ENV = "CEMLAB_SWEEP_FAULTS"
#: Lock file inside a trial's checkpoint folder (held while the trial trains).
LOCK_NAME = "sweep.lock"
#: Keys of the final report (besides the run's metrics).
STATUS_KEY = "cemlab_status"       # finished | diverged | recorded | reused | waited
WAITED_ON_KEY = "cemlab_waited_on"  # the parent run of the sweep whose run a trial that waited got
RUN_ID_KEY = "cemlab_run_id"
STEP_KEY = "cemlab_step"
TOTAL_KEY = "cemlab_total_steps"
PID_KEY = "cemlab_pid"
SECONDS_KEY = "cemlab_seconds"
RESUMED_KEY = "cemlab_resumed"
NODES_KEY = "cemlab_nodes"   # comma-separated Ray node ids of the trial's ranks (rank order)

log = logging.getLogger("cemlab.sweeps")


class InjectedFault(RuntimeError):
    """A failure injected by the test hook (see the module docstring)."""


class TrialStopped(BaseException):
    """The scheduler (ASHA) stopped this trial: not an error, so not an ``Exception``."""


@dataclass(frozen=True)
class TrialJob:
    """Everything a trial needs from the driver, with absolute paths."""

    sweep: str
    scale: str
    tracking_uri: str
    parent_run_id: str
    runs_dir: str
    sweeps_dir: str
    log_dir: str
    trials: dict[str, Trial] = field(default_factory=dict)   # grid: trial id -> trial
    cell: Trial | None = None                                  # optuna: the searched cell
    cache_dir: str | None = None                               # data.cache_dir for every trial
    faults: dict[str, dict[str, int]] = field(default_factory=dict)

    def resolve(self, config: dict[str, Any]) -> Trial:
        """The trial a Tune config stands for."""
        if self.cell is not None:
            return trial_with_lr(self.cell, round_lr(float(config["lr"])))
        return self.trials[config["trial_id"]]

    def log_path(self, trial_id: str) -> Path:
        return Path(self.log_dir) / f"{trial_id}.log"

    def env(self) -> dict[str, str]:
        """The variables every trial process gets (Ray workers start elsewhere)."""
        from cemlab.tracking.store import configure_http

        return {"CEMLAB_RUNS_DIR": self.runs_dir, "CEMLAB_SWEEPS_DIR": self.sweeps_dir,
                "MLFLOW_TRACKING_URI": self.tracking_uri, "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
                **configure_http(), READ_ONLY_ENV: "1"}  # the sweep prepared the data before the trials: a trial never tokenises


def prepare_config(trial: Trial, job: TrialJob):
    """``trial.config`` with the hash-excluded fields a sweep trial sets (the hash is unchanged)."""
    cfg = trial.config.model_copy(deep=True)
    res = trial.resources
    cfg.train.num_threads = max(1, int(res.cpus_per_worker))
    cfg.train.progress_bar = False
    cfg.train.accelerator = "gpu" if res.gpus_per_worker > 0 else "cpu"
    cfg.train.checkpoint_dir = str(Path(job.runs_dir) / "checkpoints" / trial.config_hash)
    if job.cache_dir:
        cfg.data.cache_dir = job.cache_dir
    if cfg.hash() != trial.config_hash:  # a field that is in the hash was touched: a bug here
        raise RuntimeError(f"{trial.trial_id}: preparing the config changed its hash")
    return cfg


@contextlib.contextmanager
def trial_lock(folder: Path):
    """Exclusive lock on ``folder/sweep.lock`` (released when the process dies). Yields True when
    another process held it and this one waited (another sweep trained the same config)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_NAME, "a") as fh:
        waited = False
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} another process holds {folder / LOCK_NAME} "
                  f"(another sweep trains this config): waiting for it", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield waited
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def try_trial_lock(folder: Path):
    """The trial lock of ``folder`` if no other process holds it: yields True (held until the
    block ends) or False (busy, not waited for)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_NAME, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_is_free(folder: Path) -> bool:
    """True when no process holds the trial lock of ``folder`` (the driver's check before it
    tidies up a trial's runs)."""
    path = folder / LOCK_NAME
    if not path.is_file():
        return True
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


@contextlib.contextmanager
def redirect_output(path: Path):
    """Send this process's stdout/stderr (file descriptors 1 and 2, so C libraries too) and the
    root logger to ``path`` (appended: a retried attempt adds to the same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    cemlab_logger = logging.getLogger("cemlab")
    level = cemlab_logger.level
    cemlab_logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        cemlab_logger.setLevel(level)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for s in saved:
            os.close(s)


class Reporter:
    """The ``report`` callback handed to ``train``: forwards each validation before the last step
    to Tune with the trial's step and run id, applies the fault-injection hook, and handles the
    scheduler stopping the trial (see the module docstring). ``deliver``: where a report goes
    instead of ``tune.report`` in this process (rank zero of a Ray Train run hands it to the Tune
    trial through a queue)."""

    def __init__(self, trial: Trial, folder: Path, fault: dict[str, int] | None, fault_counter: Path | None,
                 deliver: Callable[[dict[str, Any]], None] | None = None):
        self.trial, self.folder = trial, folder
        self.fault, self.fault_counter = fault, fault_counter
        self.deliver = deliver
        self.calls = 0
        self.run_id: str | None = None
        self.total_steps: int | None = None

    def _state(self) -> None:
        if self.run_id is None:
            from cemlab.train import checkpoint as ckpt

            state = ckpt.read_state(self.folder) or {}
            self.run_id = state.get("run_id")
            self.total_steps = state.get("total_steps")

    def _maybe_fail(self) -> None:
        if not self.fault or "times" not in self.fault or self.calls != int(self.fault.get("at_report", 1)):
            return
        times = int(self.fault.get("times", 1))
        done = int(self.fault_counter.read_text()) if self.fault_counter.is_file() else 0
        if times >= 0 and done >= times:
            return
        self.fault_counter.parent.mkdir(parents=True, exist_ok=True)
        self.fault_counter.write_text(str(done + 1))
        raise InjectedFault(f"injected failure {done + 1} of {self.trial.trial_id} at report {self.calls}")

    def __call__(self, metrics: dict[str, float]) -> None:
        self._state()
        step = int(metrics.get("step", 0))
        if any(k.startswith("test/") for k in metrics):
            return  # train()'s end-of-run report: run_trial sends the final one itself
        self.calls += 1
        self._maybe_fail()
        if self.total_steps is not None and step >= self.total_steps:
            return  # the last validation: the final report follows, after the test metrics
        send(metrics, self, final=False)


def send(metrics: dict[str, Any], reporter: Reporter, final: bool, extra: dict[str, Any] | None = None) -> None:
    """Report ``metrics`` with cemlab's keys: to the reporter's ``deliver``, else to Tune
    (:func:`deliver_to_tune`)."""
    payload = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    payload.update({STEP_KEY: int(metrics.get("step", 0)), TOTAL_KEY: int(reporter.total_steps or 0),
                    RUN_ID_KEY: reporter.run_id or "", PID_KEY: os.getpid()})
    payload.update(extra or {})
    if reporter.deliver is not None:
        reporter.deliver(payload)
    else:
        deliver_to_tune(payload, reporter.trial.trial_id, final)


def deliver_to_tune(payload: dict[str, Any], trial_id: str, final: bool) -> None:
    """``tune.report(payload)`` (in the Tune trial's process). A ``SystemExit`` from Tune means
    the trial is to stop: after the final report that is just the end; before it,
    :class:`TrialStopped` is raised."""
    from ray import tune

    try:
        tune.report(payload)
    except SystemExit:
        if final:
            return
        log.info("%s: stopped by the scheduler at step %s", trial_id, payload[STEP_KEY])
        raise TrialStopped(f"{trial_id} stopped by the scheduler at step {payload[STEP_KEY]}") from None


def _fault_for(job: TrialJob, trial_id: str) -> dict[str, int] | None:
    for pattern, spec in job.faults.items():
        if fnmatch.fnmatchcase(trial_id, pattern):
            return spec
    return None


def run_trial(config: dict[str, Any], job: TrialJob) -> None:
    """The Tune function trainable of a sweep (see the module docstring)."""
    trial = job.resolve(config)
    os.environ.update(job.env())
    with redirect_output(job.log_path(trial.trial_id)):
        try:
            _run(trial, job)
        except TrialStopped:
            sys.exit(0)  # Ray's runner thread takes exit code 0 as a graceful end, not an error
        except BaseException:
            traceback.print_exc()  # into the trial's log, which the sweep names when the trial fails
            raise


def _run(trial: Trial, job: TrialJob) -> None:
    import ray

    from cemlab.train.run import train

    node = ray.get_runtime_context().get_node_id()
    print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} (config {trial.config_hash}) "
          f"pid {os.getpid()} node {node}", flush=True)
    cfg = prepare_config(trial, job)
    folder = Path(cfg.train.checkpoint_dir)
    t0 = time.perf_counter()
    with trial_lock(folder) as waited:
        if trial.resources.workers > 1:
            from cemlab.sweeps.distributed import fit_trial

            result, nodes = fit_trial(trial, job)
            reporter = Reporter(trial, folder, None, None)
        else:
            fault = set_fault(job, trial)
            reporter = Reporter(trial, folder, fault, Path(job.log_dir) / "faults" / f"{trial.trial_id}.count")
            result = train(cfg, tracking_uri=job.tracking_uri, parent_run_id=job.parent_run_id, report=reporter,
                           resume=True, progress_bar=False, role="trial")
            nodes = [node]
    reporter.run_id = result.run_id or reporter.run_id
    reporter.total_steps = result.total_steps
    status, extra = result.status, {}
    if result.outcome == "recorded":
        status = "recorded"
        line = f"recorded from local state as run {result.run_id}; not trained"
    elif result.outcome == "reused":
        status = "waited" if waited else "reused"
        other = _parent_of(job.tracking_uri, result.run_id)
        extra[WAITED_ON_KEY] = other
        line = (f"{status}: run {result.run_id} of sweep parent run {other or '?'} has the result; not trained")
    else:
        line = f"{result.status} after {result.steps}/{result.total_steps} steps"
    print(f"--- trial {trial.trial_id}: {line} in {time.perf_counter() - t0:.1f}s (run {result.run_id})", flush=True)
    send({**result.metrics, "step": result.steps}, reporter, final=True,
         extra={STATUS_KEY: status, SECONDS_KEY: result.seconds, RESUMED_KEY: int(result.resumed),
                NODES_KEY: ",".join(nodes), **extra})


def _parent_of(uri: str, run_id: str | None) -> str:
    """The parent (sweep) run of ``run_id``, or "" when it has none or the store cannot say."""
    if not run_id:
        return ""
    from cemlab.tracking import schema
    from cemlab.tracking.store import get_client

    try:
        return get_client(uri).get_run(run_id).data.tags.get(schema.PARENT_RUN_ID, "")
    except Exception:  # the result stands; the name of the other sweep is a courtesy
        return ""


def set_fault(job: TrialJob, trial: Trial) -> dict[str, int] | None:
    """The fault-injection spec of ``trial`` (None: none); a ``nan_at_step`` one is set in this
    process's environment for the training module, any other is cleared from it."""
    from cemlab.train.module import INJECT_NAN_ENV

    fault = _fault_for(job, trial.trial_id)
    if fault and "nan_at_step" in fault:
        os.environ[INJECT_NAN_ENV] = str(fault["nan_at_step"])
    else:
        os.environ.pop(INJECT_NAN_ENV, None)
    return fault


def faults_from_env() -> dict[str, dict[str, int]]:
    """The fault-injection spec of ``$CEMLAB_SWEEP_FAULTS`` (empty when unset)."""
    text = os.environ.get(FAULTS_ENV)
    if not text:
        return {}
    keys = {"times", "at_report", "nan_at_step"}
    try:
        spec = json.loads(text)
        out = {str(k): {f: int(x) for f, x in v.items()} for k, v in spec.items()}
        if any(not f.keys() or not f.keys() <= keys for f in out.values()):
            raise ValueError(f"unknown or missing keys; use {sorted(keys)}")
        return out
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{FAULTS_ENV}={text!r} is not valid ({e}): expected JSON like "
                         '{"<trial id pattern>": {"times": 1, "at_report": 2}} or {"<pattern>": {"nan_at_step": 5}}') from e
