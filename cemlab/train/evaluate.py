"""The run's evaluation after training (``cemlab.train.run.test`` calls it): the test loss and metric,
the test-time recursion curve (the metric at each recursion step count of ``train.test_recursion_steps``,
default 1..2T, on ``train.curve_batches`` test batches, default the test metric's), the energy traces of every CEM sublayer on a fixed validation batch, and how they
are logged (the curve and traces by step, the step sizes each sublayer used)."""

from __future__ import annotations

import torch

from cemlab.config import RunConfig
from cemlab.tasks import Task
from cemlab.tracking import schema
from cemlab.train.data import eval_indices


def energy_batch(dataset, indices: list[int], runtime):
    """A fixed validation batch for energy traces (``runtime.energy_batch_size`` inputs)."""
    return torch.stack([dataset[i][0] for i in indices[:runtime.energy_batch_size]])


def evaluate_on_test(cfg, trainer, module, runtime, data, plan, energy_batch, recursion_list):
    """Test loss and metric, the test-time recursion curve and the energy traces (rank zero), on the
    device the model trained on (Lightning moves it to the CPU when ``fit`` ends)."""
    module.to(trainer.strategy.root_device)
    cap = cfg.train.test_batches * plan.micro_batch_size if cfg.train.test_batches else None
    test_idx = eval_indices(len(data.test), cap)
    mb = plan.micro_batch_size
    test = module.evaluate(data.test, test_idx, mb)
    final = {f"test/{k}": v for k, v in test.items()}
    curve_idx = curve_indices(cfg, len(data.test), mb, test_idx)
    curve: dict[int, float] = {}
    T = runtime.recursion_T()
    for steps in recursion_list:
        if steps == T and curve_idx is test_idx:
            curve[steps] = test[runtime.metric]
        else:
            with runtime.recursion_steps(steps):
                curve[steps] = module.evaluate(data.test, curve_idx, mb)[runtime.metric]
    traces = module.energy_trace(energy_batch) if energy_batch is not None and trainer.is_global_zero else {}
    return final, curve, traces


def curve_indices(cfg: RunConfig, n: int, micro_batch_size: int, test_idx: list[int]) -> list[int]:
    """The test examples of the test-time curve: the test metric's own (``test_idx``, the same object,
    so that T' = T reuses the test metric) unless ``train.curve_batches`` asks for fewer; then that
    many batches evenly spaced over the split, every T' (T included) on them, so that the curve's
    ratios pair batch by batch."""
    want = cfg.train.curve_batches
    if want is None or want * micro_batch_size >= len(test_idx):
        return test_idx
    return eval_indices(n, want * micro_batch_size)


def log_test(metrics, task: Task, runtime, final, curve, traces, step: int) -> None:
    """The test metrics at the last step; the recursion curve, energy traces and step sizes by step."""
    metrics.add_many(final, step)
    for steps, value in curve.items():
        metrics.add(task.test_metric_at_steps, value, steps)
    for (sub, layer), trace in traces.items():
        for t, value in enumerate(trace.tolist()):
            metrics.add(schema.energy_metric(sub, layer), value, t)
        metrics.add(schema.energy_drop_metric(sub, layer), float(trace[0] - trace[-1]), step)
    for (sub, layer), etas in runtime.step_sizes().items():  # fixed, 1/T or the learned values at the end
        for t, eta in enumerate(etas, 1):
            metrics.add(schema.step_size_metric(sub, layer), eta, t)
        metrics.add(schema.total_step_metric(sub, layer), sum(etas), step)


def test_recursion_list(cfg: RunConfig, T: int | None) -> list[int]:
    """Recursion steps tried at test time: ``train.test_recursion_steps`` or 1..2T (none for a
    model without CEM sublayers)."""
    if T is None:
        return []
    return sorted(set(cfg.train.test_recursion_steps or range(1, 2 * T + 1)))

