"""Conversion between cemlab's Llama baseline and Hugging Face ``transformers.LlamaForCausalLM``.

So that a baseline can be checked against, evaluated and served with the Hugging Face stack.
Only pure Llama models convert (``attention = mlp = 'llama'``, no plain reuse): CEM layers have no
Hugging Face counterpart. Weights are copied, not shared.

``transformers`` is imported inside the functions that build its objects, so importing this module
(the benchmarks do) does not load it.
"""

from __future__ import annotations

import torch

from cemlab.models.config import ModelConfig
from cemlab.models.model import CausalLM, build_model


def _check_convertible(cfg: ModelConfig) -> None:
    if cfg.kind != "llama" or cfg.attention.reuse != 1 or cfg.mlp.reuse != 1:
        raise ValueError(
            f"only Llama baselines convert to Hugging Face (model.attention='llama', model.mlp='llama', "
            f"reuse 1); this model is {cfg.kind!r} with attn_reuse={cfg.attention.reuse}, mlp_reuse={cfg.mlp.reuse}"
        )


def hf_config(cfg: ModelConfig):
    from transformers import LlamaConfig

    _check_convertible(cfg)
    return LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
        max_position_embeddings=cfg.context_length, rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.attention.rope_theta},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu",
        initializer_range=cfg.init_std,
    )


@torch.no_grad()
def to_hf(model: CausalLM):
    """An equivalent ``LlamaForCausalLM`` (same logits up to float rounding)."""
    from transformers import LlamaForCausalLM

    cfg = model.cfg
    hf = LlamaForCausalLM(hf_config(cfg)).to(dtype=model.embed.weight.dtype, device=model.embed.weight.device)
    D, Dm = cfg.d_model, cfg.d_mlp
    hf.model.embed_tokens.weight.copy_(model.embed.weight)
    for block, layer in zip(model.blocks, hf.model.layers):
        q, k, v = block.attn.qkv.weight.split(D, dim=0)
        layer.self_attn.q_proj.weight.copy_(q)
        layer.self_attn.k_proj.weight.copy_(k)
        layer.self_attn.v_proj.weight.copy_(v)
        layer.self_attn.o_proj.weight.copy_(block.attn.o.weight)
        layer.input_layernorm.weight.copy_(block.attn.norm.weight)
        gate, up = block.mlp.gate_up.weight.split(Dm, dim=0)
        layer.mlp.gate_proj.weight.copy_(gate)
        layer.mlp.up_proj.weight.copy_(up)
        layer.mlp.down_proj.weight.copy_(block.mlp.down.weight)
        layer.post_attention_layernorm.weight.copy_(block.mlp.norm.weight)
    hf.model.norm.weight.copy_(model.norm.weight)
    hf.lm_head.weight.copy_(model.head.weight)
    return hf.eval()


def config_from_hf(hf_cfg) -> ModelConfig:
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0))
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rope.get('rope_type')!r} is not supported (only 'default')")
    if getattr(hf_cfg, "num_key_value_heads", hf_cfg.num_attention_heads) != hf_cfg.num_attention_heads:
        raise ValueError("grouped-query attention (num_key_value_heads != num_attention_heads) is not supported")
    if getattr(hf_cfg, "tie_word_embeddings", False):
        raise ValueError("tied embeddings are not supported: the Llama baseline has an untied head")
    return ModelConfig(
        d_model=hf_cfg.hidden_size, n_layers=hf_cfg.num_hidden_layers, n_heads=hf_cfg.num_attention_heads,
        d_mlp=hf_cfg.intermediate_size, vocab_size=hf_cfg.vocab_size,
        context_length=hf_cfg.max_position_embeddings, norm_eps=hf_cfg.rms_norm_eps, rope_theta=theta,
        init_std=getattr(hf_cfg, "initializer_range", 0.02),
    )


@torch.no_grad()
def from_hf(hf) -> CausalLM:
    """The inverse of ``to_hf``: a cemlab Llama baseline from a ``LlamaForCausalLM``."""
    cfg = config_from_hf(hf.config)
    ref = hf.model.embed_tokens.weight
    with torch.device(ref.device):
        model = build_model(cfg).to(ref.dtype)
    model.embed.weight.copy_(ref)
    for block, layer in zip(model.blocks, hf.model.layers):
        a, m = layer.self_attn, layer.mlp
        block.attn.qkv.weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0))
        block.attn.o.weight.copy_(a.o_proj.weight)
        block.attn.norm.weight.copy_(layer.input_layernorm.weight)
        block.mlp.gate_up.weight.copy_(torch.cat([m.gate_proj.weight, m.up_proj.weight], 0))
        block.mlp.down.weight.copy_(m.down_proj.weight)
        block.mlp.norm.weight.copy_(layer.post_attention_layernorm.weight)
    model.norm.weight.copy_(hf.model.norm.weight)
    model.head.weight.copy_(hf.lm_head.weight)
    return model.eval()
