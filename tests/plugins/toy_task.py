"""A task from outside cemlab, for tests/test_extend_task.py: registered by this module alone
(named in ``CEMLAB_PLUGINS``), with a metric of its own, the mean absolute error (``mae``).

It is cheap because it borrows the GP study's regressor, data and config section (``gp:``); what
it owns is its name, its metric (key, label, format), its group and its scale section (``toy:``
in ``scales.yaml``), which is what the rest of cemlab must take from the task."""

from __future__ import annotations

import torch

from cemlab.tasks import register_task
from cemlab.tasks.gp import GPRegression, GPTraining


class ToyTraining(GPTraining):
    """The GP regressor, trained on mean squared error, judged by the mean absolute error."""

    metric = "mae"

    @staticmethod
    def eval_sums(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        return (out.double() - y.double()).abs().sum(), y.numel()

    @staticmethod
    def metrics_from_sums(total: float, count: int) -> dict[str, float]:
        return {"loss": total / count, "mae": total / count}


@register_task
class ToyRegression(GPRegression):
    name = "toy"
    title = "toy regression"
    metric = "mae"
    metric_label = "mean absolute error"
    metric_format = ".3f"
    val_metrics = ("val/mae",)
    test_metric_at_steps = "test/mae_at_steps"

    def default_group(self, cfg) -> str:
        return "toy"

    def build(self, cfg):
        return ToyTraining(cfg, self)
