"""Training: one run from a config to a finished MLflow run (Lightning).

- ``train(run_config, ...) -> RunResult`` (:mod:`cemlab.train.run`, one function per step): what
  ``cemlab train`` and the sweep runner call; ``RunResult`` (:mod:`cemlab.train.result`): what a
  run ended with; :mod:`cemlab.train.run_action`: reuse, record, resume or run, asked of the store.
- :mod:`cemlab.train.plan`: token budget, steps, accumulation, schedule, weight-decay groups.
- :mod:`cemlab.train.trainer`: the Lightning ``Trainer``, accelerator and precision.
- the task's training-time object (model, loss, metrics) comes from its module in
  :mod:`cemlab.tasks` (``task_of(cfg).build(cfg)``).
- :mod:`cemlab.train.data`: the task's datasets and the resumable data order.
- :mod:`cemlab.train.module`: the LightningModule; :mod:`cemlab.train.callbacks`: metrics,
  validation, checkpoints, progress; :mod:`cemlab.train.checkpoint`: atomic checkpoint files.
- its settings are the ``train:`` section of the run config, ``TrainConfig`` in :mod:`cemlab.config`.

Importing this package is cheap; torch and Lightning load when ``train`` is first used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train", "RunResult", "describe"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from cemlab.train.run import train

        return train
    if name == "RunResult":
        from cemlab.train.result import RunResult

        return RunResult
    if name == "describe":
        from cemlab.train.plan import describe

        return describe
    raise AttributeError(f"module 'cemlab.train' has no attribute {name!r}")
