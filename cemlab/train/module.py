"""The LightningModule that trains every cemlab model (language models and the GP regressor).

Optimisation as the paper's Table 2: AdamW (``train.lr``, betas, eps, weight decay on matrices
only, see :func:`cemlab.train.plan.decay_groups`), gradient-norm clipping, linear warmup then
cosine decay stepped per optimizer step. Lightning does the gradient accumulation
(``accumulate_grad_batches``), the precision (bf16-mixed autocast on GPU) and the devices.

Per optimizer step the module keeps the mean training loss over its micro-batches (averaged over
ranks), the learning rate and the gradient norm before clipping, for the run callback to log. The
loss and the norm are read back from the device together, after clipping: one host sync per
optimizer step, as a bare loop that checks its loss has (not one per micro-batch, nor a second
one after the optimizer step). A non-finite loss raises :class:`Diverged` before the optimizer
step, on every rank at once.

Evaluation (validation, test, test-time recursion) is :meth:`evaluate`: exact sums of the loss
over the chosen examples, reduced over ranks, turned into perplexity (or RMSE) at the end.
"""

from __future__ import annotations

import os
import random

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from cemlab.config import RunConfig
from cemlab.train.data import DataPosition
from cemlab.train.plan import TrainPlan, decay_groups, lr_factor
from cemlab.train.trainer import accelerator_and_precision

#: Test hook: a NaN loss at this optimizer step (1-based), to exercise divergence handling.
#: Read from the environment, so it never enters a config or its hash.
INJECT_NAN_ENV = "CEMLAB_INJECT_NAN_STEP"


class Diverged(RuntimeError):
    """The training loss became NaN or inf at optimizer step ``step`` (1-based)."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"training loss is {loss} at optimizer step {step}: the run diverged")
        self.step, self.loss = step, loss


class CEMLabModule(L.LightningModule):
    """Trains ``task.model`` with the settings of ``cfg.train`` along ``plan``."""

    def __init__(self, cfg: RunConfig, task, plan: TrainPlan, position: DataPosition):
        super().__init__()
        self.cfg, self.task, self.plan, self.position = cfg, task, plan, position
        self.model = task.model
        # The compiled module shares the parameters but is kept out of the module tree, so that
        # checkpoints and state dicts have the same keys with and without compilation.
        compiled = cfg.train.compiles(accelerator_and_precision(cfg)[0])
        if hasattr(self.model, "set_compiled"):  # attention kernels that need compiling (attn_kernel: auto)
            self.model.set_compiled(compiled)
        self.__dict__["_train_forward"] = torch.compile(self.model) if compiled else self.model
        inject = os.environ.get(INJECT_NAN_ENV)
        self._inject_nan_step = int(inject) if inject else None
        self._loss_sum: torch.Tensor | None = None
        self._micro = 0
        self._step_mean: torch.Tensor | None = None  # this step's mean loss over ranks, on the device
        self.step_loss: float | None = None      # mean training loss of the last optimizer step
        self.step_lr: float | None = None        # learning rate used by it
        self.grad_norm: float | None = None      # its gradient norm before clipping

    # -- training -----------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.task.loss(self._train_forward(x), y)
        if self._inject_nan_step is not None and self.global_step + 1 == self._inject_nan_step:
            loss = loss * float("nan")
        detached = loss.detach().float()
        self._loss_sum = detached if self._loss_sum is None else self._loss_sum + detached
        self._micro += 1
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        # Once per optimizer step: the mean loss of its micro-batches, over all ranks (still on the
        # device; read in configure_gradient_clipping, which Lightning calls next).
        self._step_mean = self.trainer.strategy.reduce(self._loss_sum / self._micro, reduce_op="mean")
        self._loss_sum, self._micro = None, 0
        self.step_lr = float(optimizer.param_groups[0]["lr"])

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning's own clipping, keeping the norm before clipping for the logs; then the step's
        # loss and that norm in one read-back. A NaN on any rank makes the mean NaN, so every rank
        # stops at the same step, before the optimizer changes the weights.
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        loss, self.grad_norm = torch.stack([self._step_mean.float(), norm.float()]).tolist()
        self._step_mean = None
        if not np.isfinite(loss):
            raise Diverged(self.global_step + 1, loss)
        self.step_loss = loss

    def configure_optimizers(self):
        t = self.cfg.train
        decay, no_decay = decay_groups(self.model)
        params = dict(self.model.named_parameters())
        groups = [{"params": [params[n] for n in decay], "weight_decay": t.weight_decay},
                  {"params": [params[n] for n in no_decay], "weight_decay": 0.0}]
        fused = True if next(self.model.parameters()).is_cuda else None
        optimizer = torch.optim.AdamW(groups, lr=t.lr, betas=tuple(t.betas), eps=t.eps, fused=fused)
        plan = self.plan
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_factor(s, plan.total_steps, plan.warmup_steps, t.final_lr_factor))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, dataset: Dataset, indices: list[int], batch_size: int) -> dict[str, float]:
        """Loss and metric (``ppl`` or ``rmse``) over ``dataset[indices]``, exact over all ranks.

        Runs the uncompiled model in eval mode under the trainer's precision (autocast)."""
        was_training = self.model.training
        self.model.eval()
        world, rank = self.trainer.world_size, self.trainer.global_rank
        mine = indices[rank::world]
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = torch.zeros((), dtype=torch.float64, device=self.device)
        loader = DataLoader(torch.utils.data.Subset(dataset, mine), batch_size=batch_size, shuffle=False)
        try:
            with self.trainer.precision_plugin.forward_context():
                for x, y in loader:
                    x, y = x.to(self.device), y.to(self.device)
                    s, n = self.task.eval_sums(self.model(x), y)
                    total += s
                    count += n
        finally:
            self.model.train(was_training)
        total = self.trainer.strategy.reduce(total, reduce_op="sum")
        count = self.trainer.strategy.reduce(count, reduce_op="sum")
        return self.task.metrics_from_sums(float(total), int(count))

    @torch.no_grad()
    def energy_trace(self, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        """Energy after each recursion step of every CEM sublayer on ``x`` (float32, eval mode)."""
        was_training = self.model.training
        self.model.eval()
        try:
            return self.task.energy_trace(x.to(self.device))
        finally:
            self.model.train(was_training)

    # -- checkpoint extras: data position and RNG ---------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["cemlab"] = {
            "config_hash": self.cfg.hash(),
            "data_position_steps": self.global_step,
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "numpy": _numpy_state_to_safe(np.random.get_state()),
                "python": random.getstate(),
            },
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        extra = checkpoint.get("cemlab")
        if extra is None:
            raise ValueError("this checkpoint was not written by cemlab train (no 'cemlab' section)")
        if extra["config_hash"] != self.cfg.hash():
            raise ValueError(
                f"checkpoint belongs to config hash {extra['config_hash']}, this run's config is {self.cfg.hash()}"
            )
        self.position.start_step = int(extra["data_position_steps"])
        rng = extra["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        np.random.set_state(_numpy_state_from_safe(rng["numpy"]))
        random.setstate(rng["python"])


# Checkpoints hold only types that ``torch.load(weights_only=True)`` accepts (Lightning loads them
# that way): numpy's RNG state travels as a tensor and plain numbers.
def _numpy_state_to_safe(state) -> dict:
    name, keys, pos, has_gauss, cached = state
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}


def _numpy_state_from_safe(d: dict):
    return (d["name"], d["keys"].numpy().astype(np.uint32), d["pos"], d["has_gauss"], d["cached"])
