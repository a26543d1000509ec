"""The causal language model: embedding, blocks of (attention, MLP) sublayers, final norm, head."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from cemlab.models.cem import CEMAttention, CEMMLP, CEMSublayer
from cemlab.models.kernels import attention_path
from cemlab.models.common import (
    AlibiSlopes, Positions, RMSNorm, causal_alibi, init_linear_and_embedding, rope_cache,
)
from cemlab.models.config import ModelConfig
from cemlab.models.llama import LlamaAttention, LlamaMLP


class Block(nn.Module):
    """One Transformer layer (paper Algorithm 1, pre-norm): attention sublayer, then MLP sublayer.
    Each sublayer carries its own residual connection, norm, recursion and reuse."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = CEMAttention(cfg) if cfg.attention.kind == "cem" else LlamaAttention(cfg)
        self.mlp = CEMMLP.from_config(cfg) if cfg.mlp.kind == "cem" else LlamaMLP(cfg)

    def forward(self, h: torch.Tensor, pos: Positions, traces: dict | None = None) -> torch.Tensor:
        for name in ("attn", "mlp"):
            sub = getattr(self, name)
            if traces is not None and isinstance(sub, CEMSublayer):
                traces[name] = []
                h = sub(h, pos, trace=traces[name])
            else:
                h = sub(h, pos)
        return h


class CausalLM(nn.Module):
    """``forward(tokens[B, S]) -> logits[B, S, V]``. Untied embedding and head (as Llama)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.alibi_slopes = AlibiSlopes(cfg.n_heads, cfg.attention.alibi_max_bias)
        self._pos_cache: dict = {}
        self.compiled = True  # see set_compiled
        init_linear_and_embedding(self, cfg.init_std)

    def set_compiled(self, compiled: bool) -> None:
        """Whether this model's run compiles it (training passes ``train.compile``): ``attn_kernel:
        auto`` takes FlexAttention only when it does (``kernels.attention_path``). Default True."""
        self.compiled = bool(compiled)
        self._pos_cache = {}
        for _, _, sub in self.cem_sublayers():
            if isinstance(sub, CEMAttention):
                sub.compiled, sub._paths = self.compiled, {}

    def positions(self, seq_len: int, device: torch.device, dtype: torch.dtype) -> Positions:
        """RoPE tables and the ALiBi bias for this length, computed once and reused."""
        key = (seq_len, device, dtype)
        if key not in self._pos_cache:
            pos = Positions(seq_len=seq_len, device=device)
            a = self.cfg.attention
            if a.kind == "llama":
                pos.cos, pos.sin = rope_cache(seq_len, self.cfg.head_dim, a.rope_theta, device, torch.float32)
            elif a.alibi and attention_path(self.cfg, device, self.compiled) != "flex":  # flex: inside the kernel
                pos.alibi = causal_alibi(seq_len, self.alibi_slopes(device, dtype), device, dtype)
            self._pos_cache = {key: pos}  # keep only the latest length
        return self._pos_cache[key]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.cfg.context_length:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds model.context_length={self.cfg.context_length}"
            )
        h = self.embed(tokens)
        pos = self.positions(tokens.shape[1], tokens.device, h.dtype)
        for block in self.blocks:
            h = block(h, pos)
        return self.head(self.norm(h))

    # -- recursion controls ---------------------------------------------------------------------
    def cem_sublayers(self):
        """(name, layer index, module) for every CEM sublayer."""
        for i, block in enumerate(self.blocks):
            for name in ("attn", "mlp"):
                sub = getattr(block, name)
                if isinstance(sub, CEMSublayer):
                    yield name, i, sub

    def set_recursion_steps(self, attn: int | None = None, mlp: int | None = None) -> dict[str, int | None]:
        """Change the number of recursion steps of every CEM sublayer (test-time recursion).

        Returns the previous values, so that ``model.set_recursion_steps(**prev)`` restores them."""
        prev: dict[str, int | None] = {"attn": None, "mlp": None}
        for name, _, sub in self.cem_sublayers():
            prev[name] = sub.steps
            new = attn if name == "attn" else mlp
            if new is not None:
                if new < 1:
                    raise ValueError(f"recursion steps must be >= 1, got {name}={new}")
                sub.steps = int(new)
        return prev

    @contextmanager
    def recursion_steps(self, attn: int | None = None, mlp: int | None = None):
        prev = self.set_recursion_steps(attn=attn, mlp=mlp)
        try:
            yield self
        finally:
            self.set_recursion_steps(**prev)

    @torch.no_grad()
    def energy_trace(self, tokens: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        """Mean energy of each CEM sublayer's iterate before and after each recursion step.

        Returns ``{(sublayer, layer): tensor[T+1]}``: index 0 is E at x = h, index t the energy after
        step t, all with the layer's keys / gamma fixed (as the recursion sees them)."""
        h = self.embed(tokens)
        pos = self.positions(tokens.shape[1], tokens.device, h.dtype)
        out: dict[tuple[str, int], torch.Tensor] = {}
        for i, block in enumerate(self.blocks):
            traces: dict[str, list] = {}
            h = block(h, pos, traces=traces)
            for name, values in traces.items():
                out[(name, i)] = torch.stack(values).float().cpu()
        return out


def build_model(cfg: ModelConfig) -> CausalLM:
    """A causal LM for ``cfg``. Builds on whatever device is current (``with torch.device("meta")``
    counts the paper's sizes without allocating them)."""
    return CausalLM(cfg)
