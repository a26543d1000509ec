"""Parameter and FLOP accounting.

Parameters are counted once however often they are used (a tied matrix is one matrix).
FLOPs are counted per use: a tied matrix used twice costs two matmuls (CEM attention's Wq is
the query *and* the output projection), and a weight applied in each of T recursion steps costs
T matmuls. Conventions (as in PaLM / torchtitan MFU accounting): 2 FLOPs per multiply-add,
matmuls only, attention scores over the full sequence length S (no causal discount), training
= 3 x forward (backward = 2 x forward), activation recomputation not counted. The embedding
lookup is free; the output head is a matmul. A preconditioner's FLOPs are its kind's
(``Preconditioner.apply_flops`` / ``output_flops`` in ``cemlab.models.preconditioners``).
"""

from __future__ import annotations

from collections import defaultdict

from torch import nn

from cemlab.models.config import ModelConfig
from cemlab.models.preconditioners import PRECONDITIONERS

_PROJECTIONS = {"qkv.weight", "o.weight", "Wq.weight", "Wk.weight", "gate_up.weight", "down.weight",
                "W.weight", "V.weight"}


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Parameter counts by part: ``total``, ``embedding``, ``head``, ``attention``, ``mlp``, ``norm``,
    ``attention_projections``, ``mlp_projections``, ``preconditioners``, ``non_embedding``
    (total without embedding and head). Works on the meta device."""
    counts: dict[str, int] = defaultdict(int)
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = p.numel()
        counts["total"] += n
        parts = name.split(".")
        if parts[0] == "embed":
            counts["embedding"] += n
        elif parts[0] == "head":
            counts["head"] += n
        elif parts[0] == "blocks":
            kind = "attention" if parts[2] == "attn" else "mlp"
            counts[kind] += n
            leaf = ".".join(parts[-2:])
            if leaf in _PROJECTIONS:
                counts[f"{kind}_projections"] += n
            if "precond" in parts:
                counts["preconditioners"] += n
        else:
            counts["norm"] += n
    for key in ("embedding", "head", "attention", "mlp", "norm", "attention_projections", "mlp_projections",
                "preconditioners"):
        counts.setdefault(key, 0)
    counts["non_embedding"] = counts["total"] - counts["embedding"] - counts["head"]
    return dict(counts)


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> dict[str, float]:
    """Model FLOPs per token at sequence length ``seq_len`` (default: the context length).

    Returns ``forward``, ``train`` (= 3 x forward) and the forward parts ``attention`` (projections
    and preconditioners), ``attention_scores`` (QK^T and alpha V), ``mlp`` and ``head``."""
    S = seq_len or cfg.context_length
    D, K, L = cfg.d_model, cfg.n_heads, cfg.n_layers
    a, m = cfg.attention, cfg.mlp
    attn = scores = mlp = 0.0
    if a.kind == "llama":
        attn = a.reuse * (2 * D * 3 * D + 2 * D * D)                  # Wq, Wk, Wv, Wo
        scores = a.reuse * (2 * S * D + 2 * S * D)
    else:
        diag = a.kq_diagonal != "none"
        exact = diag and a.exact_energy_gradient
        P = PRECONDITIONERS.get(a.precond)
        per_step = 2 * D * D + 2 * D * D                              # Wq for queries and (tied) as Wo
        per_step += P.output_flops(K, D, a.precond_rank)              # P_k in the output projection
        if exact:
            per_step += P.apply_flops(K, D, a.precond_rank)           # P_k on the diagonal's gradient term
        step_scores = 2 * S * (D + K * D * diag) + 2 * S * (D + K * D * exact)
        attn = a.reuse * (2 * D * D + a.steps * per_step)             # Wk once per pass (values = keys)
        scores = a.reuse * a.steps * step_scores
    if m.kind == "llama":
        mlp = m.reuse * (2 * D * 2 * cfg.d_mlp + 2 * cfg.d_mlp * D)
    else:
        Dv = cfg.cem_mlp_width
        per_step = 2 * D * Dv + 2 * Dv * D                            # V u and V^T g
        per_step += PRECONDITIONERS.get(m.precond).apply_flops(1, D, m.precond_rank)  # P (eq. 13)
        mlp = m.reuse * (2 * D * Dv + m.steps * per_step)             # gamma = W h once per pass
    head = 2 * D * cfg.vocab_size
    forward = L * (attn + scores + mlp) + head
    return {"forward": float(forward), "train": 3.0 * forward, "attention": float(L * attn),
            "attention_scores": float(L * scores), "mlp": float(L * mlp), "head": float(head)}
