"""Pieces shared by the Llama and CEM sublayers: RMSNorm, RoPE, ALiBi slopes, the SiLU integral phi,
and the per-forward position context (preconditioners: ``cemlab.models.preconditioners``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from math import comb, factorial

import torch
import torch.nn.functional as F
from torch import nn

from cemlab.models.preconditioners import Preconditioner


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
# phi(z) = int_0^z SiLU(t) dt   (paper eq. 7 and 11: the element-wise energy's nonlinearity)
# ---------------------------------------------------------------------------------------------

def _bernoulli(n: int) -> list[Fraction]:
    """B_0..B_{n-1} (B_1 = -1/2), by sum_{k<=m} C(m+1, k) B_k = 0."""
    b = [Fraction(1)]
    for m in range(1, n):
        b.append(-sum(comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return b


#: Li2(x) = sum_n B_n u^(n+1) / (n+1)!, u = -log(1 - x): the coefficient of u^(n+1), n = 0..19.
#: For x in [-1, 0), |u| <= log 2 and the terms fall like (log 2 / 2 pi)^n: 20 reach float64 rounding.
_LI2_COEFFS = tuple(float(b / factorial(n + 1)) for n, b in enumerate(_bernoulli(20)))
_PI2_12 = math.pi ** 2 / 12


def _li2_of_minus_exp(s: torch.Tensor) -> torch.Tensor:
    """Li2(-e^-a) from s = softplus(-a) = log(1 + e^-a), a >= 0 (then u = -s, in [-log 2, 0))."""
    u = -s
    acc = torch.full_like(u, _LI2_COEFFS[-1])
    for c in reversed(_LI2_COEFFS[:-1]):
        acc = acc * u + c
    return acc * u


def silu_integral(z: torch.Tensor) -> torch.Tensor:
    """phi(z) = int_0^z t * sigmoid(t) dt in closed form, with a = |z| and s = softplus(-a):

        phi(-a) = pi^2/12 - a s + Li2(-e^-a),     phi(a) = a^2 / 2 - phi(-a)

    (phi(z) = z softplus(z) + Li2(-e^z) + pi^2/12, folded by phi(z) + phi(-z) = z^2/2 so that the
    dilogarithm is only needed on [-1, 0), where its Bernoulli series converges fast). Element-wise
    and differentiable: autograd returns d(phi)/dz = SiLU(z) to rounding. Used by the explicit
    energies (tests, energy traces), never in the training forward pass. A 64-point quadrature did
    this before at about 10x the cost, which made the energy traces dominate CEM-MLP validation."""
    a = z.abs()
    s = F.softplus(-a)
    neg = _PI2_12 - a * s + _li2_of_minus_exp(s)
    return torch.where(z > 0, a * a / 2 - neg, neg)


def init_linear_and_embedding(module: nn.Module, std: float) -> None:
    """Normal(0, std) for every Linear and Embedding weight, ones for norms (as HF Llama)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)
        elif isinstance(m, Preconditioner):  # every kind resets its own parameters
            m.reset_parameters()
