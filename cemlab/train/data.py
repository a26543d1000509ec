"""Training data for one run: the datasets of a task and a data order that resumes exactly.

**Order.** The training examples are visited in an order that is a pure function of
(``train.seed``, position): position ``p`` (counted in sequences since the start of the run, all
ranks together) is example ``perm_e[p mod n]`` of the data-epoch ``e = p div n``, where ``perm_e``
is a permutation drawn from a generator seeded with ``(seed, e)``. Optimizer step ``s`` consumes
positions ``s*B ... (s+1)*B - 1`` (``B = train.batch_size``); micro-batch ``m`` on rank ``r`` takes
the ``micro_batch_size`` positions starting at ``s*B + (m*world + r)*micro_batch_size``.

So a resumed run needs only the number of optimizer steps done to continue with the very same
batches: :class:`StepBatchSampler` starts at ``start_step`` (set from the checkpoint) and its length
is always the whole run's number of micro-batches, as Lightning counts a mid-epoch restart from
the restored batch index. No global random state is used.
"""

from __future__ import annotations


import numpy as np
import torch
from torch.utils.data import Sampler

from cemlab.train.plan import TrainPlan


class DataPosition:
    """Where training starts (in optimizer steps); a checkpoint restore moves it."""

    def __init__(self) -> None:
        self.start_step = 0


class StepBatchSampler(Sampler[list[int]]):
    """Yields the micro-batches (lists of example indices) of one rank, from ``position.start_step``
    to the end of the run (see the module docstring for the order)."""

    def __init__(self, n_examples: int, plan: TrainPlan, seed: int, rank: int, position: DataPosition):
        if n_examples < 1:
            raise ValueError("the training split holds no example")
        self.n, self.plan, self.seed, self.rank, self.position = n_examples, plan, seed, rank, position
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def __len__(self) -> int:
        return self.plan.total_steps * self.plan.accumulation

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(_mix(self.seed, epoch))
            self._perm = torch.randperm(self.n, generator=g).numpy()
            self._perm_epoch = epoch
        return self._perm

    def indices(self, start: int, count: int) -> list[int]:
        """Example indices of positions ``start ... start + count - 1``."""
        out = []
        for p in range(start, start + count):
            out.append(int(self.permutation(p // self.n)[p % self.n]))
        return out

    def __iter__(self):
        plan, mb = self.plan, self.plan.micro_batch_size
        for step in range(self.position.start_step, plan.total_steps):
            for m in range(plan.accumulation):
                yield self.indices(step * plan.batch_size + (m * plan.world_size + self.rank) * mb, mb)


def _mix(seed: int, epoch: int) -> int:
    """A 63-bit generator seed from (seed, epoch), different for every pair."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & ((1 << 64) - 1)
    x ^= x >> 31
    return x & ((1 << 63) - 1)


def eval_indices(n: int, max_examples: int | None) -> list[int]:
    """All ``n`` examples, or ``max_examples`` of them evenly spaced over the split (so a capped
    evaluation still sees every part of the split, not only its first documents)."""
    if max_examples is None or max_examples >= n:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max_examples)})
