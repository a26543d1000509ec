"""Preconditioners P of a CEM descent step (paper sec. 2.3, eq. 12 / 13, appendix C.4).

A CEM step is x <- x + eta * P (-grad E)(u). One class per kind owns everything about P:

- its parameters (``n`` matrices of size D x D: one per head for attention, one for the MLP);
- ``apply(y)``: P_k y_k without forming a D x D matrix (the training path);
- ``dense()``: the matrices themselves, [n, D, D] (tests and reference computations);
- ``fold(W)`` / ``output(o, folded)``: how P enters CEM attention's output projection
  y = sum_k P_k Wq_k^T o_k; the base class computes it in general (Wq_k^T o_k, then ``apply``), a
  kind may fold itself into the projection (diag: scaled columns; dplr: [Dh, R] matrices);
- ``apply_flops`` / ``output_flops``: FLOPs per token for ``cemlab.models.accounting``;
- ``decayed()``: which of its parameters get weight decay (``cemlab.train.plan.decay_groups``);
- ``check_width``: what is wrong with the kind at a given width and rank (config validation).

Kinds are found by name in ``PRECONDITIONERS`` (a ``cemlab.models.registry.Registry``); a plugin
adds one with ``@PRECONDITIONERS.register("name")`` (docs/extending.md).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from cemlab.models.registry import Registry, UnknownName


class Preconditioner(nn.Module):
    """Base of every kind: ``n`` preconditioners P_1..P_n of size ``dim`` x ``dim``.

    Subclasses set ``kind``, create their parameters in ``__init__`` (and reset them in
    ``reset_parameters``), and implement ``apply`` and ``dense``. Everything else has a correct
    general default."""

    kind: ClassVar[str] = ""

    def __init__(self, n: int, dim: int, rank: int = 4, init_std: float = 0.02):
        super().__init__()
        self.n, self.dim, self.rank, self.init_std = n, dim, rank, init_std

    def reset_parameters(self) -> None:
        """Initial values (called by ``init_linear_and_embedding`` after construction)."""

    def apply(self, y: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """P_k y_k for y of shape [..., n, D] (the head axis second to last)."""
        raise NotImplementedError

    def dense(self) -> torch.Tensor:  # pragma: no cover - abstract
        """The matrices P_k themselves, [n, D, D] (for tests and analysis only)."""
        raise NotImplementedError

    # -- CEM attention's output projection: y = sum_k P_k Wq_k^T o_k (eq. 12) ---------------------
    def fold(self, W: torch.Tensor) -> tuple:
        """What ``output`` needs, computed once per layer from the per-head projections
        W = [Wq_1; ...; Wq_K], [K, Dh, D]. General path: W itself."""
        return (W,)

    def output(self, o: torch.Tensor, folded: tuple) -> torch.Tensor:
        """sum_k P_k Wq_k^T o_k for the attention outputs o [..., K, Dh] -> [..., D]. General path:
        each head's Wq_k^T o_k ([..., K, D]), then ``apply``, then the sum over heads."""
        (W,) = folded
        return self.apply(torch.einsum("...kc,kcd->...kd", o, W)).sum(-2)

    # -- accounting (2 FLOPs per multiply-add, matmuls only; see models/accounting.py) ----------
    @classmethod
    def apply_flops(cls, n: int, dim: int, rank: int) -> float:
        """Matmul FLOPs of ``apply`` on one token's [n, D] (element-wise work is not counted)."""
        return 0.0

    @classmethod
    def output_flops(cls, n_heads: int, dim: int, rank: int) -> float:
        """Matmul FLOPs per token of ``output`` beyond the plain projection o @ Wq (2 D^2)."""
        return cls.apply_flops(n_heads, dim, rank)

    # -- training and validation ----------------------------------------------------------------
    def decayed(self) -> list[nn.Parameter]:
        """The parameters that get weight decay (default: none; a preconditioner's diagonal or
        scale is not a weight matrix)."""
        return []

    @classmethod
    def check_width(cls, width: int, rank: int, width_field: str, rank_field: str) -> str | None:
        """A message saying what is wrong with this kind at ``width`` and ``rank`` (naming the config
        fields and the fix), or None when nothing is."""
        return None


PRECONDITIONERS: Registry[type[Preconditioner]] = Registry("preconditioner kind")


def preconditioner_kind(name: str, field: str) -> str:
    """``name`` if it is a registered kind; otherwise an error naming ``field`` and the kinds."""
    if name not in PRECONDITIONERS:
        raise UnknownName(f"{field}={name!r}: unknown preconditioner kind; choose one of "
                          f"{PRECONDITIONERS.names()} (or register one: docs/extending.md)")
    return name


def make_preconditioner(kind: str, n: int, dim: int, rank: int = 4, init_std: float = 0.02) -> Preconditioner:
    """The preconditioner of kind ``kind`` (a registered name)."""
    return PRECONDITIONERS.get(kind)(n, dim, rank, init_std)


class DiagonalFold(Preconditioner):
    """A kind whose P_k is diagonal, P_k = diag(s_k) (the identity included), folds into CEM
    attention's output projection as scaled columns of each head's block: y = o @ (Wq * s), no
    work beyond the plain projection."""

    def column_scale(self) -> torch.Tensor | None:
        """s, [n, D] (None: the identity)."""
        return None

    def fold(self, W: torch.Tensor) -> tuple:
        s = self.column_scale()
        return ((W if s is None else W * s[:, None, :]).reshape(-1, W.shape[-1]),)

    def output(self, o: torch.Tensor, folded: tuple) -> torch.Tensor:
        return o.flatten(-2) @ folded[0]

    @classmethod
    def output_flops(cls, n_heads: int, dim: int, rank: int) -> float:
        return 0.0


@PRECONDITIONERS.register("none")
class NoPreconditioner(DiagonalFold):
    """P = I: no parameters; the output projection is o @ Wq."""

    kind = "none"

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def dense(self) -> torch.Tensor:
        return torch.eye(self.dim).expand(self.n, self.dim, self.dim).clone()


@PRECONDITIONERS.register("diag")
class DiagPreconditioner(DiagonalFold):
    """P_k = diag(softplus(d_k)), ``d = sqrt(D) * p`` with ``p`` initialised to ``1/sqrt(D)`` (so d
    starts at 1 and P's diagonal at softplus(1); appendix C.4). In attention it scales the columns
    of each head's block of the output projection: o @ (Wq * s)."""

    kind = "diag"

    def __init__(self, n: int, dim: int, rank: int = 4, init_std: float = 0.02):
        super().__init__(n, dim, rank, init_std)
        self.scale = math.sqrt(dim)
        self.p = nn.Parameter(torch.full((n, dim), 1.0 / math.sqrt(dim)))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.p.fill_(1.0 / math.sqrt(self.dim))

    def diagonal(self) -> torch.Tensor:
        """softplus(d), [n, D]."""
        return F.softplus(self.scale * self.p)

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return self.diagonal() * y

    def dense(self) -> torch.Tensor:
        return torch.diag_embed(self.diagonal())

    def column_scale(self) -> torch.Tensor:
        return self.diagonal()


@PRECONDITIONERS.register("dplr")
class DPLRPreconditioner(DiagPreconditioner):
    """P_k = diag(softplus(d_k)) + U_k V_k^T + V_k U_k^T (symmetric; appendix C.4): the diagonal
    of ``diag`` plus a rank-2R correction, ``U ~ N(0, init_std)``, ``V = 0`` (as in LoRA). U and V
    are weight matrices: they get weight decay, the diagonal does not."""

    kind = "dplr"

    def __init__(self, n: int, dim: int, rank: int = 4, init_std: float = 0.02):
        super().__init__(n, dim, rank, init_std)
        self.U = nn.Parameter(torch.randn(n, dim, rank) * init_std)
        self.V = nn.Parameter(torch.zeros(n, dim, rank))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        with torch.no_grad():
            self.U.normal_(0.0, self.init_std)
            self.V.zero_()

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        out = self.diagonal() * y
        out = out + torch.einsum("ndr,...nr->...nd", self.U, torch.einsum("ndr,...nd->...nr", self.V, y))
        return out + torch.einsum("ndr,...nr->...nd", self.V, torch.einsum("ndr,...nd->...nr", self.U, y))

    def dense(self) -> torch.Tensor:
        return super().dense() + self.U @ self.V.transpose(-1, -2) + self.V @ self.U.transpose(-1, -2)

    def fold(self, W: torch.Tensor) -> tuple:
        """y = o @ (Wq * s) + sum_k U_k ((Wq_k V_k)^T o_k) + sum_k V_k ((Wq_k U_k)^T o_k): the
        low-rank terms as [Dh, R] matrices Wq_k V_k and Wq_k U_k, never D x D."""
        return (*super().fold(W), W @ self.V, W @ self.U)

    def output(self, o: torch.Tensor, folded: tuple) -> torch.Tensor:
        W_diag, M_v, M_u = folded
        y = o.flatten(-2) @ W_diag
        y = y + torch.einsum("...kr,kdr->...d", torch.einsum("...kc,kcr->...kr", o, M_v), self.U)
        return y + torch.einsum("...kr,kdr->...d", torch.einsum("...kc,kcr->...kr", o, M_u), self.V)

    @classmethod
    def apply_flops(cls, n: int, dim: int, rank: int) -> float:
        return 8.0 * n * dim * rank  # V^T y, U (.), U^T y, V (.) per matrix

    @classmethod
    def output_flops(cls, n_heads: int, dim: int, rank: int) -> float:
        return 4.0 * dim * rank + 4.0 * n_heads * rank * dim  # o_k @ M (K Dh = D), then U_k / V_k

    def decayed(self) -> list[nn.Parameter]:
        return [self.U, self.V]

    @classmethod
    def check_width(cls, width: int, rank: int, width_field: str, rank_field: str) -> str | None:
        if rank < width:
            return None
        return (f"{rank_field}={rank} must be < {width_field}={width} (a low-rank correction; the paper uses 4 "
                f"for attention, 16 for the MLP): lower {rank_field} or use the 'diag' preconditioner")
