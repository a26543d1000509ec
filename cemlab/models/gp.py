"""The regressor of the Gaussian-process recursion study (paper Table 3): recursive CEM MLPs.

    h = A x + a                                   input projection into the latent state, [B, latent_dim]
    for each of n_layers CEM MLP layers:          the language models' layer, ``cemlab.models.cem.CEMMLP``
        gamma = W RMSNorm(h)                      computed once per layer
        x = h; repeat T times:                    within-layer recursion (paper sec. 2.3, eq. 13)
            x = x + eta * P V^T( gamma * SiLU(V RMSNorm(x)) )
        h = x
    y_hat = b . h + c                             linear read-out

An example is a single vector, so the layers act on [B, latent_dim] directly (the element-wise
energy has no interaction between positions; no sequence axis is needed). Pure PyTorch.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from cemlab.models.cem import CEMMLP
from cemlab.models.common import init_linear_and_embedding
from cemlab.models.config import GPRegressorConfig
from cemlab.models.preconditioners import PRECONDITIONERS


class GPRegressor(nn.Module):
    """``forward(x[B, n_inputs]) -> y_hat[B]``: input projection, ``n_layers`` recursive CEM MLPs
    with ``steps`` steps each, linear read-out (see the module docstring for the equations).

    The input projection and read-out keep PyTorch's default (fan-in scaled) initialisation, since
    they map to and from a low-dimensional space; the CEM layers use Normal(0, ``init_std``) as in
    the language models."""

    def __init__(self, cfg: GPRegressorConfig):
        super().__init__()
        self.cfg = cfg
        self.input = nn.Linear(cfg.n_inputs, cfg.latent_dim)
        self.layers = nn.ModuleList(
            CEMMLP(cfg.latent_dim, cfg.cem_hidden_dim, steps=cfg.steps, eta=cfg.eta, precond=cfg.precond,
                   precond_rank=cfg.precond_rank, norm_eps=cfg.norm_eps, init_std=cfg.init_std)
            for _ in range(cfg.n_layers)
        )
        init_linear_and_embedding(self.layers, cfg.init_std)
        self.readout = nn.Linear(cfg.latent_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 2 or x.shape[1] != self.cfg.n_inputs:
            raise ValueError(
                f"GPRegressor expects inputs of shape [batch, n_inputs={self.cfg.n_inputs}], got {tuple(x.shape)}"
            )
        h = self.input(x)
        for layer in self.layers:
            h = layer(h, None)
        return self.readout(h).squeeze(-1)

    # -- recursion controls (as CausalLM) ---------------------------------------------------------
    def set_recursion_steps(self, steps: int) -> int:
        """Set the recursion steps of every CEM layer (test-time recursion); returns the previous value."""
        if steps < 1:
            raise ValueError(f"recursion steps must be >= 1, got {steps}")
        prev = self.layers[0].steps
        for layer in self.layers:
            layer.steps = int(steps)
        return prev

    @contextmanager
    def recursion_steps(self, steps: int):
        prev = self.set_recursion_steps(steps)
        try:
            yield self
        finally:
            self.set_recursion_steps(prev)

    @torch.no_grad()
    def energy_trace(self, x: torch.Tensor) -> torch.Tensor:
        """Mean element-wise energy (eq. 7) of each layer's iterate before and after each step:
        [n_layers, T+1], with gamma fixed as the recursion sees it."""
        h = self.input(x)
        rows = []
        for layer in self.layers:
            trace: list[torch.Tensor] = []
            h = layer(h, None, trace=trace)
            rows.append(torch.stack(trace))
        return torch.stack(rows).float()


def build_gp_model(cfg: GPRegressorConfig) -> GPRegressor:
    return GPRegressor(cfg)


def count_parameters(model: GPRegressor) -> dict[str, int]:
    """Parameter counts: ``total``, ``input`` (projection), ``cem`` (all CEM MLP layers, their norms
    and preconditioners included), ``cem_projections`` (W and V), ``preconditioners``, ``readout``."""
    counts = {"total": 0, "input": 0, "cem": 0, "cem_projections": 0, "preconditioners": 0, "readout": 0}
    for name, p in model.named_parameters():
        n = p.numel()
        counts["total"] += n
        part = name.split(".")[0]
        if part == "layers":
            counts["cem"] += n
            if name.endswith((".W.weight", ".V.weight")):
                counts["cem_projections"] += n
            if ".precond." in name:
                counts["preconditioners"] += n
        else:
            counts[part] += n
    return counts


def flops_per_example(cfg: GPRegressorConfig, steps: int | None = None) -> dict[str, float]:
    """Forward matmul FLOPs for one example (2 per multiply-add, as ``cemlab.models.accounting``):

    input ``2*n_in*D``; per layer ``2*D*Dv`` for gamma (once) plus, per recursion step, ``4*D*Dv``
    (``V u`` and ``V^T g``) and the preconditioner's own (``apply_flops``: ``8*D*R`` for dplr); read-out ``2*D``. Element-wise
    work (norms, SiLU, biases, the diagonal of P) is not counted. ``steps`` overrides ``cfg.steps``
    (test-time recursion). Returns ``forward``, ``train`` (= 3 x forward), ``input``, ``cem``, ``readout``."""
    T = cfg.steps if steps is None else steps
    D, Dv = cfg.latent_dim, cfg.cem_hidden_dim
    per_step = 4 * D * Dv + PRECONDITIONERS.get(cfg.precond).apply_flops(1, D, cfg.precond_rank)
    cem = cfg.n_layers * (2 * D * Dv + T * per_step)
    inp, readout = 2 * cfg.n_inputs * D, 2 * D
    forward = inp + cem + readout
    return {"forward": float(forward), "train": 3.0 * forward, "input": float(inp), "cem": float(cem),
            "readout": float(readout)}
