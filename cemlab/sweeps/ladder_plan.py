"""A sweep's ladder before it runs: each rung's tokens, steps, trials, FLOPs, epochs of the corpus
and time on this machine (``cemlab plan NAME --ladder``), and the checks that refuse a rung before
any trial (``cemlab sweep NAME --ladder``). The rungs themselves are scales of the sweep
(``cemlab.sweeps.sweepfile.ladder_section``); each runs as an ordinary sweep at its scale.

Refused, with the number: a rung too short for its warm-up (fewer than one warm-up step: the
schedule would start at the peak rate), and a rung whose tokens exceed ``MAX_EPOCHS`` passes over
the corpus's training split (a long rung on a small offline corpus measures memorisation).

The time estimate (``RungPlan.seconds``) gives each trial its FLOPs over ``CPU_FLOPS_PER_S``, plus
``TRIAL_FIXED_S`` (worker, MLflow, test, the last validation) and ``STEP_OVERHEAD_S`` per optimizer
step (the periodic validation, step logging, checkpoints); runs each look's trials in the order they
are submitted, each on the first of the rung's slots that frees (the CPUs over a trial's CPUs), one
look after another; and adds ``RUNG_DRIVER_S`` for the driver. A planning number for a CPU like
this project's, not a promise for another machine (docs/ladder.md, "How the plan times a rung").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.sweeps.sweepfile.load import SweepSpec, load_sweep
from cemlab.sweeps.sweepfile.tuning_section import family_of

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from cemlab.sweeps.plan import Plan

#: Training FLOP/s of one one-thread trial on this project's 2-core machines: the ladder's
#: width (workstation 86m, batch 16 x 256) trained Llama at 32.1k tokens/s (44 GFLOP/s) and CEM
#: attention T=2 at 17.9k tokens/s (46 GFLOP/s), 2026-11-27; the tiny main job's 18 trials ran at
#: 52 GFLOP/s on an AMD EPYC (docs/performance-history.md's stage tables). The ladder's top rung, two trials at once for
#: 74 minutes, trained at 40 GFLOP/s per trial (3.35e14 FLOPs in 8,362 s of training slot-time, Intel Xeon); the
#: four rungs' latest idle runs with bracketing at 39.8 GFLOP/s pooled (``docs/ladder-stages.csv``, AMD EPYC).
CPU_FLOPS_PER_S = 40e9
#: Seconds per trial besides training, ``TRIAL_FIXED_S + STEP_OVERHEAD_S x`` its optimizer steps, at the
#: ladder's width: the least-squares line (8.25 s + 2.37 ms per step) through each rung run's
#: slot-seconds per trial outside training (every per-trial stage but training), measured idle on this
#: project's 2-core machine (``docs/ladder-stages.csv``, the latest run of each rung;
#: ``tests/test_ladder_plan_time.py`` recomputes both from it). The test split and test-time curve are
#: most of the fixed part (5.3-7.4 s); validation and checkpoints every 200 steps most of the per-step
#: part. One figure for all rungs (11 s, measured at the cheapest rung) was used before: too much for
#: the short rungs (rung 0.3125 came in 15% under it), too little for the long one.
TRIAL_FIXED_S = 8.2
STEP_OVERHEAD_S = 0.0024
#: Wall seconds of a rung's driver besides its trials (its start, the sweep file and store, Ray's start
#: and shutdown, the finish): 20.1-27.0 s in the runs of ``docs/ladder-stages.csv``, 22.7 on average.
RUNG_DRIVER_S = 23.0
#: Passes over the corpus's training split a rung may make; above it the rung is refused.
MAX_EPOCHS = 8.0


@dataclass
class RungPlan:
    """One rung: its scale's plan and what the ladder adds."""

    rung: float                  # tokens per parameter of the matched Llama
    scale: str                   # the rung's scale name
    plan: "Plan"
    tokens: int                  # tokens per trial (the matched Llama's budget)
    steps: int                   # optimizer steps per trial
    warmup_steps: int
    train_tokens: int | None     # tokens in the corpus's training split (None: not known)
    slots: int                   # trials at once on this machine
    cells: int = 0

    @property
    def trials(self) -> int:
        return len(self.plan.rows)

    @property
    def min_trials(self) -> int:
        """The fewest trials the rung runs: its selection stage, or at a rung with a confirmation stage
        its budget (the stage spends it to within one seed of its pairs), or the selection's fewest
        plus the stage's ``fresh`` trials where that is more."""
        least = self.plan.min_trials
        return least + self.plan.confirmation_trials(least)

    @property
    def max_trials(self) -> int:
        return self.plan.max_trials

    def _flops_of(self, trials: int) -> float:
        """FLOPs of ``trials`` of the rung's trials at their mean (the plan's total over its rows)."""
        return self.plan.total_flops * trials / max(1, self.trials)

    @property
    def min_flops(self) -> float:
        return self._flops_of(self.min_trials)

    @property
    def flops(self) -> float:
        return self.plan.total_flops

    @property
    def max_flops(self) -> float:
        return self._flops_of(self.max_trials)

    @property
    def epochs(self) -> float:
        return self.tokens / self.train_tokens if self.train_tokens else math.nan

    def seconds(self, most: bool = False) -> float:
        """Wall-time estimate on this machine: the fewest trials the rung can run (``Plan.min_trials``)
        or, ``most``, every cell open to the last look; each look's trials packed onto the slots
        (:func:`makespan`), one look after another, and the driver."""
        return RUNG_DRIVER_S + sum(makespan(look, self.slots) for look in self.look_seconds(most))

    def look_seconds(self, most: bool = False) -> list[list[float]]:
        """Each look's trials as slot-seconds (:func:`trial_seconds` of its family's FLOPs), in the order
        the sweep submits them: the looks the plan counts (``Plan.family_looks``); then, at a rung with
        a confirmation stage, the fresh seeds that fill its budget (the stage spends it to within one
        seed of its pairs, whichever cells the selection picks), at least its ``fresh`` trials, each at
        the grid's mean trial."""
        each = {family_of(r.trial): trial_seconds(r.flops or 0.0, self.steps) for r in self.plan.rows}
        looks = [[each[f] for f in look] for look in self.plan.family_looks(most)]
        if looks:
            mean = sum(looks[0]) / len(looks[0])
            looks.append([mean] * self.plan.confirmation_trials(sum(len(look) for look in looks)))
        return [look for look in looks if look]

    def done(self) -> int:
        return sum(1 for r in self.plan.rows if r.status == "done")

    def as_dict(self) -> dict[str, Any]:
        return {"rung": self.rung, "scale": self.scale, "tokens": self.tokens, "steps": self.steps,
                "warmup_steps": self.warmup_steps, "cells": self.cells, "trials": self.trials,
                "min_trials": self.min_trials, "max_trials": self.max_trials, "flops": self.flops,
                "min_flops": self.min_flops, "max_flops": self.max_flops,
                "epochs": None if math.isnan(self.epochs) else self.epochs, "train_tokens": self.train_tokens,
                "slots": self.slots, "seconds": self.seconds(), "max_seconds": self.seconds(most=True),
                "looks": self.plan.looks, "seeding": self.plan.seeding(), "bracketing": self.plan.bracketing(),
                "done": self.done()}


@dataclass
class LadderPlan:
    sweep: str
    base_scale: str
    size: str
    rungs: list[RungPlan] = field(default_factory=list)
    store: str | None = None
    #: ``ladder.carry``: the rungs above the first start each cell from its carried rates, which the plan,
    #: reading no rung below, does not know: it counts them at the lr axis
    carry: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "scale": self.base_scale, "size": self.size, "store": self.store,
                **({"carry": True} if self.carry else {}),
                "cpu_flops_per_s": CPU_FLOPS_PER_S, "trial_fixed_s": TRIAL_FIXED_S,
                "step_overhead_s": STEP_OVERHEAD_S, "rung_driver_s": RUNG_DRIVER_S, "max_epochs": MAX_EPOCHS,
                "rungs": [r.as_dict() for r in self.rungs],
                "seconds": sum(r.seconds() for r in self.rungs),
                "max_seconds": sum(r.seconds(most=True) for r in self.rungs)}


def trial_seconds(flops: float, steps: int) -> float:
    """Slot-seconds of one trial on this machine: training at ``CPU_FLOPS_PER_S`` and what surrounds it."""
    return flops / CPU_FLOPS_PER_S + TRIAL_FIXED_S + STEP_OVERHEAD_S * steps


def makespan(seconds: list[float], slots: int) -> float:
    """Wall seconds of trials started in this order, each on the first of ``slots`` to free (as Ray
    Tune runs a look at a fixed number of trials at once): a look's last trials may leave slots idle."""
    free = [0.0] * max(1, slots)
    for s in seconds:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def ladder_of(spec: SweepSpec):
    if spec.ladder is None:
        raise SweepError(f"{spec.source}: this sweep has no ladder; add a ladder: section (see "
                         f"sweeps/recursion_ablation.yaml and docs/ladder.md) or run it without --ladder/--rung")
    return spec.ladder


def rung_scales_to_run(spec: SweepSpec, rung: str | None = None) -> list[str]:
    """The rungs' scale names, cheapest first; ``rung``: only the one it names (tokens per
    parameter, or the scale name), refused naming the rungs there are."""
    ladder = ladder_of(spec)
    if rung is None:
        return list(spec.rungs())
    return [ladder.rung_name(ladder.find(rung, spec.source))]


def trial_budget(trial) -> tuple[int, int]:
    """Training tokens and optimizer steps of a trial (``cemlab.train.plan.make_plan``)."""
    from cemlab.train.plan import make_plan

    plan = make_plan(trial.config, world_size=trial.resources.workers)
    return plan.tokens, plan.total_steps


def corpus_train_tokens(trial, note: Callable[[str], None] | None = None) -> int | None:
    """Tokens in the training split of a trial's corpus (tokenised into the token store, once, when
    it is not there yet: ``note`` is told so first, in one line); None for a task without a
    prepared corpus."""
    from cemlab.data import prepare_data
    from cemlab.data.errors import DataError
    from cemlab.data.store import READ_ONLY_ENV, read_only
    from cemlab.paths import cache_dir
    from cemlab.tasks import task_of

    cfg = trial.config
    task = task_of(cfg)
    if not task.prepared_data:
        return None
    args = (cfg.data, cfg.model.vocab_size, task.seq_len(cfg))
    if read_only():  # tokenising is forbidden here: the store has the corpus or this raises
        return int(prepare_data(*args).stats["tokens"]["train"])
    before = os.environ.get(READ_ONLY_ENV)
    os.environ[READ_ONLY_ENV] = "1"  # the store's own check of whether the corpus is there yet
    try:
        bundle = prepare_data(*args)
    except DataError:  # not there yet (or a bad data setting, which the call below raises again)
        bundle = None
    finally:
        if before is None:
            os.environ.pop(READ_ONLY_ENV, None)
        else:
            os.environ[READ_ONLY_ENV] = before
    if bundle is None:
        if note is not None:
            where = cfg.data.cache_dir or cache_dir()
            note(f"tokenising the corpus once, into {where}/data, to count the rungs' epochs")
        bundle = prepare_data(*args)
    return int(bundle.stats["tokens"]["train"])


def plan_ladder(sweep: str | SweepSpec, rung: str | None = None, client: "MlflowClient | None" = None,
                read_store: bool = True, overrides: list[str] | None = None, corpus: bool = True,
                cpus: int | None = None, mfu: float | None = None,
                note: Callable[[str], None] | None = None) -> LadderPlan:
    """Each rung's plan (``cemlab.sweeps.plan.plan_sweep`` at the rung's scale, made by
    ``plan_scales``) with its epochs and time; raises ``SweepError`` for a rung too short for its
    warm-up or too long for its corpus (``corpus=False``: the corpus is not read and its epochs are
    not checked; ``note``: told in one line before the corpus is tokenised)."""
    from cemlab.sweeps.plan import DEFAULT_MFU, plan_scales
    from cemlab.train.plan import make_plan

    spec = sweep if isinstance(sweep, SweepSpec) else load_sweep(sweep)
    ladder = ladder_of(spec)
    out = LadderPlan(spec.name, ladder.scale, ladder.size, carry=ladder.carry)
    cpus = cpus or os.cpu_count() or 1
    train_tokens: int | None = None
    scales = rung_scales_to_run(spec, rung)
    plans = plan_scales(spec, scales, client=client, mfu=DEFAULT_MFU if mfu is None else mfu, read_store=read_store,
                        overrides=overrides)
    for scale, plan in zip(scales, plans):
        out.store = plan.store
        if not plan.rows:
            raise SweepError(f"{spec.source}: ladder rung {spec.rungs()[scale]:g} has no trials (ladder.exclude or "
                             f"the overrides leave none)")
        first = plan.rows[0].trial
        tp = make_plan(first.config, world_size=first.resources.workers)
        if corpus and train_tokens is None:
            train_tokens = corpus_train_tokens(first, note)
        slots = max(1, int(cpus // max(first.resources.cpus, 1e-9)))
        rp = RungPlan(spec.rungs()[scale], scale, plan, tp.tokens, tp.total_steps, tp.warmup_steps, train_tokens,
                      slots, cells=len({(r.trial.variant, r.trial.size) for r in plan.rows}))
        check_rung(spec, rp)
        out.rungs.append(rp)
    return out


def check_rung(spec: SweepSpec, rp: RungPlan) -> None:
    """A rung that cannot be run as planned: too short for one warm-up step, or more than
    ``MAX_EPOCHS`` passes over the corpus."""
    where = f"{spec.source}: ladder.rungs: {rp.rung:g} tokens per parameter"
    if rp.warmup_steps < 1:
        frac = rp.plan.rows[0].trial.config.train.warmup_frac
        need = math.ceil(0.5 / frac) if frac > 0 else None
        raise SweepError(f"{where} gives {rp.steps} optimizer steps ({rp.tokens} tokens at "
                         f"{rp.tokens // max(1, rp.steps)} per step), too few for the warm-up (train.warmup_frac="
                         f"{frac:g} of them rounds to 0 steps)" + (f"; a rung needs at least {need} steps: raise the "
                         f"rung or lower train.batch_size in ladder.set" if need else ""))
    if rp.train_tokens and rp.epochs > MAX_EPOCHS:
        raise SweepError(f"{where} asks for {rp.tokens} tokens, {rp.epochs:.1f} epochs of the corpus's "
                         f"{rp.train_tokens} training tokens (at most {MAX_EPOCHS:g}); lower the rung or the ladder's "
                         f"size, or train on a larger corpus")
