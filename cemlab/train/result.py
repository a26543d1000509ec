"""``RunResult``: what one run ended with, as ``train`` returns it and ``state.json`` keeps it.

Its own module because three steps build it (training in :mod:`cemlab.train.run`, reusing or
recording a result the store or the runs folder already holds in :mod:`cemlab.train.run_action`) and
the sweep runner reads it; none of them needs the others to do so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from cemlab.tracking import schema


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


def finite(d: dict[str, Any]) -> dict[str, float]:
    """The numeric, non-NaN entries of ``d`` as floats (a result must survive JSON)."""
    return {k: float(v) for k, v in d.items() if isinstance(v, (int, float)) and not math.isnan(v)}
