"""What a run will do before it does it: token budget, steps, gradient accumulation, schedule,
and which parameters get weight decay (paper Table 2).

* Budget: ``train.tokens = "chinchilla"`` is 20 tokens per parameter of the *matched Llama
  baseline* (``ModelConfig.matched_baseline()``), embedding and head included, so that a CEM
  variant trains on exactly the tokens of its baseline; an integer is a fixed number of tokens.
  For the GP task (``task: gp``) the unit is one example instead of one token, and the
  parameters are those of the regressor itself.
* Steps: ``ceil(budget / (batch_size * seq_len))`` optimizer steps, capped by ``train.max_steps``.
* Accumulation: ``batch_size / (micro_batch_size * world_size)`` micro-batches per step.
* Schedule: linear warmup over ``warmup_frac`` of the steps, then cosine decay from ``lr`` to
  ``lr * final_lr_factor`` at the last step (:func:`lr_factor`), stepped once per optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from cemlab.config import ConfigError, RunConfig
from cemlab.tasks import task_of
from cemlab.tracking.mlflow_run import run_name

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: Chinchilla-optimal tokens per parameter (Hoffmann et al. 2022; the paper's Table 2).
CHINCHILLA_TOKENS_PER_PARAM = 20


@dataclass(frozen=True)
class TrainPlan:
    """The numbers a run is planned with (all in optimizer steps, sequences and tokens)."""

    seq_len: int                 # tokens per sequence (1 for the GP task: one example)
    batch_size: int              # sequences per optimizer step, all ranks together
    micro_batch_size: int        # sequences per forward pass on one rank
    world_size: int
    accumulation: int            # micro-batches per optimizer step on one rank
    budget: int                  # tokens (GP: examples) the budget asks for
    budget_params: int           # parameters the Chinchilla rule counted (0 for a fixed budget)
    total_steps: int             # optimizer steps actually run (budget, capped by max_steps)
    warmup_steps: int
    tokens_per_step: int         # batch_size x seq_len
    tokens: int                  # tokens (GP: examples) the run will have seen at its last step

    def to_dict(self) -> dict:
        return asdict(self)


def make_plan(cfg: RunConfig, world_size: int = 1) -> TrainPlan:
    """The run's plan; a config that cannot be planned raises ``ConfigError`` naming the field."""
    t = cfg.train
    task = task_of(cfg)
    seq_len = task.seq_len(cfg)
    per_step = t.micro_batch_size * world_size
    if t.batch_size % per_step:
        raise ConfigError(
            f"train.batch_size={t.batch_size} is not a multiple of train.micro_batch_size={t.micro_batch_size} "
            f"x {world_size} devices; choose a batch size divisible by {per_step}"
        )
    if t.tokens == "chinchilla":
        params = task.budget_parameters(cfg)
        budget = CHINCHILLA_TOKENS_PER_PARAM * params
    else:
        params, budget = 0, int(t.tokens)
        if budget < 1:
            raise ConfigError(f"train.tokens={t.tokens} must be 'chinchilla' or a positive number of tokens")
    steps = max(1, math.ceil(budget / (t.batch_size * seq_len)))
    if t.max_steps is not None:
        steps = min(steps, t.max_steps)
    return TrainPlan(
        seq_len=seq_len, batch_size=t.batch_size, micro_batch_size=t.micro_batch_size, world_size=world_size,
        accumulation=t.batch_size // per_step, budget=budget, budget_params=params, total_steps=steps,
        warmup_steps=int(round(t.warmup_frac * steps)), tokens_per_step=t.batch_size * seq_len,
        tokens=steps * t.batch_size * seq_len,
    )


def describe(cfg: RunConfig, world_size: int = 1) -> dict:
    """The plan of a config without training (for ``cemlab train --dry-run`` and the sweep planner)."""
    plan = make_plan(cfg, world_size)
    return {"run_name": cfg.tracking.run_name or run_name(cfg), "config_hash": cfg.hash(), **plan.to_dict()}


def lr_factor(step: int, total_steps: int, warmup_steps: int, final_factor: float) -> float:
    """Multiplier of the peak learning rate for optimizer step ``step`` (0-based).

    Warmup: ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps. Then cosine from 1
    at the first step after warmup to ``final_factor`` at the last step (``total_steps - 1``):
    ``final + (1 - final) * (1 + cos(pi * p)) / 2``, ``p = (step - warmup) / (total - warmup - 1)``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = total_steps - warmup_steps - 1
    p = min(1.0, (step - warmup_steps) / span) if span > 0 else 1.0
    return final_factor + (1.0 - final_factor) * 0.5 * (1.0 + math.cos(math.pi * p))


def decay_groups(model: "nn.Module") -> tuple[list[str], list[str]]:
    """Names of the parameters with and without weight decay.

    Decay on weight matrices only (projections, embedding, head, and what a preconditioner's kind
    says in ``Preconditioner.decayed``: the low-rank factors U, V of dplr). No decay on RMSNorm
    weights, biases, the rest of a preconditioner (the diagonal ``p``), KQ diagonals ``kq_diag``
    and the self-token biases ``self_bias`` (2-D parameters that are not matrices, so they are
    found by the module that owns them)."""
    from cemlab.models.cem import CEMAttention
    from cemlab.models.common import RMSNorm
    from cemlab.models.preconditioners import Preconditioner

    exempt: set[int] = set()
    for mod in model.modules():
        if isinstance(mod, RMSNorm):
            exempt.add(id(mod.weight))
        elif isinstance(mod, Preconditioner):
            decayed = {id(p) for p in mod.decayed()}
            exempt.update(id(p) for p in mod.parameters() if id(p) not in decayed)
        elif isinstance(mod, CEMAttention):
            exempt.update(id(p) for p in (mod.kq_diag, mod.self_bias) if p is not None)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or id(p) in exempt else decay).append(name)
    return decay, no_decay


def duration(s: float | None) -> str:
    """``42s``, ``3m05s``, ``1h07m``; ``-`` for None. Here, not beside the callbacks that print it, so
    that the sweep table uses it without importing Lightning (``cemlab sweep`` names a dead store fast)."""
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
