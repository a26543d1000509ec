"""Llama baseline sublayers: pre-norm multi-head attention with RoPE and a SwiGLU MLP, no biases.

Each sublayer is a residual block ``h <- h + f(RMSNorm(h))``. ``reuse`` applies the same block
that many times: the paper's *plain layer reuse* control (Fig. 3c, Fig. 4), which recomputes
keys and values from the current state every time (unlike CEM recursion, which keeps them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cemlab.models.config import ModelConfig
from cemlab.models.common import Positions, RMSNorm, apply_rope


class ReusedBlock(nn.Module):
    """Applies ``h <- h + self.block(h)`` ``reuse`` times, optionally checkpointing each application."""

    reuse: int = 1
    checkpointed: bool = False

    def block(self, h: torch.Tensor, pos: Positions) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, h: torch.Tensor, pos: Positions) -> torch.Tensor:
        for _ in range(self.reuse):
            if self.checkpointed and self.reuse > 1 and torch.is_grad_enabled():
                h = h + checkpoint(self.block, h, pos, use_reentrant=False)
            else:
                h = h + self.block(h, pos)
        return h


class LlamaAttention(ReusedBlock):
    """``h + Wo MHA(RMSNorm(h))`` with separate (fused here as one matrix) Wq, Wk, Wv, Wo and RoPE."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)  # rows: [Wq; Wk; Wv]
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.reuse = cfg.attention.reuse
        self.checkpointed = cfg.checkpoint_recursion

    def block(self, h: torch.Tensor, pos: Positions) -> torch.Tensor:
        B, S, D = h.shape
        x = self.norm(h)
        # Three matmuls with row blocks of the one fused weight rather than one matmul and a split
        # of its output: the backward then sums three input gradients instead of concatenating an
        # activation-sized [B, S, 3D] gradient (measured: 5% faster training step on CPU).
        q, k, v = (self._heads(F.linear(x, W), B, S) for W in self.qkv.weight.chunk(3, dim=0))  # [B, K, S, Dh]
        cos, sin = pos.cos.to(q.dtype), pos.sin.to(q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # A contiguous v lets the fused kernel read it fast (measured: ~3% faster training step on
        # CPU than the strided view).
        o = F.scaled_dot_product_attention(q, k, v.contiguous(), is_causal=True)
        return self.o(o.transpose(1, 2).reshape(B, S, D))

    def _heads(self, x: torch.Tensor, B: int, S: int) -> torch.Tensor:
        """[B, S, D] -> [B, K, S, Dh]."""
        return x.view(B, S, self.n_heads, self.head_dim).transpose(1, 2)


class LlamaMLP(ReusedBlock):
    """``h + W_down (SiLU(W_gate x) * W_up x)``, x = RMSNorm(h) (SwiGLU; paper eq. 6 with sigma = SiLU).

    Hugging Face naming: ``gate_proj`` is the projection inside the SiLU (the paper's W^u),
    ``up_proj`` the linear one (the paper's W^g)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_mlp = cfg.d_mlp
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.d_mlp, bias=False)  # rows: [W_gate; W_up]
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model, bias=False)
        self.reuse = cfg.mlp.reuse
        self.checkpointed = cfg.checkpoint_recursion

    def block(self, h: torch.Tensor, pos: Positions) -> torch.Tensor:
        x = self.norm(h)
        # Two matmuls with the row blocks of the fused weight, as in the attention: SiLU then reads
        # (and its backward writes) a contiguous tensor, and no [B, S, 2 d_mlp] gradient is concatenated.
        W_gate, W_up = self.gate_up.weight.chunk(2, dim=0)
        return self.down(F.silu(F.linear(x, W_gate)) * F.linear(x, W_up))
