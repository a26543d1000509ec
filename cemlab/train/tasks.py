"""The runtime side of the two tasks cemlab trains: the model, its loss and its metrics.

The task registry (:mod:`cemlab.tasks`) owns each task's facts (unit, metric names, data) and
builds these objects (``Task.build``); this module does not import it, since the registry imports
this one.

* ``lm`` (:class:`LanguageModelTask`): a causal LM from ``cfg.model``; next-token cross entropy;
  perplexity ``exp(mean NLL per token)``; model FLOPs per token from
  ``cemlab.models.flops_per_token``; energies of every CEM sublayer.
* ``gp`` (:class:`GPTask`, paper Table 3): the recursive CEM MLP regressor from ``cfg.gp``; mean
  squared error; RMSE; FLOPs per example; energies of its CEM MLP layers.

Both expose the same small interface to the Lightning module: ``loss`` (mean over the batch),
``eval_sums`` (exact sums, so that metrics over many batches and ranks are exact),
``metrics_from_sums``, ``energy_trace`` and ``recursion_steps`` for test-time recursion.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from cemlab.config import RunConfig
from cemlab.tracking import schema


class LanguageModelTask:
    metric = "ppl"            # the headline entry of metrics_from_sums: val/ppl, test/ppl
    energy_batch_size = 4     # validation sequences the energy traces are taken on

    def __init__(self, cfg: RunConfig):
        from cemlab.models import build_model

        self.cfg = cfg
        self.model = build_model(cfg.model)

    # -- loss and metrics ---------------------------------------------------------------------
    @staticmethod
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    @staticmethod
    def eval_sums(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        nll = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1), reduction="sum")
        return nll.double(), y.numel()

    @staticmethod
    def metrics_from_sums(total: float, count: int) -> dict[str, float]:
        loss = total / count
        return {"loss": loss, "ppl": math.exp(loss) if loss < 700 else float("inf")}

    # -- facts --------------------------------------------------------------------------------
    def static_metrics(self, seq_len: int) -> dict[str, float]:
        from cemlab.models import count_parameters, flops_per_token

        counts = count_parameters(self.model)
        return {
            schema.PARAMS_TOTAL: counts["total"], schema.PARAMS_ATTENTION: counts["attention"],
            schema.PARAMS_MLP: counts["mlp"], schema.PARAMS_EMBEDDING: counts["embedding"],
            schema.PARAMS_HEAD: counts["head"],
            schema.FLOPS_PER_TOKEN: flops_per_token(self.cfg.model, seq_len)["train"],
        }

    def train_flops_per_unit(self, seq_len: int) -> float:
        from cemlab.models import flops_per_token

        return flops_per_token(self.cfg.model, seq_len)["train"]

    # -- CEM recursion ------------------------------------------------------------------------
    def recursion_T(self) -> int | None:
        """The training recursion steps T of the CEM sublayers (None for a model without any)."""
        m = self.cfg.model
        steps = [s for s, kind in ((m.attn_steps, m.attention), (m.mlp_steps, m.mlp)) if kind == "cem"]
        return max(steps) if steps else None

    @contextmanager
    def recursion_steps(self, steps: int):
        m = self.cfg.model
        with self.model.recursion_steps(attn=steps if m.attention == "cem" else None,
                                        mlp=steps if m.mlp == "cem" else None):
            yield

    def energy_trace(self, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        return self.model.energy_trace(x)

    def step_sizes(self) -> dict[tuple[str, int], list[float]]:
        """eta_t of every CEM sublayer's steps (fixed, 1/T or learned), by (sublayer, layer)."""
        return {(name, i): sub.step_sizes() for name, i, sub in self.model.cem_sublayers()}

    def description(self) -> str:
        """The run's MLflow description: what each CEM sublayer's step is (see ``step_description``)."""
        return step_description(self.cfg.model)


def step_description(m) -> str:
    """One line per CEM sublayer: steps, step size, total step, where the state starts, and whether
    the step is the gradient of the stated energy (a KQ diagonal in the scores only is not)."""
    lines = []
    for sub, kind, T, eta in (("attention", m.attention, m.attn_steps, m.attn_eta), ("MLP", m.mlp, m.mlp_steps,
                                                                                        m.mlp_eta)):
        if kind != "cem":
            continue
        total = {"1/T": "1", "learned": "learned, initialised to 1"}.get(eta) if isinstance(eta, str) else \
            f"{T * float(eta):g}"
        lines.append(f"CEM {sub}: T={T} steps of eta={eta} (total step T*eta = {total}), x0={m.cem_x0}.")
    if m.attention == "cem" and m.kq_diagonal != "none" and not m.exact_energy_gradient:
        lines.append("Score-only KQ diagonal (Algorithm 1): the attention step is NOT the gradient of the stated "
                     "energy, so the energy need not fall along the recursion (exact_energy_gradient=true makes it so).")
    return " ".join(lines)


class GPTask:
    metric = "rmse"
    energy_batch_size = 256   # validation examples the energy traces are taken on

    def __init__(self, cfg: RunConfig):
        from cemlab.models.gp import build_gp_model
        self.cfg = cfg
        self.gp = cfg.gp
        self.model = build_gp_model(self.gp)

    @staticmethod
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.float(), y.float())

    @staticmethod
    def eval_sums(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
        return ((out.double() - y.double()) ** 2).sum(), y.numel()

    @staticmethod
    def metrics_from_sums(total: float, count: int) -> dict[str, float]:
        mse = total / count
        return {"loss": mse, "rmse": math.sqrt(mse)}

    def static_metrics(self, seq_len: int) -> dict[str, float]:
        from cemlab.models.gp import count_parameters, flops_per_example

        counts = count_parameters(self.model)
        return {schema.PARAMS_TOTAL: counts["total"], schema.PARAMS_MLP: counts["cem"],
                schema.FLOPS_PER_EXAMPLE: flops_per_example(self.gp)["forward"]}

    def train_flops_per_unit(self, seq_len: int) -> float:
        from cemlab.models.gp import flops_per_example

        return flops_per_example(self.gp)["train"]

    def recursion_T(self) -> int:
        return self.gp.steps

    @contextmanager
    def recursion_steps(self, steps: int):
        with self.model.recursion_steps(steps):
            yield

    def step_sizes(self) -> dict[tuple[str, int], list[float]]:
        return {}

    def description(self) -> str:
        return ""

    def energy_trace(self, x: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        trace = self.model.energy_trace(x)  # [n_layers, T+1]
        return {("mlp", i): trace[i].cpu() for i in range(trace.shape[0])}


def test_recursion_list(cfg: RunConfig, T: int | None) -> list[int]:
    """Recursion steps tried at test time: ``train.test_recursion_steps`` or 1..2T (none for a
    model without CEM sublayers)."""
    if T is None:
        return []
    return sorted(set(cfg.train.test_recursion_steps or range(1, 2 * T + 1)))

