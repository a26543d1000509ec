"""The training progress bar (``cemlab.train.callbacks.ProgressBar``) is redrawn once per optimizer
step, not after every micro-batch: a redraw costs about as much CPU as Lightning's own loop per
micro-batch, and between optimizer steps nothing it shows changes."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from cemlab.tracking import schema
from cemlab.train.callbacks import ProgressBar
from cemlab.train.trainer import quiet_lightning
from train_support import Linear


class LatestStep(L.Callback):
    """Stands in for the run callback: the step and loss after each optimizer step."""

    def __init__(self, plan):
        self.plan, self.latest = plan, {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.latest.update(step=trainer.global_step, **{schema.TRAIN_LOSS: float(outputs["loss"])})


class RecordingBar(ProgressBar):
    def __init__(self, run_callback):
        super().__init__(run_callback)
        self.drawn: list[tuple[int, int]] = []  # (micro-batches on the bar, step shown)

    def get_metrics(self, trainer, pl_module):
        metrics = super().get_metrics(trainer, pl_module)
        self.drawn.append((self.train_progress_bar.n, metrics.get("step")))
        return metrics


def test_bar_is_redrawn_once_per_optimizer_step_with_that_steps_numbers(capsys):
    accumulation, steps = 4, 3
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(accumulation * steps * 2, 3), torch.randn(accumulation * steps * 2, 1))
    latest = LatestStep(SimpleNamespace(accumulation=accumulation))
    bar = RecordingBar(latest)
    with quiet_lightning():
        trainer = L.Trainer(accelerator="cpu", max_steps=steps, max_epochs=1, accumulate_grad_batches=accumulation,
                            logger=False, enable_checkpointing=False, enable_model_summary=False,
                            callbacks=[latest, bar], limit_val_batches=0, num_sanity_val_steps=0)
        trainer.fit(Linear(), train_dataloaders=DataLoader(data, batch_size=2))
    assert trainer.global_step == steps
    during = [(n, step) for n, step in bar.drawn if n < accumulation * steps]
    assert during == [(accumulation * s, s) for s in range(1, steps)]
    assert bar.drawn[-1] == (accumulation * steps, steps)
    assert f"step={steps}" in capsys.readouterr().out
