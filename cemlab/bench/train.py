"""Training-loop benchmark: cemlab's Lightning training step against a bare PyTorch loop, and the
data start-up of a second run (token cache hit).

    cemlab bench train [CONFIG.yaml] [key=value ...] [--steps 30] [--warmup 5] [--rounds 3] [--csv out.csv]

Both loops train the same model (same seed and initialisation) on the same batches (the run's
resumable sampler over the packed training split) with the same optimizer, schedule, clipping,
gradient accumulation and precision, and read the loss back once per optimizer step. The
Lightning side is exactly what ``cemlab train`` runs (``CEMLabModule``, ``RunCallback`` with its
per-step metrics, the run's ``Trainer`` settings), minus MLflow writes and the progress bar (off
when stderr is not a terminal, as in sweeps). The bench prints how far the two loops' training
losses at the same step differ (zero on the CPU in float32: the same work, step for step).

The two loops are interleaved step by step in one process: at the end of each Lightning optimizer
step, a callback runs one step of the bare loop (its own model), so that both see the same load
on a shared machine (run one after the other, rounds on a loaded 2-core machine scattered from
-8% to +12%; interleaved, within about +-4%). Rounds repeat that with fresh models. The overhead
is the median over rounds of the ratio of the two loops' time per step, in wall time on a GPU and
in the process's CPU time on the CPU (exact with ``train.num_threads=1``). Timing covers
optimizer steps ``warmup+1 .. warmup+steps`` of both. Lightning's cost is a fixed amount per
micro-batch (its loop, hooks and closure run once per micro-batch), so the bench also prints it
per micro-batch: the overhead at another model size is about that times the accumulation over
the step time.

Data start-up: two fresh processes prepare the run's data (``cemlab.bench.data``); the first may
build the cache, the second is a hit; both are printed (seconds inside ``prepare_data``).

Default config: ``configs/default.yaml`` when it exists in the current directory, else the
built-in defaults.

Lightning and the modules built on it (``cemlab.train.callbacks``, ``cemlab.train.module``) are
imported in the Lightning loop, so ``cemlab bench train --help`` and a bad config answer without
loading them (Lightning alone takes seconds).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader

from cemlab.bench.data import run_once
from cemlab.config import ConfigError, load_run_config
from cemlab.tasks import task_of
from cemlab.tracking.mlflow_run import run_name
from cemlab.train.data import DataPosition, StepBatchSampler
from cemlab.train.plan import decay_groups, lr_factor, make_plan
from cemlab.train.trainer import accelerator_and_precision, build_trainer, quiet_lightning

DEFAULT_CONFIG = Path("configs/default.yaml")


def _setup(cfg, total_steps: int):
    """The plan (capped at ``total_steps``) and the data shared by both loops."""
    plan = make_plan(cfg.model_copy(update={"train": cfg.train.model_copy(update={"max_steps": total_steps})}))
    return plan, task_of(cfg).load_data(cfg, plan)


class BareLoop:
    """A hand-written loop doing the work of ``cemlab train``'s step: :meth:`step` runs one
    optimizer step (the micro-batches with gradient accumulation, the loss read back once,
    clipping, AdamW, the schedule)."""

    def __init__(self, cfg, plan, data, accelerator: str, precision: str):
        t = cfg.train
        torch.manual_seed(t.seed)
        self.plan, self.grad_clip = plan, t.grad_clip
        self.device = device = torch.device("cuda" if accelerator == "gpu" else "cpu")
        self.task = task_of(cfg).build(cfg)
        self.model = model = self.task.model.to(device).train()
        self.forward = torch.compile(model) if t.compiles(accelerator) else model
        decay, no_decay = decay_groups(model)
        params = dict(model.named_parameters())
        self.opt = torch.optim.AdamW([{"params": [params[n] for n in decay], "weight_decay": t.weight_decay},
                                      {"params": [params[n] for n in no_decay], "weight_decay": 0.0}],
                                     lr=t.lr, betas=tuple(t.betas), eps=t.eps,
                                     fused=True if device.type == "cuda" else None)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: lr_factor(s, plan.total_steps, plan.warmup_steps, t.final_lr_factor))
        sampler = StepBatchSampler(len(data.train), plan, t.seed, 0, DataPosition())
        self.loader = iter(DataLoader(data.train, batch_sampler=sampler, num_workers=0,
                                      pin_memory=device.type == "cuda"))
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")

    def step(self) -> float:
        """One optimizer step; returns its mean training loss."""
        accumulation = self.plan.accumulation
        total = torch.zeros((), device=self.device)
        for _ in range(accumulation):
            x, y = next(self.loader)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            with self.autocast:
                loss = self.task.loss(self.forward(x), y)
            (loss / accumulation).backward()
            total += loss.detach()
        loss = float(total / accumulation)
        if not math.isfinite(loss):
            raise RuntimeError("the bare loop diverged")
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return loss


class Round(NamedTuple):
    """One round, per timed step: (wall, CPU) seconds and the training loss of each loop."""

    bare: list[tuple[float, float]]
    light: list[tuple[float, float]]
    bare_loss: list[float]
    light_loss: list[float]


def paired_round(cfg, plan, data, warmup: int, accelerator: str, precision: str) -> Round:
    """``cemlab train``'s Lightning loop (no MLflow) with a :class:`BareLoop` step run at the end of
    each of its optimizer steps (same seed, so step k of both trains the same model on the same data).

    Interleaved step by step, both loops run under the same machine load, and each step of either
    follows a step of the other (with its caches)."""
    import lightning as L

    from cemlab.train.callbacks import RunCallback
    from cemlab.train.module import CEMLabModule

    def now() -> tuple[float, float]:
        if accelerator == "gpu":
            torch.cuda.synchronize()
        return time.perf_counter(), time.process_time()

    class Interleave(L.Callback):
        """At the end of Lightning's optimizer step k: the time, bare step k, the time."""

        def __init__(self):
            self.stamps: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}
            self.losses: dict[int, tuple[float, float]] = {}  # step k: (bare, Lightning)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            k = trainer.global_step
            if 0 < k < plan.total_steps and k not in self.stamps:
                before = now()
                self.losses[k] = (bare.step(), pl_module.step_loss)
                self.stamps[k] = (before, now())

    t = cfg.train
    bare = BareLoop(cfg, plan, data, accelerator, precision)
    # Validation and checkpoints only after the timed window (at the last step).
    quiet = cfg.model_copy(update={"train": t.model_copy(update={
        "val_interval": plan.total_steps + 1, "checkpoint_every": plan.total_steps + 1})})
    torch.manual_seed(t.seed)
    task = task_of(quiet).build(quiet)
    position = DataPosition()
    module = CEMLabModule(quiet, task, plan, position)
    loader = DataLoader(data.train, batch_sampler=StepBatchSampler(len(data.train), plan, t.seed, 0, position),
                        num_workers=0, pin_memory=accelerator == "gpu")
    interleave = Interleave()
    with tempfile.TemporaryDirectory() as folder:
        callback = RunCallback(plan=plan, task=task_of(quiet), val_dataset=data.val, energy_batch=None, folder=Path(folder),
                               state={}, metrics=None, report=None,
                               flops_per_unit=task.train_flops_per_unit(plan.seq_len), peak_flops=None,
                               val_batches=1)
        trainer = build_trainer(quiet, plan, accelerator, precision, [interleave, callback], folder, False)
        with quiet_lightning():
            trainer.fit(module, train_dataloaders=loader)
    stamps = interleave.stamps

    def span(a, b):
        return b[0] - a[0], b[1] - a[1]

    # Timed: steps warmup+1 .. total-1 of both. Lightning's step k runs from the end of bare step
    # k-1 to the end of its own last micro-batch; bare step k right after it.
    timed = range(warmup + 1, plan.total_steps)
    return Round([span(*stamps[k]) for k in timed], [span(stamps[k - 1][1], stamps[k][0]) for k in timed],
                 [interleave.losses[k][0] for k in timed], [interleave.losses[k][1] for k in timed])


def data_startup(cfg) -> list[tuple[bool, float, float]]:
    """(cache hit, seconds in prepare_data, process wall seconds) of two fresh processes."""
    spec = {"data": cfg.data.model_dump(mode="json"), "vocab_size": cfg.model.vocab_size, "seq_len": task_of(cfg).seq_len(cfg)}
    out = []
    for _ in range(2):
        stats, wall = run_once(spec)
        out.append((bool(stats["cache_hit"]), float(stats["seconds"]), wall))
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="run config YAML (default: configs/default.yaml if present)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--steps", type=int, default=30, help="timed optimizer steps per round (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed optimizer steps first, at least 1 (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each with fresh models (default 3)")
    p.add_argument("--no-data", action="store_true", help="skip the data start-up measurement")
    p.add_argument("--csv", help="also write the results to this CSV file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cemlab bench train", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--warmup, --steps and --rounds must be at least 1")

    config = args.config or (str(DEFAULT_CONFIG) if DEFAULT_CONFIG.is_file() else None)
    overrides = list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        config, overrides = None, [config, *overrides]
    try:
        cfg = load_run_config(config, overrides)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"cemlab bench train: {e}", file=sys.stderr)
        return 2

    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    accelerator, precision = accelerator_and_precision(cfg)
    plan, data = _setup(cfg, args.warmup + args.steps + 1)
    device = torch.cuda.get_device_name() if accelerator == "gpu" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"config: {config or 'built-in defaults'} {' '.join(overrides)}".rstrip())

    print(f"run: {run_name(cfg)}; "
          f"batch {plan.batch_size} x {plan.seq_len} tokens, micro-batch {plan.micro_batch_size} "
          f"(accumulation {plan.accumulation}); {precision} on {device}; compile={cfg.train.compiles(accelerator)}")
    # On a GPU the wall clock is the measure; on the CPU the process's CPU time, which other work
    # on a shared machine inflates less (exact with one torch thread).
    which = 0 if accelerator == "gpu" else 1
    unit = "wall" if which == 0 else "CPU"
    bare, light, ratios, loss_gap = [], [], [], 0.0
    for r in range(args.rounds):
        result = paired_round(cfg, plan, data, args.warmup, accelerator, precision)
        for runs, timed in ((bare, result.bare), (light, result.light)):
            runs.append(tuple(statistics.fmean(s[i] for s in timed) for i in (0, 1)))
        loss_gap = max(loss_gap, *(abs(a - b) / abs(a) for a, b in zip(result.bare_loss, result.light_loss)))
        ratios.append(light[-1][which] / bare[-1][which])
        print(f"  round {r + 1}: bare {bare[-1][which] * 1e3:.1f} ms, "
              f"lightning {light[-1][which] * 1e3:.1f} ms of {unit} time per step: {ratios[-1] - 1:+.1%}")
    overhead = statistics.median(ratios) - 1
    rows = []
    for name, runs in (("bare PyTorch loop", bare), ("cemlab Lightning step", light)):
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        rows.append((name, plan.tokens_per_step / wall, wall * 1e3, cpu * 1e3))
    print(f"\n{'loop':<24}{'tokens/s':>12}{'wall ms/step':>14}{'CPU ms/step':>13}")
    for name, tps, ms, cms in rows:
        print(f"{name:<24}{tps:>12,.0f}{ms:>14.1f}{cms:>13.1f}")
    per_micro = statistics.median(lt[which] - b[which] for b, lt in zip(bare, light)) / plan.accumulation
    print(f"Lightning overhead: {overhead * 100:+.1f}% per optimizer step ({unit} time, median of {args.rounds} "
          f"rounds, each {min(ratios) - 1:+.1%} .. {max(ratios) - 1:+.1%}; target <= 5%), "
          f"{per_micro * 1e3:.2f} ms per micro-batch")
    print(f"same work: the two loops' training losses at the same steps differ by at most {loss_gap:.1e} (relative)")
    startup = [] if args.no_data else data_startup(cfg)
    for i, (hit, seconds, wall) in enumerate(startup, 1):
        print(f"data start-up, run {i}: {'cache hit' if hit else 'cache miss'}: {seconds:.2f}s in prepare_data "
              f"({wall:.1f}s for the whole process)")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["measure", "value", "unit"])
            for name, tps, ms, cms in rows:
                w.writerow([f"{name} tokens/s", f"{tps:.1f}", "tokens/s"])
                w.writerow([f"{name} CPU time per step", f"{cms:.2f}", "ms"])
            w.writerow(["lightning overhead", f"{overhead:.4f}", "fraction"])
            w.writerow(["lightning cost per micro-batch", f"{per_micro * 1e3:.3f}", "ms"])
            for i, (hit, seconds, wall) in enumerate(startup, 1):
                w.writerow([f"data start-up run {i} ({'hit' if hit else 'miss'})", f"{seconds:.3f}", "s"])
        print(f"wrote {args.csv}")
    print(json.dumps({"bare_tokens_per_s": rows[0][1], "lightning_tokens_per_s": rows[1][1], "overhead": overhead,
                      "overhead_rounds": [r - 1 for r in ratios], "lightning_ms_per_micro_batch": per_micro * 1e3}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
