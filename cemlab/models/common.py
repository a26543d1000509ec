"""Pieces shared by the Llama and CEM sublayers: RMSNorm, RoPE, ALiBi slopes, preconditioners,
the SiLU integral phi, and the per-forward position context."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm as in Hugging Face Llama: statistics in (at least) float32, weight applied in the input dtype."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.to(torch.promote_types(dtype, torch.float32))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


class Identity(nn.Module):
    """Stands in for a norm where a test switches normalisation off."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# ---------------------------------------------------------------------------------------------
# Positions
# ---------------------------------------------------------------------------------------------


def rope_cache(seq_len: int, head_dim: int, theta: float, device=None, dtype=torch.float32):
    """cos/sin tables [S, Dh] in the half-split layout of Hugging Face Llama (``rotate_half``)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, K, S, Dh]; cos/sin: [S, Dh]."""
    return x * cos + rotate_half(x) * sin


def alibi_slopes(n_heads: int, max_bias: float = 8.0, device=None, dtype=torch.float64) -> torch.Tensor:
    """Geometric ALiBi slopes m_k = 2^(-max_bias * k / K), k = 1..K (Press et al.; appendix A),
    computed in float64 and rounded once to ``dtype``."""
    k = torch.arange(1, n_heads + 1, dtype=torch.float64)
    return torch.pow(2.0, -max_bias * k / n_heads).to(device=device, dtype=dtype)


class AlibiSlopes:
    """The slopes of one module in each (device, dtype) asked for, made on first use. Not a
    buffer: a float32 buffer converted by ``.double()`` would keep its float32 rounding (exact only
    to ~1e-8), while these are rounded once from float64 into the dtype the layer computes in."""

    def __init__(self, n_heads: int, max_bias: float):
        self.n_heads, self.max_bias = n_heads, max_bias
        self._cache: dict = {}

    def __call__(self, device, dtype: torch.dtype) -> torch.Tensor:
        key = (torch.device(device) if device is not None else None, dtype)
        if key not in self._cache:
            self._cache[key] = alibi_slopes(self.n_heads, self.max_bias, device, dtype)
        return self._cache[key]


@dataclass
class Positions:
    """What a forward pass knows about positions, computed once and shared by all layers.

    ``cos``/``sin``: RoPE tables [S, Dh] (Llama attention). ``alibi``: [K, S, S] additive bias
    ``-m_k |i-j|`` on the causal part and ``-inf`` above the diagonal (CEM attention, reference
    path), or None. ``block_mask``: FlexAttention's causal block mask (CEM attention, flex path),
    made on first use."""

    seq_len: int
    device: torch.device | None = None
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    alibi: torch.Tensor | None = None
    block_mask: object | None = None


def causal_mask(seq_len: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """[1, S, S]: 0 for j <= i, -inf for j > i."""
    future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
    return torch.zeros(1, seq_len, seq_len, device=device, dtype=dtype).masked_fill(future, float("-inf"))


def causal_alibi(seq_len: int, slopes: torch.Tensor, device=None, dtype=torch.float32) -> torch.Tensor:
    """[K, S, S]: -m_k (i - j) for j <= i, -inf for j > i (appendix A)."""
    i = torch.arange(seq_len, device=device)
    dist = (i[:, None] - i[None, :]).to(dtype)
    bias = -slopes.to(device=device, dtype=dtype)[:, None, None] * dist
    return bias.masked_fill(dist < 0, float("-inf"))


# ---------------------------------------------------------------------------------------------
# Preconditioner  P = diag(softplus(d)) + U V^T + V U^T   (paper sec. 2.3, appendix C.4)
# ---------------------------------------------------------------------------------------------


class Preconditioner(nn.Module):
    """``n`` preconditioners of size D x D in diagonal (``diag``) or diagonal-plus-low-rank
    (``dplr``) form, never materialised as D x D in the forward pass.

    Parameterisation (appendix C.4): ``d = sqrt(D) * p`` with ``p`` initialised to ``1/sqrt(D)``
    (so d starts at 1 and P's diagonal at softplus(1)); ``U ~ N(0, 0.02)``, ``V = 0`` (as in LoRA).
    ``n`` is the number of heads for attention (one P_k per head) and 1 for the MLP.
    """

    def __init__(self, n: int, dim: int, kind: str, rank: int = 4, init_std: float = 0.02):
        super().__init__()
        if kind not in ("diag", "dplr"):
            raise ValueError(f"preconditioner kind must be 'diag' or 'dplr', got {kind!r}")
        self.kind, self.n, self.dim, self.rank = kind, n, dim, rank
        self.scale = math.sqrt(dim)
        self.p = nn.Parameter(torch.full((n, dim), 1.0 / math.sqrt(dim)))
        self.init_std = init_std
        if kind == "dplr":
            self.U = nn.Parameter(torch.randn(n, dim, rank) * init_std)
            self.V = nn.Parameter(torch.zeros(n, dim, rank))
        else:
            self.register_parameter("U", None)
            self.register_parameter("V", None)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.p.fill_(1.0 / math.sqrt(self.dim))
            if self.U is not None:
                self.U.normal_(0.0, self.init_std)
                self.V.zero_()

    def diagonal(self) -> torch.Tensor:
        """softplus(d), [n, D]."""
        return F.softplus(self.scale * self.p)

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        """P_k y_k for y of shape [..., n, D] (the head axis second to last)."""
        out = self.diagonal() * y
        if self.kind == "dplr":
            out = out + torch.einsum("ndr,...nr->...nd", self.U, torch.einsum("ndr,...nd->...nr", self.V, y))
            out = out + torch.einsum("ndr,...nr->...nd", self.V, torch.einsum("ndr,...nd->...nr", self.U, y))
        return out

    def dense(self) -> torch.Tensor:
        """The matrices themselves, [n, D, D] (for tests and analysis only)."""
        P = torch.diag_embed(self.diagonal())
        if self.kind == "dplr":
            P = P + self.U @ self.V.transpose(-1, -2) + self.V @ self.U.transpose(-1, -2)
        return P


# ---------------------------------------------------------------------------------------------
# phi(z) = int_0^z SiLU(t) dt   (paper eq. 7 and 11: the element-wise energy's nonlinearity)
# ---------------------------------------------------------------------------------------------

_GL_NODES, _GL_WEIGHTS = (torch.from_numpy(a) for a in np.polynomial.legendre.leggauss(64))


def silu_integral(z: torch.Tensor) -> torch.Tensor:
    """phi(z) = int_0^z t * sigmoid(t) dt by 64-point Gauss-Legendre quadrature on [0, z].

    The integrand is analytic, so the rule is exact to rounding for |z| up to a few tens, and
    autograd through it returns d(phi)/dz = SiLU(z) to the same accuracy. Used by the explicit
    energies (tests, energy traces), never in the training forward pass."""
    nodes = _GL_NODES.to(device=z.device, dtype=z.dtype)
    weights = _GL_WEIGHTS.to(device=z.device, dtype=z.dtype)
    t = z.unsqueeze(-1) * (nodes + 1) / 2  # [..., 64] points in [0, z]
    return (z / 2) * (F.silu(t) * weights).sum(-1)


def init_linear_and_embedding(module: nn.Module, std: float) -> None:
    """Normal(0, std) for every Linear and Embedding weight, ones for norms (as HF Llama)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)
        elif isinstance(m, Preconditioner):
            m.reset_parameters()
