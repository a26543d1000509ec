"""The attention kernels CEM attention dispatches to besides its reference path (docs/performance.md).

``model.attn_kernel`` picks one path per device (``attention_path``):

- ``reference``: ``scaled_dot_product_attention`` with the biases as a float mask that carries the
  learnable self/other bias's gradient. Always exact, the oracle of the tests; a mask that needs a
  gradient leaves SDPA only its math kernel.
- ``flash`` (CPU): the same mask held constant, so that SDPA's CPU flash kernel runs forward and
  backward; the self/other bias's gradient is computed from the kernel's log-sum-exp (below).
- ``flex``: FlexAttention, the biases computed inside the kernel by a ``score_mod`` (cem.py); the
  self/other bias is a constant there too, and gets its gradient from the kernel's log-sum-exp
  (``diagonal_bias_gradient``, below): through the ``score_mod`` its backward summed it over every
  score, 40x slower per training step at 86m on a GPU.

Gradient of a bias on the diagonal of the scores. With s_ij = q_i . k_j / tau + m_ij + b [i = j]
and alpha_ij = exp(s_ij - lse_i), o_i = sum_j alpha_ij v_j and g_i = dL/do_i, softmax's backward is
dL/ds_ij = alpha_ij g_i . (v_j - o_i); b enters s_ii only, so

    dL/db = sum_i alpha_ii g_i . (v_i - o_i),    alpha_ii = exp(s_ii - lse_i),

which needs the diagonal scores (one dot product per position) and the kernel's lse: O(S D), no
[S, S] tensor. q, k and v get their gradients from the flash kernel's own backward, which treats
the mask as the constant it is for them.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

try:  # torch >= 2.9 asks for the log-sum-exp this way; earlier versions by return_lse (deprecated since)
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover - the pinned torch has it
    AuxRequest = None

from cemlab.models.common import Positions
from cemlab.models.config import ModelConfig

Path = Literal["reference", "flash", "flex"]


def attention_path(cfg: ModelConfig, device: torch.device, compiled: bool = True) -> Path:
    """The kernel ``cfg.attention.kernel`` (flat ``attn_kernel``) means on ``device``; ``compiled``:
    whether the run compiles (its caller knows: training passes ``train.compile``).

    'auto': on CUDA, flex without a ``per_head`` diagonal or the exact gradient form (those widen
    the heads by D channels, 756 at 86m, past the head widths up to 256 that flex's GPU kernel
    holds) when the run compiles, else reference: FlexAttention is fast only as a compiled kernel
    (eager, it materialises every score; ``flex`` below compiles it on its own when the model is
    not), and a run that does not compile (``train.compile: false``) asks for no compiler; on the CPU, flash without a KQ diagonal (FlexAttention has no CPU
    backward in torch 2.13; with a diagonal the flash kernel needs the values widened to the
    queries' D_h + D channels, which costs more than the math kernel it avoids: docs/performance.md),
    else reference; reference on any other device."""
    kind = torch.device(device).type
    a = cfg.attention
    if a.kernel == "auto":
        if kind == "cuda":
            narrow = a.kq_diagonal != "per_head" and not a.exact_energy_gradient
            return "flex" if narrow and compiled else "reference"
        return "flash" if kind == "cpu" and a.kq_diagonal == "none" else "reference"
    if a.kernel == "flash" and kind != "cpu":
        raise ValueError(f"model.attn_kernel='flash' is the CPU kernel; on {kind} use model.attn_kernel='auto' "
                         "(flex where it fits, else reference) or 'flex' / 'reference'")
    return a.kernel


class _FlashConstantMask(torch.autograd.Function):
    """SDPA's CPU flash kernel with a constant float mask that already holds ``self_bias`` on its
    diagonal; ``self_bias`` is an input only so that its gradient (module docstring) reaches it."""

    @staticmethod
    def forward(ctx, q, k, v, mask, self_bias, scale, first):
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, mask, o, lse)
        ctx.scale, ctx.first = scale, first  # first: the position of q's first row among the keys
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        q, k, v, mask, o, lse = ctx.saved_tensors
        g = g.contiguous()
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, o, lse, 0.0, False, attn_mask=mask, scale=ctx.scale)
        d_bias = None
        if ctx.needs_input_grad[4]:
            f32 = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
            rows = slice(ctx.first, ctx.first + q.shape[-2])  # the keys on these queries' diagonal
            k_ii, v_ii = k[..., rows, :].to(f32), v[..., rows, :].to(f32)
            m_ii = mask.diagonal(offset=ctx.first, dim1=-2, dim2=-1).to(f32)
            alpha_ii = torch.exp(ctx.scale * (q.to(f32) * k_ii).sum(-1) + m_ii - lse.to(f32))  # [B, K, rows]
            d_bias = (alpha_ii * (g.to(f32) * (v_ii - o.to(f32))).sum(-1)).sum((0, 2))
        return dq, dk, dv, None, d_bias, None, None


def query_block_rows(seq_len: int) -> int:
    """Rows per query block of the flash path: at least 64 (fewer calls), at most 8 blocks."""
    return max(64, -(-seq_len // 8))


def flash_attention(q, k, v, mask: torch.Tensor | None, self_bias: torch.Tensor | None, scale: float,
                    rows: int | None = None):
    """o = softmax(q k^T * scale + mask) v by SDPA's CPU flash kernel, [B, K, S, Dv].

    ``mask``: [1, K or 1, S, S] float, without a gradient (ALiBi, causal -inf, and ``self_bias`` on
    the diagonal, detached), or None for plain causal attention; ``self_bias`` [K]: the same values,
    as the parameter that receives the gradient, or None. q, k and v must have one head width (the
    flash kernel's requirement: callers widen v where needed). ``attention_path`` admits this path
    on the CPU only.

    The CPU kernel does not skip blocks that a float mask fills with -inf, so the queries go in
    blocks of ``rows`` (``query_block_rows``), each against the keys up to its last row only: with
    n blocks the kernel computes (n + 1) / 2n of the [S, S] scores (measured: a quarter less time
    per call at S = 256, n = 4). Each block is an exact attention over its key prefix."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    S = q.shape[-2]
    rows = rows or query_block_rows(S)
    mask = mask.to(q.dtype)
    blocks = [
        _FlashConstantMask.apply(q[..., a:b, :], k[..., :b, :], v[..., :b, :], mask[..., a:b, :b], self_bias, scale, a)
        for a, b in ((a, min(a + rows, S)) for a in range(0, S, rows))
    ]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-2)


def diagonal_bias_gradient(o, lse, q, k, v, self_bias: torch.Tensor, scale: float,
                           diag_extra: torch.Tensor | None = None) -> torch.Tensor:
    """``o`` unchanged in value, with the gradient of a bias ``self_bias`` [K] on the scores'
    diagonal that the kernel held constant (module docstring): o + (b - b.detach()) alpha_ii (v_i - o_i),
    alpha_ii = exp(s_ii - lse_i), every factor but b detached, so q, k and v keep the kernel's own
    gradients. s_ii = q_i . k_i * scale + b + ``diag_extra`` (the other terms on the diagonal,
    [B, 1 or K, S]; ALiBi is 0 there). o, v: [B, K, S, Dv]; q, k: [B, K, S, Dqk]; lse: [B, K, S]."""
    with torch.no_grad():
        f32 = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
        s_ii = scale * (q.to(f32) * k.to(f32)).sum(-1) + self_bias.detach().to(f32)[:, None]
        if diag_extra is not None:
            s_ii = s_ii + diag_extra.to(f32)
        term = torch.exp(s_ii - lse.to(f32))[..., None] * (v.to(f32) - o.to(f32))
    live = (self_bias - self_bias.detach()).to(f32)[None, :, None, None]
    return o + (live * term).to(o.dtype)


# -- FlexAttention --------------------------------------------------------------------------------

def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def causal_block_mask(pos: Positions, device: torch.device):
    """The causal block mask of this length, made once per forward and shared by every layer."""
    if pos.block_mask is None:
        pos.block_mask = create_block_mask(_causal, None, None, pos.seq_len, pos.seq_len, device=device)
    return pos.block_mask


_compiled_flex = None


def flex(q, k, v, score_mod, block_mask, scale: float, lse: bool = False):
    """FlexAttention, compiled on CUDA when the caller is not already being compiled (eager flex
    materialises the scores); a CPU backward is refused by torch with an error naming the option.
    ``lse``: also return the log-sum-exp of every row's scores (natural log), [B, K, S]."""
    global _compiled_flex

    fn = flex_attention
    if q.is_cuda and not torch.compiler.is_compiling():
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=False)
        fn = _compiled_flex
    try:
        if lse and AuxRequest is None:
            return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)
        if lse:
            o, aux = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                        return_aux=AuxRequest(lse=True))
            return o, aux.lse
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    except NotImplementedError as e:
        raise NotImplementedError(
            f"model.attn_kernel='flex' cannot run here ({e}); use model.attn_kernel='auto' or 'reference' "
            f"on {q.device.type}") from e
