"""``train(run_config) -> RunResult``: one run, from config to a finished MLflow run.

This is what ``cemlab train`` calls and what the sweep runner calls inside a Ray trial::

    result = train(cfg, tracking_uri=url, parent_run_id=parent, report=tune_report, resume=True)
    result.status          # "finished" or "diverged" (a result, not an error)

Steps, one function each, in the order ``train`` calls them: :func:`resolve_config` (config, run
name, task, ranks, devices, plan) -> data (the task's ``load_data``: tokenised and cached, or
drawn; bad input fails here, before anything is logged) -> :func:`build_model` (seeded) ->
:func:`decide_start` (reuse / record / resume / afresh) -> :func:`open_logger` (the MLflow run,
created or reopened, and ``state.json``) -> :func:`make_run_callback` -> :func:`set_up_trainer`
-> :func:`fit` (Lightning) -> :func:`test` (test metrics, test-time recursion curve, energy traces)
-> :func:`record` (result, terminal status). A divergence ends in :func:`record_divergence`, an
error or an interruption in :func:`mark_stopped`.

Resuming (``resume=True``): the checkpoint folder of the config (``train.checkpoint_dir`` or
``<runs>/checkpoints/<config hash>``) holds ``last.ckpt`` and ``state.json``. A run that is still
``running`` there continues from its checkpoint (model, optimizer, schedule, data position, RNG)
and logs into the same MLflow run, each step once. What counts as done is decided by the store in
use, not by the folder (``cemlab.train.run_action``): a run the store holds with a result is returned
without training (``outcome="reused"``); a result the folder keeps whole (state, metric history
``metrics.jsonl``) but the store lacks is recorded into it without training (``outcome="recorded"``);
a local result that cannot be recorded is trained again. ``resume=False`` starts afresh (a new
MLflow run). Whenever training starts afresh in a folder that holds an earlier checkpoint, that
checkpoint and its state are moved aside into ``replaced-<time>/`` (``checkpoint.set_aside``),
never deleted.

Divergence: a NaN/inf training loss stops the run at that step; the run is tagged
``cemlab.status=diverged`` and ``cemlab.diverged_step``, keeps what it logged, and ``train``
returns a result with ``status="diverged"``. Other errors mark the run failed and propagate;
Ctrl-C and SIGTERM mark it interrupted and raise ``KeyboardInterrupt`` (resumable).

DDP: every rank calls ``train``; only global rank zero (``RANK`` in the environment) talks to
MLflow, writes ``state.json`` and calls ``report``. Two ways to get the ranks: Lightning starts
them itself (``train.devices`` > 1 on one machine), or Ray Train does (``ray_train=True``, a
multi-worker sweep trial, see ``cemlab.sweeps.trial.distributed``): each Ray Train worker is one rank,
Ray has set up the process group (gloo on CPU, NCCL on GPU) and ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``, and Lightning trains with Ray's ``RayDDPStrategy`` and ``RayLightningEnvironment``.
Either way the data order and gradient accumulation make an optimizer step see the same
``train.batch_size`` sequences as one process would (``cemlab.train.data``).

torch, Lightning and MLflow are imported at the top: this module is imported only to train
(``cemlab train --dry-run`` plans with ``cemlab.train.plan.describe`` without them).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import lightning as L
import torch
from torch.utils.data import DataLoader

from cemlab import numerics, timing
from cemlab.config import ConfigError, RunConfig, flatten
from cemlab.tasks import Task, TaskData, task_of
from cemlab.tracking import conventions, environment, schema, store
from cemlab.tracking import mlflow_run as mr
from cemlab.train import checkpoint as ckpt
from cemlab.train import run_action as dc
from cemlab.train import evaluate as ev
from cemlab.train.callbacks import RunCallback, progress_callbacks
from cemlab.train.data import DataPosition, StepBatchSampler, eval_indices
from cemlab.train.module import CEMLabModule, Diverged
from cemlab.train.plan import TrainPlan, make_plan
from cemlab.train.result import RunResult, finite
from cemlab.train.trainer import (accelerator_and_precision, build_trainer, device_peak_flops, quiet_lightning,
                                  show_progress_bar, use_compile_cache)

log = logging.getLogger("cemlab.train")


def train(run_config: RunConfig | dict, *, tracking_uri: str | None = None, parent_run_id: str | None = None,
          report: Callable[[dict[str, float]], None] | None = None, resume: bool = True,
          progress_bar: bool | None = None, role: str | None = None, ray_train: bool = False) -> RunResult:
    """Train one run and log it to MLflow; see the module docstring.

    ``tracking_uri``: the MLflow store (default ``$MLFLOW_TRACKING_URI`` or the project's store);
    ``parent_run_id``: nest the run under this one (a sweep's parent run); ``report``: called
    with the latest metrics after every validation and once at the end with the test metrics;
    ``role``: the ``cemlab.role`` tag (``trial`` when nested, else ``train``); ``ray_train``: this
    process is one worker of a Ray Train ``TorchTrainer`` (DDP over Ray's process group;
    ``train.devices`` is then ignored)."""
    run = resolve_config(run_config, tracking_uri=tracking_uri, parent_run_id=parent_run_id, role=role)
    with timing.stage("data load"):
        data = run.task.load_data(run.cfg, run.plan)  # bad input fails here, before anything is logged
    with timing.stage("model build"):
        model = build_model(run)
    with timing.stage("run start"):
        start = decide_start(run, resume)
        if isinstance(start, RunResult):  # the store or the runs folder already holds the result
            return start
        logger = open_logger(run, model, data, start)
        callback = make_run_callback(run, model, data, start, logger, report)
    try:
        with timing.stage("trainer setup"):
            trainer, module, loader = set_up_trainer(run, model, data, start, callback, progress_bar, ray_train)
        with timing.stage("fit"):
            fit(trainer, module, loader, start)
    except Diverged as e:
        return record_divergence(run, model, start, logger, callback, e)
    except BaseException as e:
        interruption = mark_stopped(run, logger, e)
        if interruption is None:
            raise
        raise interruption from e
    with timing.stage("test"):
        curve = test(run, model, data, trainer, module, callback, logger)
    with timing.stage("run end"):
        return record(run, model, start, logger, callback, trainer, module, curve, report)


# -- the run's facts, as the steps pass them on -----------------------------------------------------
@dataclass(frozen=True)
class Run:
    """What every step reads: the validated config, its identity and task, this process's rank, the
    devices and the plan, and the caller's tracking arguments."""

    cfg: RunConfig
    config_hash: str
    name: str
    task: Task                    # what differs between tasks: data, model, unit, metric names
    rank: int                     # global rank (RANK); only rank zero talks to MLflow
    world: int
    accelerator: str
    precision: str
    plan: TrainPlan
    tracking_uri: str | None      # as given (None: $MLFLOW_TRACKING_URI or the project's store)
    parent_run_id: str | None
    role: str | None
    t0: float                     # perf_counter at the start, for RunResult.seconds

    @property
    def zero(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Model:
    """The task's runtime object (``Task.build``: the model, its loss and metrics) and
    the facts logged at step 0 (parameter counts, FLOPs per token or example)."""

    runtime: Any
    static_metrics: dict[str, float]

    @property
    def params(self) -> int:
        return int(self.static_metrics[schema.PARAMS_TOTAL])


@dataclass(frozen=True)
class Start:
    """Where the run starts: its checkpoint folder, the state it continues (None: afresh), the
    store's decision (None when not resuming) and the checkpoint to load (None: step 0)."""

    folder: Path
    state: dict[str, Any] | None
    decision: dc.Decision | None
    ckpt_path: Path | None

    @property
    def resumed(self) -> bool:
        return self.ckpt_path is not None


@dataclass
class RunLogger:
    """The MLflow side of the run on global rank zero (on other ranks ``client`` is None and
    :meth:`finish` does nothing) and the ``state.json`` content the checkpoints update."""

    state: dict[str, Any]
    client: Any = None
    uri: str | None = None
    run_id: str | None = None
    metrics: mr.MetricBuffer | None = None
    monitor: Any = None           # MLflow's system metrics thread, when on

    def finish(self, status: str, extra_tags: dict[str, str] | None = None) -> None:
        """Flush the metrics, stop the system metrics and end the MLflow run with ``status``."""
        if self.client is None:
            return
        try:
            self.metrics.flush()  # first: a trial the scheduler stops has little time before its process ends
        finally:
            try:
                if self.monitor is not None:
                    stop_system_metrics(self.monitor)
            finally:
                mr.finish_run(self.client, self.run_id, status, extra_tags)


#: How long the end of a run waits for MLflow's system metrics thread to stop.
SYSTEM_METRICS_STOP_S = 30.0


def stop_system_metrics(monitor, timeout: float = SYSTEM_METRICS_STOP_S) -> bool:
    """Stop a ``SystemMetricsMonitor``, waiting at most ``timeout`` seconds; returns whether it
    stopped. Its ``finish`` joins the sampling thread with no limit, so a sample stuck in a store
    or NVML call would hold the run's end, and the process, for good; both threads are daemons,
    so a process that moves on still exits."""
    stopper = threading.Thread(target=monitor.finish, name="cemlab-stop-system-metrics", daemon=True)
    stopper.start()
    stopper.join(timeout)
    if stopper.is_alive():
        log.warning("MLflow's system metrics did not stop within %.0f s; the run ends without waiting for them "
                    "(tracking.system_metrics=false turns them off)", timeout)
        return False
    return True


# -- the steps ----------------------------------------------------------------------------------------
def resolve_config(run_config: RunConfig | dict, *, tracking_uri: str | None, parent_run_id: str | None,
                   role: str | None) -> Run:
    """Validate the config; name the run and its task; find this process's rank, the accelerator,
    the precision and the plan (budget, steps, accumulation)."""
    t0 = time.perf_counter()
    cfg = run_config if isinstance(run_config, RunConfig) else RunConfig.model_validate(run_config)
    numerics.apply()  # $CEMLAB_NUMERICS, before this process's first torch kernel (cemlab.numerics)
    config_hash, name = cfg.hash(), cfg.tracking.run_name or mr.run_name(cfg)
    rank, world = _rank_world(cfg)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator, precision = accelerator_and_precision(cfg)
    return Run(cfg=cfg, config_hash=config_hash, name=name, task=task_of(cfg), rank=rank, world=world,
               accelerator=accelerator, precision=precision, plan=make_plan(cfg, world), tracking_uri=tracking_uri,
               parent_run_id=parent_run_id, role=role, t0=t0)


def build_model(run: Run) -> Model:
    """Seed every generator with ``train.seed``, then build the task's model."""
    L.seed_everything(run.cfg.train.seed, workers=False, verbose=False)
    runtime = run.task.build(run.cfg)
    return Model(runtime, runtime.static_metrics(run.plan.seq_len))


def decide_start(run: Run, resume: bool) -> Start | RunResult:
    """The result the store (reuse) or the runs folder (record) already holds, or where training
    starts: the checkpoint the store's decision continues, or afresh, after setting the folder's
    earlier checkpoint aside (see the module docstring)."""
    folder = ckpt.checkpoint_dir(run.cfg)
    state = ckpt.read_state(folder) if resume else None
    if state is not None and state.get("config_hash") != run.config_hash:
        raise ConfigError(
            f"{folder / ckpt.STATE_NAME} belongs to config hash {state.get('config_hash')}, this config's hash is "
            f"{run.config_hash}; point train.checkpoint_dir elsewhere or start afresh with --restart"
        )
    decision = None
    if resume:  # the store decides what is done; every rank asks it (only rank zero writes)
        uri = resolve_tracking_uri(run.tracking_uri)
        decision = dc.decide(store.get_client(uri), run.config_hash, folder, state, own_run_first=True)
        if decision.action == dc.REUSE:
            result = dc.result_from_run(decision.run, state, uri)
            if run.zero:
                log.info("%s: the store %s already holds run %s with a result; not training again", run.name, uri,
                         result.run_id)
            return result
        if decision.action == dc.RECORD:
            if not run.zero:
                return RunResult.from_dict({**state["result"], "run_id": None, "outcome": "recorded"})
            return dc.record_from_local(store.get_client(uri), run.cfg, folder, state, uri, run.parent_run_id,
                                        run.role)
        if run.zero and decision.action == dc.RUN and state:
            log.info("%s: %s", run.name, decision.reason)
        state = decision.state  # None: the local result is not used (trained again from scratch)
    ckpt_path = ckpt.resumable_checkpoint(folder) if state is not None else None  # an unreadable one: named
    if run.zero and (not resume or state is None):  # starting afresh: keep what the folder held
        aside = ckpt.set_aside(folder)
        if aside is not None:
            log.info("starting afresh: the previous checkpoint and state of this config are kept in %s", aside)
    return Start(folder, state, decision, ckpt_path)


def open_logger(run: Run, model: Model, data: TaskData, start: Start) -> RunLogger:
    """On rank zero: reopen the MLflow run being resumed, or create one; write ``state.json``;
    start the system metrics. Other ranks log nothing."""
    if not run.zero:
        return RunLogger(state=start.state or {})
    uri = resolve_tracking_uri(run.tracking_uri)
    client = store.get_client(uri)
    keep_local = functools.partial(dc.append_metrics, start.folder)  # the history, kept beside the checkpoint
    decision = start.decision
    system = (start.state or {}).get("system_tags")  # the run's mlflow.* tags, for a copy recorded elsewhere
    if decision is not None and decision.action == dc.RESUME:
        run_id, experiment_id = decision.run.info.run_id, decision.run.info.experiment_id
        mr.reopen_run(client, run_id)
        metrics = mr.MetricBuffer(client, run_id, on_flush=keep_local)
        metrics.skip_logged()
    else:
        run_id, experiment_id = _create_mlflow_run(run, client, start)
        metrics = mr.MetricBuffer(client, run_id, on_flush=keep_local)
        system = _log_start(run, model, data, start, client, run_id, metrics)
    state = {"config_hash": run.config_hash, "run_id": run_id, "run_name": run.name, "tracking_uri": uri,
             "store": dc.store_identity(uri, experiment_id), "status": schema.STATUS_RUNNING,
             "step": (start.state or {}).get("step", 0),
             "total_steps": run.plan.total_steps, "plan": run.plan.to_dict(), "system_tags": system}
    ckpt.write_state(start.folder, state)
    monitor = conventions.start_system_metrics(run.cfg, uri, run_id, resume=start.resumed)
    plan = run.plan
    log.info("%s: %s, %s parameters, %s=%s steps=%d (%d x %d per step)%s; MLflow run %s", run.name, run.task.name,
             f"{model.params:,}", run.task.unit, f"{plan.tokens:,}", plan.total_steps, plan.batch_size,
             plan.seq_len, f", resuming from {start.ckpt_path}" if start.resumed else "", run_id)
    return RunLogger(state, client, uri, run_id, metrics, monitor)


def make_run_callback(run: Run, model: Model, data: TaskData, start: Start, logger: RunLogger,
                      report: Callable[[dict[str, float]], None] | None) -> RunCallback:
    """The callback that logs step metrics, validates, reports and checkpoints (``cemlab.train.callbacks``)."""
    runtime, plan = model.runtime, run.plan
    val_idx = eval_indices(len(data.val), run.cfg.train.val_batches * plan.micro_batch_size)
    energy_batch = ev.energy_batch(data.val, val_idx, runtime) if runtime.recursion_T() is not None else None
    return RunCallback(
        plan=plan, task=run.task, val_dataset=data.val, energy_batch=energy_batch, folder=start.folder,
        state=logger.state, metrics=logger.metrics, report=report if run.zero else None,
        flops_per_unit=runtime.train_flops_per_unit(plan.seq_len),
        peak_flops=device_peak_flops(run.accelerator, run.precision), val_batches=run.cfg.train.val_batches,
    )


def set_up_trainer(run: Run, model: Model, data: TaskData, start: Start, callback: RunCallback,
                   progress_bar: bool | None, ray_train: bool):
    """The LightningModule, the resumable training loader of this rank and the ``Trainer``."""
    position = DataPosition()
    if run.cfg.train.compiles(run.accelerator) or run.accelerator == "gpu":  # flex compiles on a GPU in any case
        use_compile_cache()
    module = CEMLabModule(run.cfg, model.runtime, run.plan, position)
    sampler = StepBatchSampler(len(data.train), run.plan, run.cfg.train.seed, run.rank, position)
    loader = DataLoader(data.train, batch_sampler=sampler, num_workers=0, pin_memory=run.accelerator == "gpu")
    show_bar = show_progress_bar(run.cfg, progress_bar) and run.zero
    progress = progress_callbacks(callback, show_bar, run.cfg.train.val_interval, run.zero)
    trainer = build_trainer(run.cfg, run.plan, run.accelerator, run.precision, [callback] + progress, start.folder,
                            show_bar, ray_train=ray_train)
    return trainer, module, loader


def fit(trainer, module: CEMLabModule, loader: DataLoader, start: Start) -> None:
    """Train to the plan's last step, from the checkpoint when there is one."""
    with quiet_lightning():
        trainer.fit(module, train_dataloaders=loader, ckpt_path=str(start.ckpt_path) if start.resumed else None)


def test(run: Run, model: Model, data: TaskData, trainer, module: CEMLabModule, callback: RunCallback,
         logger: RunLogger) -> dict[int, float]:
    """Test metrics, the test-time recursion curve (returned) and the energy traces, logged; an error
    here marks the MLflow run failed."""
    runtime = model.runtime
    try:
        final, curve, traces = ev.evaluate_on_test(run.cfg, trainer, module, runtime, data, run.plan,
                                                   callback.energy_batch,
                                                   ev.test_recursion_list(run.cfg, runtime.recursion_T()))
        if logger.metrics is not None:
            ev.log_test(logger.metrics, run.task, runtime, final, curve, traces, trainer.global_step)
    except BaseException as e:
        logger.finish(schema.STATUS_FAILED, {schema.ERROR: f"{type(e).__name__}: {e}"[:500]})
        raise
    callback.latest.update(final)
    return curve


def record(run: Run, model: Model, start: Start, logger: RunLogger, callback: RunCallback, trainer,
           module: CEMLabModule, curve: dict[int, float],
           report: Callable[[dict[str, float]], None] | None) -> RunResult:
    """The final model (when logged), the result, the finished MLflow run and ``state.json``; the
    last report."""
    if run.zero and conventions.log_model_enabled(run.cfg):
        try:
            conventions.log_final_model(logger.client, logger.run_id, module.model, run.cfg, trainer.global_step)
        except Exception as e:  # the result stands without its model artifact
            log.warning("%s: could not log the final model: %s", run.name, e)
    result = _result(run, model, start, logger, callback, schema.STATUS_FINISHED, trainer.global_step,
                     test_at_steps=curve)
    logger.finish(schema.STATUS_FINISHED)
    if run.zero:
        ckpt.write_state(start.folder, {**logger.state, "status": schema.STATUS_FINISHED, "step": result.steps,
                                        "result": result.to_dict()})
        if report is not None:
            report(dict(callback.latest))
    return result


def record_divergence(run: Run, model: Model, start: Start, logger: RunLogger, callback: RunCallback,
                      e: Diverged) -> RunResult:
    """A NaN/inf loss at step ``e.step``: the run ends diverged, keeping what it logged."""
    result = _result(run, model, start, logger, callback, schema.STATUS_DIVERGED, e.step - 1, diverged_step=e.step)
    logger.finish(schema.STATUS_DIVERGED, {schema.DIVERGED_STEP: str(e.step)})
    if run.zero:
        ckpt.write_state(start.folder, {**logger.state, "status": schema.STATUS_DIVERGED, "result": result.to_dict()})
        log.warning("%s diverged at step %d (loss %s)", run.name, e.step, e.loss)
    return result


def mark_stopped(run: Run, logger: RunLogger, e: BaseException) -> KeyboardInterrupt | None:
    """End the MLflow run interrupted (Ctrl-C, SIGTERM: returns the ``KeyboardInterrupt`` to raise,
    the run is resumable) or failed (returns None: the error propagates)."""
    if isinstance(e, (KeyboardInterrupt, SystemExit)):  # Lightning turns Ctrl-C into SystemExit(1)
        logger.finish(schema.STATUS_INTERRUPTED)
        return KeyboardInterrupt(f"{run.name} interrupted; the same `cemlab train` command continues it")
    if type(e).__name__ == "SIGTERMException":
        logger.finish(schema.STATUS_INTERRUPTED)
        return KeyboardInterrupt(f"{run.name} got SIGTERM; the same `cemlab train` command continues it")
    logger.finish(schema.STATUS_FAILED, {schema.ERROR: f"{type(e).__name__}: {e}"[:500]})
    return None


# -- pieces of the steps ------------------------------------------------------------------------------
def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else the project's store."""
    return uri or store.tracking_uri()


def _rank_world(cfg: RunConfig) -> tuple[int, int]:
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    world = int(os.environ.get("WORLD_SIZE", cfg.train.devices))
    return rank, world


def _create_mlflow_run(run: Run, client, start: Start) -> tuple[str, str]:
    """A new MLflow run with the config's tags, params and config file; (run id, experiment id)."""
    if start.state and start.state.get("run_id"):
        log.warning("run %s is not in this MLflow store (or deleted); logging into a new run", start.state["run_id"])
    parent = run.parent_run_id or run.cfg.tracking.parent_run_id
    experiment_id = store.ensure_experiment(run.cfg.tracking.experiment, client)
    tags = mr.run_tags(run.cfg, role=run.role or ("trial" if parent else "train"), parent_run_id=parent)
    env = environment.environment(commit=tags.get(schema.GIT_COMMIT, ""))  # run_tags asked git already
    tags.update(environment.env_tags(env))  # what it runs on (cemlab.tracking.environment)
    return mr.start_run(client, experiment_id, run.name, tags, run.cfg, flatten(run.cfg)), experiment_id


def _log_start(run: Run, model: Model, data: TaskData, start: Start, client, run_id: str,
               metrics: mr.MetricBuffer) -> dict[str, str]:
    """What a new MLflow run logs first: the metric history of the checkpoint it continues (if any),
    MLflow's conventions (description, dataset inputs) and the step-0 facts (parameters, budget).
    Returns the system tags and description it set."""
    upto = int((start.state or {}).get("step", 0)) if start.resumed else -1
    kept = [m for m in dc.read_metrics(start.folder) if int(m["step"]) <= upto and m["key"].startswith("train/")]
    dc.clear_metrics(start.folder)
    for m in kept:  # continuing a checkpoint in a new run: the history so far comes along
        metrics.add(m["key"], m["value"], int(m["step"]))
    plan = run.plan
    system = conventions.log_run_conventions(
        client, run_id, run.cfg, run.name, data_stats=data.stats, params=model.params,
        budget=plan.budget, split_sizes=_split_units(data, plan), step_notes=model.runtime.description())
    static = dict(model.static_metrics)
    static.update({schema.TOKEN_BUDGET: plan.budget, schema.TOTAL_STEPS: plan.total_steps,
                   schema.DATA_TRAIN_TOKENS: _train_units(data, plan)})
    metrics.add_many(static, 0)
    metrics.flush()
    return system


def _result(run: Run, model: Model, start: Start, logger: RunLogger, callback: RunCallback, status: str, steps: int,
            **extra) -> RunResult:
    return RunResult(
        status=status, config_hash=run.config_hash, run_name=run.name, run_id=logger.run_id, tracking_uri=logger.uri,
        steps=steps, total_steps=run.plan.total_steps, tokens=steps * run.plan.tokens_per_step,
        metrics=finite(callback.latest), checkpoint_dir=str(start.folder), seconds=time.perf_counter() - run.t0,
        resumed=start.resumed, params=model.params, **extra,
    )


def _train_units(data, plan) -> int:
    if data.train_stream is not None:
        return len(data.train_stream)
    return len(data.train) * plan.seq_len


def _split_units(data, plan) -> dict[str, int]:
    """Tokens (GP: examples) of each split, for the run's dataset inputs."""
    if isinstance(data.stats.get("tokens"), dict):
        return {k: int(v) for k, v in data.stats["tokens"].items()}
    return {"train": len(data.train), "val": len(data.val), "test": len(data.test)}


__all__ = ["RunResult", "train", "resolve_tracking_uri"]
