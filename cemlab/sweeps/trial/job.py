"""What the sweep driver hands to every trial (:class:`TrialJob`), and what a trial process sets
up from it: its config (:func:`prepare_config`), its log file (:func:`redirect_output`) and the
test hook that injects faults (:func:`set_fault`, see ``cemlab.sweeps.trial.trainable``), and the
clean state a reused worker gives each trial (:func:`trial_scope`).

The driver ships the job to every trial with ``tune.with_parameters``; the Tune config of a trial
only names it (``{"trial_id": ...}`` for a grid, ``{"lr": ...}`` for an Optuna-searched cell).
Ray trials start in a temporary directory, possibly on another node, so the runs folder, the
sweeps folder and the MLflow URL travel in the job, as absolute paths.

``cemlab.train.module`` (Lightning) is imported only where a fault is injected, so the sweep driver
does not load Lightning for that one name.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cemlab import timing
from cemlab.data.store import READ_ONLY_ENV
from cemlab.sweeps.sweepfile.expand import trial_with_lr
from cemlab.sweeps.sweepfile.schema import Trial, round_lr
from cemlab.sweeps.trial.files import TrialFiles
from cemlab.sweeps.trial.memory import MEMORY_ENV
from cemlab.tracking.store import configure_http

#: Environment variable with the fault-injection spec (JSON), read by the driver.
FAULTS_ENV = "CEMLAB_SWEEP_FAULTS"


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
    # the driver's stage timestamps file (cemlab.timing), read where the job is made: the driver
    stages_file: str | None = field(default_factory=lambda: os.environ.get(timing.STAGES_ENV))
    # the memory limit of a trial's worker ($CEMLAB_WORKER_MEMORY_MB, cemlab.sweeps.trial.memory), as the driver has it
    memory_mb: str | None = field(default_factory=lambda: os.environ.get(MEMORY_ENV))
    # the CPU numerics mode of every trial ($CEMLAB_NUMERICS, cemlab.numerics), as the driver has it
    numerics: str | None = field(default_factory=lambda: os.environ.get("CEMLAB_NUMERICS"))

    def resolve(self, config: dict[str, Any]) -> Trial:
        """The trial a Tune config stands for."""
        if self.cell is not None:
            return trial_with_lr(self.cell, round_lr(float(config["lr"])))
        return self.trials[config["trial_id"]]

    @property
    def files(self) -> TrialFiles:
        """Where the trials' checkpoints and logs are."""
        return TrialFiles(Path(self.runs_dir), Path(self.log_dir))

    def env(self) -> dict[str, str]:
        """The variables every trial process gets (Ray workers start elsewhere)."""
        stages = {timing.STAGES_ENV: self.stages_file} if self.stages_file else {}
        if self.memory_mb is not None:
            stages[MEMORY_ENV] = self.memory_mb
        if self.numerics:
            stages["CEMLAB_NUMERICS"] = self.numerics
        return {**stages, "CEMLAB_RUNS_DIR": self.runs_dir, "CEMLAB_SWEEPS_DIR": self.sweeps_dir,
                "MLFLOW_TRACKING_URI": self.tracking_uri, "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
                **configure_http(), READ_ONLY_ENV: "1"}  # the sweep prepared the data before the trials: a trial never tokenises


def prepare_config(trial: Trial, job: TrialJob):
    """``trial.config`` with the hash-excluded fields a sweep trial sets (the hash is unchanged)."""
    cfg = trial.config.model_copy(deep=True)
    res = trial.resources
    cfg.train.num_threads = max(1, int(res.cpus_per_worker))
    cfg.train.progress_bar = False
    cfg.train.accelerator = "gpu" if res.gpus_per_worker > 0 else "cpu"
    cfg.train.checkpoint_dir = str(job.files.checkpoints(trial))
    if job.cache_dir:
        cfg.data.cache_dir = job.cache_dir
    if cfg.hash() != trial.config_hash:  # a field that is in the hash was touched: a bug here
        raise RuntimeError(f"{trial.trial_id}: preparing the config changed its hash")
    return cfg


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


@contextlib.contextmanager
def trial_scope():
    """Run one trial in a worker process that may run others before and after it (Tune's
    ``reuse_actors``), leaving behind what a fresh process would have: the environment, torch's
    thread count, default dtype and grad mode, no compiled code in memory (``torch._dynamo.reset``:
    the next trial compiles its own model, served from the on-disk compile cache where the shapes
    are the same, instead of adding guards to this one's until dynamo's recompile limit sends a
    later trial to eager mode), the logging handlers and levels, the warning filters,
    no active MLflow run, and the memory the trial freed (its reference cycles collected; what is left
    is frozen out of later collections, ``gc.freeze``). Seeds need no reset: ``train`` seeds every generator from
    the config before it builds the model, as in a fresh process."""
    import gc

    import torch

    env = dict(os.environ)
    threads, dtype, grad = torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()
    root = logging.getLogger()
    handlers = list(root.handlers)
    levels = {name: lg.level for name, lg in logging.Logger.manager.loggerDict.items()
              if isinstance(lg, logging.Logger)}
    root_level = root.level
    try:
        with warnings.catch_warnings():
            yield
    finally:
        if "torch._dynamo" in sys.modules:  # before the environment: it may touch inductor's cache folder
            torch._dynamo.reset()
        os.environ.clear()
        os.environ.update(env)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        for h in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(h)
        root.setLevel(root_level)
        for name, lg in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(lg, logging.Logger):
                lg.setLevel(levels.get(name, logging.NOTSET))
        if "mlflow" in sys.modules:  # a run the fluent API left open would receive the next trial's logs
            import mlflow

            while mlflow.active_run() is not None:
                mlflow.end_run()
        # A full collection frees the trial's cycles (a model a trainer still points at), then what
        # survives it (imported modules, caches: ~600k objects) is frozen, out of later collections:
        # one full collection of them took 0.34 s, at the end of every trial
        gc.collect()
        gc.freeze()


def _fault_for(job: TrialJob, trial_id: str) -> dict[str, int] | None:
    for pattern, spec in job.faults.items():
        if fnmatch.fnmatchcase(trial_id, pattern):
            return spec
    return None


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
    keys = {"times", "at_report", "nan_at_step", "leak_mb", "hold_s"}
    try:
        spec = json.loads(text)
        out = {str(k): {f: int(x) for f, x in v.items()} for k, v in spec.items()}
        if any(not f.keys() or not f.keys() <= keys for f in out.values()):
            raise ValueError(f"unknown or missing keys; use {sorted(keys)}")
        return out
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{FAULTS_ENV}={text!r} is not valid ({e}): expected JSON like "
                         '{"<trial id pattern>": {"times": 1, "at_report": 2}} or {"<pattern>": {"nan_at_step": 5}} '
                         'or {"<pattern>": {"leak_mb": 3000, "times": 1, "at_report": 1}} '
                         'or {"<pattern>": {"hold_s": 30, "at_report": 1}}') from e
