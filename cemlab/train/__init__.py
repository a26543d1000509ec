"""Training: one run from a config to a finished MLflow run (Lightning).

- ``train(run_config, ...) -> RunResult`` (:mod:`cemlab.train.run`): what ``cemlab train`` and the
  sweep runner call.
- :mod:`cemlab.train.plan`: token budget, steps, accumulation, schedule, weight-decay groups.
- :mod:`cemlab.train.data`: the task's datasets and the resumable data order.
- :mod:`cemlab.train.module`: the LightningModule; :mod:`cemlab.train.callbacks`: metrics,
  validation, checkpoints, progress; :mod:`cemlab.train.checkpoint`: atomic checkpoint files.
- ``TrainConfig`` (:mod:`cemlab.train.config`): the settings.

Importing this package is cheap (``cemlab.config`` imports ``TrainConfig`` from it); torch and
Lightning load when ``train`` is first used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train", "RunResult", "describe"]


def __getattr__(name: str) -> Any:
    if name == "describe":
        from cemlab.train import plan

        return plan.describe
    if name in __all__:
        from cemlab.train import run

        return getattr(run, name)
    raise AttributeError(f"module 'cemlab.train' has no attribute {name!r}")
