"""Lightning callbacks of a cemlab run: the run callback (metrics, validation, checkpoints,
progress reports), the progress bar (in a terminal) and the progress lines (otherwise).

:class:`RunCallback`, at the end of every optimizer step ``s`` (1-based), in this order:

1. step metrics: training loss, learning rate, gradient norm, tokens seen, tokens/s and model
   FLOPs/s over the last steps (validation and checkpoint time excluded), MFU when the device's
   peak is known; buffered, written to MLflow in batches;
2. every ``train.val_interval`` steps and at the last step: validation loss and perplexity (RMSE
   for the GP task) on a fixed set of validation sequences, the energy drop of every CEM sublayer
   on a fixed validation batch, and the ``report`` callback (the sweep runner forwards it to Tune);
3. every ``train.checkpoint_every`` steps and at the last step: the metric buffer is flushed, then
   ``last.ckpt`` and ``state.json`` are replaced atomically.

At the end of training, on CUDA only: the GPU's peak memory, its total memory and its busy share
(:func:`gpu_usage`), which ``cemlab plan --scale gpu`` turns into trials per GPU (``cemlab.sweeps.gpu_slots``).

Validation runs before the checkpoint of the same step, so a run resumed from that checkpoint
neither repeats nor skips anything. MLflow is touched on global rank zero only.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

from cemlab import timing
from cemlab.tracking import schema
from cemlab.train import checkpoint as ckpt
from cemlab.train.data import eval_indices
from cemlab.train.plan import duration

if TYPE_CHECKING:  # pragma: no cover
    from cemlab.tasks import Task


class RunCallback(L.Callback):
    """Step metrics, validation, reports and checkpoints of one run (see the module docstring).
    ``task``: the run's task (:mod:`cemlab.tasks`; it names the metrics of units seen and units per
    second). ``latest`` holds the last value of every metric (the result and the progress bar read it)."""

    def __init__(self, *, plan, task: "Task", val_dataset, energy_batch, folder: Path, state: dict[str, Any],
                 metrics=None, report: Callable[[dict[str, float]], None] | None = None,
                 flops_per_unit: float, peak_flops: float | None, val_batches: int):
        self.plan, self.task = plan, task
        self.val_dataset = val_dataset
        self.val_indices = eval_indices(len(val_dataset), val_batches * plan.micro_batch_size)
        self.energy_batch = energy_batch
        self.folder, self.state = folder, state
        self.metrics = metrics                  # MetricBuffer on rank zero, else None
        self.report = report
        self.flops_per_unit, self.peak_flops = flops_per_unit, peak_flops
        self.latest: dict[str, float] = {}      # last value of every metric, for reports and results
        self._seen_step = -1
        self._window: deque[tuple[float, int]] = deque(maxlen=20)
        self._t_last = time.perf_counter()
        self.train_seconds = 0.0                # time in training steps (validation, checkpoints excluded)

    # -- hooks --------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self._seen_step = trainer.global_step
        self._t_last = time.perf_counter()
        if pl_module.device.type == "cuda":  # the peak of this training, not of an earlier trial of the process
            import torch

            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_end(self, trainer, pl_module) -> None:
        """Once, on CUDA only: the GPU measurements of :func:`gpu_usage` at the last step."""
        if self.metrics is not None and pl_module.device.type == "cuda":
            values = gpu_usage(pl_module.device, self.train_seconds)
            self.latest.update(values)
            self.metrics.add_many(values, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._seen_step:
            return  # a micro-batch within gradient accumulation
        self._seen_step = step
        t0 = time.perf_counter()
        self._log_step(trainer, pl_module, step)
        logged = time.perf_counter() - t0
        if step % pl_module.cfg.train.val_interval == 0 or step == self.plan.total_steps:
            with timing.stage("validation"):
                self.validate(trainer, pl_module, step)
        if step % pl_module.cfg.train.checkpoint_every == 0 or step == self.plan.total_steps:
            with timing.stage("checkpoint"):
                self.checkpoint(trainer, step)
        elif self.metrics is not None:
            t1 = time.perf_counter()
            self.metrics.maybe_flush()
            logged += time.perf_counter() - t1
        timing.add("step logging", logged)
        self._t_last = time.perf_counter()  # validation and checkpoint time are not training time

    # -- pieces -------------------------------------------------------------------------------
    # Throughput over the last (up to) 20 steps, validation and checkpoints excluded. Kept rather
    # than Lightning's ``Throughput``, which reports nothing until its window is full (a smoke run
    # of 8 steps would log no throughput at all); the device peak behind MFU is Lightning's.
    def _log_step(self, trainer, pl_module, step: int) -> None:
        now = time.perf_counter()
        self.train_seconds += now - self._t_last
        self._window.append((now - self._t_last, self.plan.tokens_per_step))
        dt = sum(d for d, _ in self._window)
        rate = sum(n for _, n in self._window) / dt if dt > 0 else float("nan")
        values = {
            schema.TRAIN_LOSS: pl_module.step_loss,
            schema.LR: pl_module.step_lr,
            self.task.seen_metric: step * self.plan.tokens_per_step,
            self.task.rate_metric: rate,
            schema.FLOPS_PER_S: rate * self.flops_per_unit,
        }
        if pl_module.grad_norm is not None:
            values[schema.GRAD_NORM] = float(pl_module.grad_norm)
        if self.peak_flops:
            values[schema.MFU] = rate * self.flops_per_unit / (self.peak_flops * trainer.world_size)
        self.latest.update(values)
        self.latest["step"] = step
        if self.metrics is not None:
            self.metrics.add_many(values, step)

    def validate(self, trainer, pl_module, step: int) -> None:
        result = pl_module.evaluate(self.val_dataset, self.val_indices, self.plan.micro_batch_size)
        values = {f"val/{k}": v for k, v in result.items()}
        if trainer.is_global_zero and self.energy_batch is not None:
            for (sub, layer), trace in pl_module.energy_trace(self.energy_batch).items():
                values[schema.energy_drop_metric(sub, layer)] = float(trace[0] - trace[-1])
        self.latest.update(values)
        if self.metrics is not None:
            self.metrics.add_many(values, step)
        if self.report is not None and trainer.is_global_zero:
            self.report(dict(self.latest))

    def checkpoint(self, trainer, step: int) -> None:
        if self.metrics is not None:
            self.metrics.flush()
        ckpt.save_checkpoint(trainer, self.folder)
        if trainer.is_global_zero:
            self.state.update(step=step, checkpoint=str(self.folder / ckpt.CHECKPOINT_NAME))
            ckpt.write_state(self.folder, self.state)


def gpu_usage(device, train_seconds: float) -> dict[str, float]:
    """The GPU one trial used, for choosing trials per GPU: the peak memory allocated during training
    (reset at its start), the device's total memory (MiB), and the busy share: the time in training
    steps over the trial's slot time so far (``timing.trial_start``: start-up, data, model build,
    validation and checkpoints count as idle; compiling, inside the first step, as busy). A share, not a
    sampled utilisation: a step's time counts as busy even where the GPU waits on the host, so it errs
    towards fewer trials per GPU."""
    import torch

    slot = max(time.time() - timing.trial_start(), 1e-9)
    return {schema.GPU_PEAK_MIB: torch.cuda.max_memory_allocated(device) / 2**20,
            schema.GPU_TOTAL_MIB: torch.cuda.get_device_properties(device).total_memory / 2**20,
            schema.GPU_BUSY_SHARE: min(1.0, train_seconds / slot)}


class ProgressBar(TQDMProgressBar):
    """Lightning's bar over micro-batches, showing the training loss and tokens/s only. Redrawn
    once per optimizer step by default (``refresh_rate``: the plan's accumulation), when what it
    shows changes: a redraw after every micro-batch cost about 0.2 ms of CPU each (2-core CPU),
    close to Lightning's own loop per micro-batch (see docs/performance.md)."""

    def __init__(self, run_callback: RunCallback, refresh_rate: int | None = None):
        super().__init__(refresh_rate=refresh_rate or run_callback.plan.accumulation)
        self.run_callback = run_callback

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        latest = self.run_callback.latest
        out: dict[str, Any] = {}
        if "step" in latest:
            out["step"] = int(latest["step"])
        if latest.get(schema.TRAIN_LOSS) is not None:
            out["loss"] = f"{latest[schema.TRAIN_LOSS]:.3f}"
        for key, label in ((schema.TOKENS_PER_S, "tok/s"), (schema.EXAMPLES_PER_S, "ex/s")):
            if key in latest:
                out[label] = f"{latest[key]:,.0f}"
        return out


class ProgressLines(L.Callback):
    """Without a terminal (a log file, a batch job), one line per validation: step, training loss,
    the validation metric, units per second, elapsed time and the time left at this run's pace (the
    steps since it started or resumed), flushed at once. The run callback validates first (it comes
    before this one in the trainer's callbacks), so ``latest`` holds that validation."""

    def __init__(self, run_callback: RunCallback, val_interval: int, stream=None):
        self.run_callback, self.val_interval = run_callback, val_interval
        self.stream = stream
        self._start: tuple[float, int] | None = None
        self._seen_step = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._start, self._seen_step = (time.monotonic(), trainer.global_step), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, total = trainer.global_step, self.run_callback.plan.total_steps
        if step == self._seen_step or not (step % self.val_interval == 0 or step == total):
            return
        self._seen_step = step
        latest, task = self.run_callback.latest, self.run_callback.task
        t0, step0 = self._start or (time.monotonic(), 0)
        elapsed = time.monotonic() - t0
        parts = [f"step {step}/{total}"]
        if latest.get(schema.TRAIN_LOSS) is not None:
            parts.append(f"loss {latest[schema.TRAIN_LOSS]:.3f}")
        if task.val_metric in latest:
            parts.append(f"val {task.metric} {task.format_metric(latest[task.val_metric])}")
        if task.rate_metric in latest:
            parts.append(f"{latest[task.rate_metric]:,.0f} {task.rate_metric.split('/')[-1].replace('_per_', '/')}")
        left = elapsed / (step - step0) * (total - step) if step > step0 else None
        parts.append(f"elapsed {duration(elapsed)}" + (f", about {duration(left)} left" if left and step < total else ""))
        print("  ".join(parts), file=self.stream or sys.stderr, flush=True)


def progress_callbacks(run_callback: RunCallback, bar: bool, val_interval: int, zero: bool = True) -> list:
    """The bar in a terminal, else one line per validation; nothing on ranks other than zero."""
    if not zero:
        return []
    return [ProgressBar(run_callback)] if bar else [ProgressLines(run_callback, val_interval)]
