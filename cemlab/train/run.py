"""``train(run_config) -> RunResult``: one run, from config to a finished MLflow run.

This is what ``cemlab train`` calls and what the sweep runner calls inside a Ray trial::

    result = train(cfg, tracking_uri=url, parent_run_id=parent, report=tune_report, resume=True)
    result.status          # "finished" or "diverged" (a result, not an error)

Flow: plan (budget, steps) -> data (tokenised and cached; bad input fails here, before anything is
logged) -> model (seeded) -> MLflow run (created, or reopened when resuming) -> Lightning ``fit``
-> test metrics, test-time recursion curve, energy traces -> terminal status.

Resuming (``resume=True``): the checkpoint folder of the config (``train.checkpoint_dir`` or
``<runs>/checkpoints/<config hash>``) holds ``last.ckpt`` and ``state.json``. A run that is still
``running`` there continues from its checkpoint (model, optimizer, schedule, data position, RNG)
and logs into the same MLflow run, each step once. What counts as done is decided by the store in
use, not by the folder (``cemlab.train.decide``): a run the store holds with a result is returned
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
multi-worker sweep trial, see ``cemlab.sweeps.distributed``): each Ray Train worker is one rank,
Ray has set up the process group (gloo on CPU, NCCL on GPU) and ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``, and Lightning trains with Ray's ``RayDDPStrategy`` and ``RayLightningEnvironment``.
Either way the data order and gradient accumulation make an optimizer step see the same
``train.batch_size`` sequences as one process would (``cemlab.train.data``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from cemlab.config import ConfigError, RunConfig, flatten
from cemlab.tracking import schema

log = logging.getLogger("cemlab.train")


@dataclass
class RunResult:
    """What a run ended with. ``metrics`` holds the last value of every scalar metric
    (``train/loss``, ``val/ppl``, ``test/ppl`` or ``test/rmse``, ...); ``test_at_steps`` the
    test-time recursion curve {T': test ppl (or rmse)}."""

    status: str                                   # finished | diverged
    config_hash: str
    run_name: str
    run_id: str | None = None                     # None on ranks other than zero
    tracking_uri: str | None = None
    steps: int = 0                                # optimizer steps done
    total_steps: int = 0
    tokens: int = 0                               # tokens (GP: examples) seen
    metrics: dict[str, float] = field(default_factory=dict)
    test_at_steps: dict[int, float] = field(default_factory=dict)
    diverged_step: int | None = None
    checkpoint_dir: str | None = None
    seconds: float = 0.0
    resumed: bool = False
    outcome: str = "trained"                      # trained | reused (the store had it) | recorded (from local state)
    params: int | None = None                     # the model's parameter count

    @property
    def diverged(self) -> bool:
        return self.status == schema.STATUS_DIVERGED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunResult":
        d = dict(d)
        d["test_at_steps"] = {int(k): float(v) for k, v in (d.get("test_at_steps") or {}).items()}
        return cls(**d)


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else the project's store."""
    from cemlab.tracking.store import tracking_uri

    return uri or tracking_uri()


def _rank_world(cfg: RunConfig) -> tuple[int, int]:
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    world = int(os.environ.get("WORLD_SIZE", cfg.train.devices))
    return rank, world


def accelerator_and_precision(cfg: RunConfig) -> tuple[str, str]:
    import torch

    t = cfg.train
    cuda = torch.cuda.is_available()
    if t.accelerator == "gpu" and not cuda:
        raise ConfigError("train.accelerator='gpu' but no CUDA device is visible; use 'auto' or 'cpu'")
    accelerator = "gpu" if (t.accelerator == "gpu" or (t.accelerator == "auto" and cuda)) else "cpu"
    if t.precision == "auto":
        return accelerator, "bf16-mixed" if accelerator == "gpu" else "32-true"
    return accelerator, t.precision


def _peak_flops(accelerator: str, precision: str = "bf16-mixed") -> float | None:
    if accelerator != "gpu":
        return None
    from cemlab.hardware import peak_flops

    return peak_flops(precision=precision)


def _progress_bar(cfg: RunConfig, override: bool | None) -> bool:
    if override is not None:
        return override
    if cfg.train.progress_bar is not None:
        return cfg.train.progress_bar
    return sys.stderr.isatty()


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
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from cemlab.train import checkpoint as ckpt
    from cemlab.train.callbacks import ProgressBar, RunCallback
    from cemlab.train.data import DataPosition, StepBatchSampler, eval_indices, load_task_data
    from cemlab.train.module import CEMLabModule, Diverged
    from cemlab.train.plan import make_plan
    from cemlab.tasks import task_of
    from cemlab.train.tasks import test_recursion_list
    from cemlab.tracking import conventions
    from cemlab.tracking import mlflow_run as mr
    from cemlab.tracking import store

    t0 = time.perf_counter()
    cfg = run_config if isinstance(run_config, RunConfig) else RunConfig.model_validate(run_config)
    config_hash, name = cfg.hash(), cfg.tracking.run_name or mr.run_name(cfg)
    rank, world = _rank_world(cfg)
    zero = rank == 0
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator, precision = accelerator_and_precision(cfg)
    plan = make_plan(cfg, world)
    data = load_task_data(cfg, plan)
    L.seed_everything(cfg.train.seed, workers=False, verbose=False)
    task = task_of(cfg).build(cfg)
    folder = ckpt.checkpoint_dir(cfg)

    # -- resume or start afresh ----------------------------------------------------------------
    state = ckpt.read_state(folder) if resume else None
    if state is not None and state.get("config_hash") != config_hash:
        raise ConfigError(
            f"{folder / ckpt.STATE_NAME} belongs to config hash {state.get('config_hash')}, this config's hash is "
            f"{config_hash}; point train.checkpoint_dir elsewhere or start afresh with --restart"
        )
    static_metrics = task.static_metrics(plan.seq_len)
    n_params = int(static_metrics[schema.PARAMS_TOTAL])
    decision = None
    if resume:  # the store decides what is done; every rank asks it (only rank zero writes)
        from cemlab.train import decide as dc

        uri = resolve_tracking_uri(tracking_uri)
        decision = dc.decide(store.get_client(uri), config_hash, folder, state, own_run_first=True)
        if decision.action == dc.REUSE:
            result = dc.result_from_run(decision.run, state, uri)
            if zero:
                log.info("%s: the store %s already holds run %s with a result; not training again", name, uri,
                         result.run_id)
            return result
        if decision.action == dc.RECORD:
            if not zero:
                return RunResult.from_dict({**state["result"], "run_id": None, "outcome": "recorded"})
            return dc.record_from_local(store.get_client(uri), cfg, folder, state, uri, parent_run_id, role)
        if zero and decision.action == dc.RUN and state:
            log.info("%s: %s", name, decision.reason)
        state = decision.state  # None: the local result is not used (trained again from scratch)
    ckpt_path = folder / ckpt.CHECKPOINT_NAME if state is not None else None
    if ckpt_path is not None and not ckpt_path.is_file():
        ckpt_path = None
    if zero and (not resume or state is None):  # starting afresh: keep what the folder held
        aside = ckpt.set_aside(folder)
        if aside is not None:
            log.info("starting afresh: the previous checkpoint and state of this config are kept in %s", aside)

    # -- MLflow (rank zero) --------------------------------------------------------------------
    uri = client = run_id = metrics = None
    if zero:
        uri = resolve_tracking_uri(tracking_uri)
        from cemlab.train import decide as dc

        client = store.get_client(uri)
        keep_local = functools.partial(dc.append_metrics, folder)  # the history, kept beside the checkpoint
        resumed_run = decision.run if decision is not None and decision.action == dc.RESUME else None
        if resumed_run is not None:
            run_id, experiment_id = resumed_run.info.run_id, resumed_run.info.experiment_id
            mr.reopen_run(client, run_id)
            metrics = mr.MetricBuffer(client, run_id, on_flush=keep_local)
            metrics.skip_logged()
        else:
            if state and state.get("run_id"):
                log.warning("run %s is not in this MLflow store (or deleted); logging into a new run", state["run_id"])
            parent = parent_run_id or cfg.tracking.parent_run_id
            experiment_id = store.ensure_experiment(cfg.tracking.experiment, client)
            tags = mr.run_tags(cfg, role=role or ("trial" if parent else "train"), parent_run_id=parent)
            run_id = mr.create_run(client, experiment_id, name, tags)
            mr.log_params(client, run_id, flatten(cfg))
            mr.log_config(client, run_id, cfg)
            metrics = mr.MetricBuffer(client, run_id, on_flush=keep_local)
            upto = int((state or {}).get("step", 0)) if ckpt_path is not None else -1
            kept = [m for m in dc.read_metrics(folder) if int(m["step"]) <= upto and m["key"].startswith("train/")]
            dc.clear_metrics(folder)
            for m in kept:  # continuing a checkpoint in a new run: the history so far comes along
                metrics.add(m["key"], m["value"], int(m["step"]))
            static = dict(static_metrics)
            conventions.log_run_conventions(
                client, run_id, cfg, name, data_stats=data.stats, params=n_params,
                budget=plan.budget, split_sizes=_split_units(data, plan), step_notes=task.description())
            static.update({schema.TOKEN_BUDGET: plan.budget, schema.TOTAL_STEPS: plan.total_steps,
                           schema.DATA_TRAIN_TOKENS: _train_units(data, plan)})
            metrics.add_many(static, 0)
            metrics.flush()
        state = {"config_hash": config_hash, "run_id": run_id, "run_name": name, "tracking_uri": uri,
                 "store": dc.store_identity(uri, experiment_id), "status": schema.STATUS_RUNNING,
                 "step": (state or {}).get("step", 0),
                 "total_steps": plan.total_steps, "plan": plan.to_dict()}
        ckpt.write_state(folder, state)
    resumed = ckpt_path is not None
    monitor = conventions.start_system_metrics(cfg, uri, run_id, resume=resumed) if zero else None
    if zero:
        log.info("%s: %s, %s parameters, %s=%s steps=%d (%d x %d per step)%s; MLflow run %s", name, task.kind,
                 f"{n_params:,}", task.unit, f"{plan.tokens:,}", plan.total_steps, plan.batch_size, plan.seq_len,
                 f", resuming from {ckpt_path}" if resumed else "", run_id)

    def finish(status: str, extra_tags: dict[str, str] | None = None) -> None:
        if client is not None:
            try:
                metrics.flush()  # first: a trial the scheduler stops has little time before its process ends
            finally:
                try:
                    if monitor is not None:
                        monitor.finish()
                finally:
                    mr.finish_run(client, run_id, status, extra_tags)

    # -- Lightning -----------------------------------------------------------------------------
    position = DataPosition()
    val_idx = eval_indices(len(data.val), cfg.train.val_batches * plan.micro_batch_size)
    energy_batch = _energy_batch(data.val, val_idx, task) if task.recursion_T() is not None else None
    callback = RunCallback(
        plan=plan, task=task, val_dataset=data.val, energy_batch=energy_batch, folder=folder,
        state=state or {}, metrics=metrics, report=report if zero else None,
        flops_per_unit=task.train_flops_per_unit(plan.seq_len), peak_flops=_peak_flops(accelerator, precision),
        val_batches=cfg.train.val_batches,
    )
    show_bar = _progress_bar(cfg, progress_bar) and zero
    try:
        module = CEMLabModule(cfg, task, plan, position)
        sampler = StepBatchSampler(len(data.train), plan, cfg.train.seed, rank, position)
        loader = DataLoader(data.train, batch_sampler=sampler, num_workers=0, pin_memory=accelerator == "gpu")
        trainer = build_trainer(cfg, plan, accelerator, precision,
                                [callback] + ([ProgressBar(callback)] if show_bar else []), folder, show_bar,
                                ray_train=ray_train)
        with quiet_lightning():
            trainer.fit(module, train_dataloaders=loader, ckpt_path=str(ckpt_path) if ckpt_path else None)
    except Diverged as e:
        result = RunResult(
            status=schema.STATUS_DIVERGED, config_hash=config_hash, run_name=name, run_id=run_id, tracking_uri=uri,
            steps=e.step - 1, total_steps=plan.total_steps, tokens=(e.step - 1) * plan.tokens_per_step,
            metrics=_finite(callback.latest), diverged_step=e.step, checkpoint_dir=str(folder),
            seconds=time.perf_counter() - t0, resumed=resumed, params=n_params,
        )
        finish(schema.STATUS_DIVERGED, {schema.DIVERGED_STEP: str(e.step)})
        if zero:
            ckpt.write_state(folder, {**state, "status": schema.STATUS_DIVERGED, "result": result.to_dict()})
        if zero:
            log.warning("%s diverged at step %d (loss %s)", name, e.step, e.loss)
        return result
    except (KeyboardInterrupt, SystemExit) as e:  # Lightning turns Ctrl-C into SystemExit(1)
        finish(schema.STATUS_INTERRUPTED)
        raise KeyboardInterrupt(f"{name} interrupted; the same `cemlab train` command continues it") from e
    except BaseException as e:
        interrupted = type(e).__name__ == "SIGTERMException"
        finish(schema.STATUS_INTERRUPTED if interrupted else schema.STATUS_FAILED,
               None if interrupted else {schema.ERROR: f"{type(e).__name__}: {e}"[:500]})
        if interrupted:
            raise KeyboardInterrupt(f"{name} got SIGTERM; the same `cemlab train` command continues it") from e
        raise

    # -- the end: test metrics, test-time recursion, energy traces --------------------------------
    try:
        final, curve = _final_evaluation(cfg, trainer, module, task, data, plan, energy_batch, metrics,
                                          test_recursion_list(cfg, task.recursion_T()))
    except BaseException as e:
        finish(schema.STATUS_FAILED, {schema.ERROR: f"{type(e).__name__}: {e}"[:500]})
        raise
    callback.latest.update(final)
    if zero and conventions.log_model_enabled(cfg):
        try:
            conventions.log_final_model(client, run_id, module.model, cfg, trainer.global_step)
        except Exception as e:  # the result stands without its model artifact
            log.warning("%s: could not log the final model: %s", name, e)
    result = RunResult(
        status=schema.STATUS_FINISHED, config_hash=config_hash, run_name=name, run_id=run_id, tracking_uri=uri,
        steps=trainer.global_step, total_steps=plan.total_steps, tokens=trainer.global_step * plan.tokens_per_step,
        metrics=_finite(callback.latest), test_at_steps=curve, checkpoint_dir=str(folder),
        seconds=time.perf_counter() - t0, resumed=resumed, params=n_params,
    )
    finish(schema.STATUS_FINISHED)
    if zero:
        ckpt.write_state(folder, {**state, "status": schema.STATUS_FINISHED, "step": result.steps,
                                  "result": result.to_dict()})
        if report is not None:
            report(dict(callback.latest))
    return result


def build_trainer(cfg: RunConfig, plan, accelerator: str, precision: str, callbacks: list, folder,
                  progress_bar: bool, ray_train: bool = False):
    """The ``lightning.Trainer`` of a run: one epoch of ``plan.total_steps`` optimizer steps over the
    resumable loader; validation, checkpoints and logging come from cemlab's callbacks, so
    Lightning's own loops for them, its loggers and its checkpointing are off.

    ``ray_train``: inside a Ray Train worker, DDP over the process group Ray set up (Ray's
    Lightning strategy and cluster environment, one device per worker, checked by
    ``ray.train.lightning.prepare_trainer``); otherwise ``train.devices`` processes started by
    Lightning."""
    import lightning as L

    placement: dict = {"devices": cfg.train.devices}
    if ray_train:
        from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment

        placement = {"devices": "auto", "strategy": RayDDPStrategy(), "plugins": [RayLightningEnvironment()]}
    with quiet_lightning():
        trainer = L.Trainer(
            accelerator=accelerator, precision=precision, **placement,
            max_steps=plan.total_steps, max_epochs=1, accumulate_grad_batches=plan.accumulation,
            gradient_clip_val=cfg.train.grad_clip, limit_val_batches=0, num_sanity_val_steps=0,
            logger=False, enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=progress_bar,
            callbacks=callbacks, use_distributed_sampler=False, default_root_dir=str(folder),
        )
    if ray_train:
        from ray.train.lightning import prepare_trainer

        trainer = prepare_trainer(trainer)
    return trainer


def _train_units(data, plan) -> int:
    if data.train_stream is not None:
        return len(data.train_stream)
    return len(data.train) * plan.seq_len


def _split_units(data, plan) -> dict[str, int]:
    """Tokens (GP: examples) of each split, for the run's dataset inputs."""
    if isinstance(data.stats.get("tokens"), dict):
        return {k: int(v) for k, v in data.stats["tokens"].items()}
    return {"train": len(data.train), "val": len(data.val), "test": len(data.test)}


def _energy_batch(dataset, indices: list[int], task):
    """A fixed validation batch for energy traces: 4 sequences (LM) or 256 examples (GP)."""
    import torch

    k = 4 if task.kind == "lm" else 256
    return torch.stack([dataset[i][0] for i in indices[:k]])


def _final_evaluation(cfg, trainer, module, task, data, plan, energy_batch, metrics, recursion_list):
    """Test loss and metric, the test-time recursion curve and the energy traces, on the device
    the model trained on (Lightning moves it to the CPU when ``fit`` ends)."""
    from cemlab.train.data import eval_indices

    module.to(trainer.strategy.root_device)
    step = trainer.global_step
    cap = cfg.train.test_batches * plan.micro_batch_size if cfg.train.test_batches else None
    test_idx = eval_indices(len(data.test), cap)
    mb = plan.micro_batch_size
    test = module.evaluate(data.test, test_idx, mb)
    final = {f"test/{k}": v for k, v in test.items()}
    curve: dict[int, float] = {}
    T = task.recursion_T()
    for steps in recursion_list:
        if steps == T:
            curve[steps] = test[task.metric]
        else:
            with task.recursion_steps(steps):
                curve[steps] = module.evaluate(data.test, test_idx, mb)[task.metric]
    traces = module.energy_trace(energy_batch) if energy_batch is not None and trainer.is_global_zero else {}
    if metrics is not None:
        metrics.add_many(final, step)
        key = schema.TEST_PPL_AT_STEPS if task.kind == "lm" else schema.TEST_RMSE_AT_STEPS
        for steps, value in curve.items():
            metrics.add(key, value, steps)
        for (sub, layer), trace in traces.items():
            for t, value in enumerate(trace.tolist()):
                metrics.add(schema.energy_metric(sub, layer), value, t)
            metrics.add(schema.energy_drop_metric(sub, layer), float(trace[0] - trace[-1]), step)
        for (sub, layer), etas in task.step_sizes().items():  # fixed, 1/T or the learned values at the end
            for t, eta in enumerate(etas, 1):
                metrics.add(schema.step_size_metric(sub, layer), eta, t)
            metrics.add(schema.total_step_metric(sub, layer), sum(etas), step)
    return final, curve


def _finite(d: dict[str, Any]) -> dict[str, float]:
    """The numeric, non-NaN entries of ``d`` as floats (a result must survive JSON)."""
    return {k: float(v) for k, v in d.items() if isinstance(v, (int, float)) and not math.isnan(v)}


class quiet_lightning:
    """Silence Lightning's start-up chatter and the two warnings that do not apply here: the
    training loader resumes mid-epoch by construction (see ``cemlab.train.data``) and reads a
    memory map in the main process on purpose."""

    def __enter__(self):
        self._levels = {}
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            lg = logging.getLogger(name)
            self._levels[name] = lg.level
            lg.setLevel(logging.WARNING)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended.*")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*isinstance.treespec, LeafSpec.*")
        return self

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        return False


def describe(cfg: RunConfig, world_size: int = 1) -> dict[str, Any]:
    """The plan of a config without training (for ``cemlab train --dry-run`` and the sweep planner)."""
    from cemlab.train.plan import make_plan
    from cemlab.tracking.mlflow_run import run_name

    plan = make_plan(cfg, world_size)
    return {"run_name": cfg.tracking.run_name or run_name(cfg), "config_hash": cfg.hash(), **plan.to_dict()}


__all__ = ["RunResult", "train", "build_trainer", "accelerator_and_precision", "quiet_lightning", "resolve_tracking_uri", "describe"]
