"""A preconditioner kind added from outside cemlab, touching no file of the package:
P_k = softplus(c_k) * I, one learned scalar per head (per layer for the MLP).

Registered on import; ``CEMLAB_PLUGINS=plugins.scalar_precond`` (with ``tests/`` on PYTHONPATH)
makes every process of a sweep import it. It does not fold into CEM attention's output
projection, so attention takes the base class's general path (``Preconditioner.output``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cemlab.models.preconditioners import PRECONDITIONERS, Preconditioner

#: softplus(INIT) = 1: the layer starts as the unpreconditioned step.
INIT = 0.5413248546129181


@PRECONDITIONERS.register("scalar")
class ScalarPreconditioner(Preconditioner):
    """P_k = softplus(c_k) I. ``c`` is [n, 1]: a 2-D parameter that is not a weight matrix, so it
    gets no weight decay only because ``decayed()`` (the default: none) says so."""

    kind = "scalar"

    def __init__(self, n: int, dim: int, rank: int = 4, init_std: float = 0.02):
        super().__init__(n, dim, rank, init_std)
        self.c = nn.Parameter(torch.full((n, 1), INIT))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.c.fill_(INIT)

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return F.softplus(self.c) * y  # [n, 1] against [..., n, D]

    def dense(self) -> torch.Tensor:
        eye = torch.eye(self.dim, dtype=self.c.dtype, device=self.c.device)
        return F.softplus(self.c)[:, :, None] * eye
