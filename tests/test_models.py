"""Model library checks (issue 2, checks 4-9 and the FLOP accounting)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch.utils.flop_counter import FlopCounterMode

from cemlab.config import ConfigError, load_run_config
from cemlab.models import build_model, count_parameters, flops_per_token
from cemlab.models.config import ModelConfig

NANO = dict(d_model=32, n_layers=2, n_heads=4, d_mlp=48, vocab_size=97, context_length=64)

VARIANTS = {
    "llama": dict(),
    "llama-reuse2": dict(attn_reuse=2, mlp_reuse=2),
    "cem-attn": dict(attention="cem"),
    "cem-attn-T2-dplr-perhead-exact": dict(attention="cem", attn_steps=2, attn_precond="dplr",
                                           kq_diagonal="per_head", exact_energy_gradient=True, attn_precond_rank=2),
    "cem-attn-shared-diag-noalibi": dict(attention="cem", kq_diagonal="shared", attn_precond="diag", alibi=False),
    "cem-attn-reuse2": dict(attention="cem", attn_reuse=2),
    "cem-mlp-T3-dplr": dict(mlp="cem", mlp_steps=3, mlp_precond="dplr", mlp_precond_rank=4),
    "cem-mlp-matched": dict(mlp="cem", mlp_param_matched=True),
    "cem-full-T2": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, attn_precond="dplr",
                        mlp_precond="diag", kq_diagonal="shared", attn_precond_rank=2),
}


def _nonzero_init(model: torch.nn.Module) -> None:
    """Make diagonals, self biases and the dplr V non-zero so that every path carries signal."""
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("kq_diag", "self_bias", "precond.V")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_causality(variant):
    """Changing token j leaves every output before j unchanged (and changes outputs from j on)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**NANO, **VARIANTS[variant])).eval()
    _nonzero_init(model)
    tokens = torch.randint(0, NANO["vocab_size"], (2, 40))
    with torch.no_grad():
        base = model(tokens)
        for j in (0, 17, 39):
            changed = tokens.clone()
            changed[:, j] = (changed[:, j] + 1) % NANO["vocab_size"]
            out = model(changed)
            torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-6, rtol=0)
            assert (out[:, j] - base[:, j]).abs().max() > 1e-4


def _llama_param_formula(d, L, dm, V):
    """Independent count: embedding + head + L x (4 D^2 attention + 3 D Dm MLP + 2 norms) + final norm."""
    return 2 * V * d + L * (4 * d * d + 3 * d * dm + 2 * d) + d


@pytest.mark.parametrize("name,target", [("86m", 86e6), ("108m", 108e6), ("134m", 134e6), ("162m", 162e6)])
def test_table1_presets_within_one_percent(name, target):
    cfg = ModelConfig.preset(name)
    assert (cfg.vocab_size, cfg.context_length) == (32000, 2048)
    with torch.device("meta"):
        counts = count_parameters(build_model(cfg))
    assert counts["total"] == _llama_param_formula(cfg.d_model, cfg.n_layers, cfg.d_mlp, cfg.vocab_size)
    assert abs(counts["total"] - target) / target < 0.01
    assert counts["embedding"] + counts["head"] + counts["attention"] + counts["mlp"] + counts["norm"] == counts["total"]


def test_parameter_counts_match_hugging_face():
    from cemlab.models.hf import to_hf

    model = build_model(ModelConfig(**NANO))
    hf = to_hf(model)
    assert count_parameters(model)["total"] == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("name", ["86m", "162m"])
def test_cem_projection_ratios(name):
    def counts(**kw):
        with torch.device("meta"):
            return count_parameters(build_model(ModelConfig.preset(name, **kw)))

    llama, attn, mlp, matched = counts(), counts(attention="cem"), counts(mlp="cem"), counts(mlp="cem", mlp_param_matched=True)
    assert attn["attention_projections"] * 2 == llama["attention_projections"]
    assert mlp["mlp_projections"] * 3 == llama["mlp_projections"] * 2
    assert abs(matched["mlp"] - llama["mlp"]) / llama["mlp"] < 0.01
    # Preconditioners are a small overhead (paper sec. 4.2: "negligible"): per layer K (D + 2DR) for the
    # per-head attention P_k (they act on D-vectors: the paper's D_h is the model width) + D + 2DR for
    # the MLP; about 1.2% of the full CEM model at 162m.
    pre = counts(attention="cem", mlp="cem", attn_precond="dplr", mlp_precond="dplr")
    cfg = ModelConfig.preset(name)
    D, K, L = cfg.d_model, cfg.n_heads, cfg.n_layers
    assert pre["preconditioners"] == L * (K * (D + 2 * D * 4) + D + 2 * D * 16)
    assert pre["preconditioners"] < 0.02 * pre["total"]


def test_hugging_face_parity_and_round_trip():
    from cemlab.models.hf import from_hf, to_hf

    torch.manual_seed(0)
    model = build_model(ModelConfig(**NANO)).eval()
    with torch.no_grad():
        for p in model.parameters():  # non-trivial norm weights too
            p.add_(torch.randn_like(p) * 0.02)
    tokens = torch.randint(0, NANO["vocab_size"], (3, 64))
    hf = to_hf(model)
    with torch.no_grad():
        ours, theirs = model(tokens), hf(tokens).logits
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
        back = from_hf(hf)
        torch.testing.assert_close(back(tokens), ours, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="model.attention='llama'"):
        to_hf(build_model(ModelConfig(**NANO, attention="cem")))


def test_plain_reuse_differs_from_cem_recursion_and_reuse_composes():
    torch.manual_seed(0)
    h_tokens = torch.randint(0, NANO["vocab_size"], (2, 24))
    recursion = build_model(ModelConfig(**NANO, attention="cem", mlp="cem", attn_steps=2, mlp_steps=2)).eval()
    reuse = build_model(ModelConfig(**NANO, attention="cem", mlp="cem", attn_reuse=2, mlp_reuse=2)).eval()
    reuse.load_state_dict(recursion.state_dict())
    with torch.no_grad():
        assert (recursion(h_tokens) - reuse(h_tokens)).abs().max() > 1e-3

    # Reuse R=2 of a Llama sublayer equals applying the R=1 sublayer twice (written out here).
    one = build_model(ModelConfig(**NANO)).eval()
    two = build_model(ModelConfig(**NANO, attn_reuse=2, mlp_reuse=2)).eval()
    two.load_state_dict(one.state_dict())
    with torch.no_grad():
        h = one.embed(h_tokens)
        pos = one.positions(h.shape[1], h.device, h.dtype)
        for block in one.blocks:
            h = block.attn(block.attn(h, pos), pos)
            h = block.mlp(block.mlp(h, pos), pos)
        torch.testing.assert_close(two(h_tokens), one.head(one.norm(h)), atol=1e-6, rtol=0)
        # ... and T=1 recursion with reuse 1 is the ordinary layer: steps=1 equals reuse=1 exactly.
        t1 = build_model(ModelConfig(**NANO, attention="cem", mlp="cem")).eval()
        t1.load_state_dict(recursion.state_dict())
        with recursion.recursion_steps(attn=1, mlp=1):
            torch.testing.assert_close(recursion(h_tokens), t1(h_tokens), atol=0, rtol=0)


def test_checkpointed_recursion_same_loss_and_gradients():
    torch.manual_seed(0)
    kw = dict(**NANO, attention="cem", mlp="cem", attn_steps=3, mlp_steps=3, attn_precond="dplr",
              mlp_precond="dplr", kq_diagonal="shared", attn_precond_rank=2, mlp_precond_rank=2)
    plain = build_model(ModelConfig(**kw)).double()
    ckpt = build_model(ModelConfig(**kw, checkpoint_recursion=True)).double()
    ckpt.load_state_dict(plain.state_dict())
    _nonzero_init(plain)
    ckpt.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, NANO["vocab_size"], (2, 32))

    def loss_and_grads(m):
        logits = m(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}

    l1, g1 = loss_and_grads(plain)
    l2, g2 = loss_and_grads(ckpt)
    torch.testing.assert_close(l1, l2, atol=1e-12, rtol=0)
    assert g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=1e-10, rtol=0, msg=name)


def test_test_time_recursion_changes_steps_and_restores():
    model = build_model(ModelConfig(**NANO, attention="cem", mlp="cem", attn_steps=2, mlp_steps=2)).eval()
    tokens = torch.randint(0, NANO["vocab_size"], (1, 16))
    with torch.no_grad():
        base = model(tokens)
        with model.recursion_steps(attn=4, mlp=3):
            assert {sub.steps for _, _, sub in model.cem_sublayers()} == {3, 4}
            assert (model(tokens) - base).abs().max() > 1e-4
            trace = model.energy_trace(tokens)
            assert trace[("attn", 0)].shape == (5,) and trace[("mlp", 1)].shape == (4,)
        torch.testing.assert_close(model(tokens), base)


def test_recursion_with_normalisation_descends_at_init(capsys):
    """The real recursion (u = RMSNorm(x)) at initialisation: report how T steps change each
    layer's energy, and check a small step lowers it (RMSNorm weight 1 makes its Jacobian PSD)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**NANO, attention="cem", mlp="cem", attn_steps=4, mlp_steps=4,
                                    attn_eta=0.1, mlp_eta=0.1)).eval()
    trace = model.energy_trace(torch.randint(0, NANO["vocab_size"], (4, 48)))
    with capsys.disabled():
        for key, e in trace.items():
            print(f"\nenergy {key} over 4 steps (eta=0.1, with RMSNorm): {[round(v, 4) for v in e.tolist()]}")
    for e in trace.values():
        assert (e[1:] < e[:-1]).all()


def _math_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Attention written as plain matmuls, so that FlopCounterMode sees the score FLOPs (it does
    not count the CPU flash-attention kernel)."""
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if is_causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    if attn_mask is not None:
        s = s + attn_mask
    return s.softmax(-1) @ v


def _counted_forward_flops(cfg: ModelConfig, B: int, S: int, monkeypatch) -> float:
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", _math_sdpa)
    model = build_model(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (B, S))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(tokens)
    return fc.get_total_flops() / (B * S)


@pytest.mark.parametrize("variant", ["llama", "llama-reuse2", "cem-attn", "cem-attn-T2-dplr-perhead-exact",
                                     "cem-attn-shared-diag-noalibi", "cem-mlp-T3-dplr", "cem-mlp-matched", "cem-full-T2"])
def test_flops_per_token_match_flop_counter(variant, monkeypatch):
    """Analytic FLOPs (tied weights counted per use, recursion counted T times) against PyTorch's
    FlopCounterMode on a real forward pass. Per-batch terms (folding the preconditioners into the
    output weights) are the only difference, hence the 1% tolerance."""
    # the reference attention path: its scores go through the (patched, countable) SDPA call
    cfg = ModelConfig(**{**NANO, "vocab_size": 101, "context_length": 64}, **VARIANTS[variant])
    counted = _counted_forward_flops(cfg.model_copy(update={"attn_kernel": "reference"}), B=4, S=64,
                                     monkeypatch=monkeypatch)
    analytic = flops_per_token(cfg, seq_len=64)["forward"]
    assert abs(counted - analytic) / analytic < 0.01, (counted, analytic)


def test_flops_count_tied_weights_twice_and_steps_t_times():
    base = ModelConfig(**NANO, attention="cem")
    f1 = flops_per_token(base)
    f2 = flops_per_token(base.model_copy(update={"attn_steps": 2}))
    D = NANO["d_model"]
    # Wq twice per step (query and tied output projection): each extra step adds 4 D^2 + scores per layer.
    per_layer_step = 4 * D * D + 4 * NANO["context_length"] * D
    assert f2["forward"] - f1["forward"] == pytest.approx(NANO["n_layers"] * per_layer_step)
    assert f1["train"] == 3 * f1["forward"]


BAD_CONFIGS = [
    (dict(d_model=30, n_heads=4), "n_heads"),
    (dict(attention="cem", attn_steps=0), "attn_steps"),
    (dict(mlp="cem", mlp_steps=-1), "mlp_steps"),
    (dict(attention="cem", attn_precond="dplr", attn_precond_rank=64, d_model=64), "attn_precond_rank"),
    (dict(mlp="cem", mlp_precond="dplr", mlp_precond_rank=64, d_model=64), "mlp_precond_rank"),
    (dict(attention="gpt"), "attention"),
    (dict(mlp="moe"), "mlp"),
    (dict(attn_precond="lowrank", attention="cem"), "attn_precond"),
    (dict(kq_diagonal="shared"), "kq_diagonal"),
    (dict(attention="cem", exact_energy_gradient=True), "exact_energy_gradient"),
    (dict(mlp_param_matched=True), "mlp_param_matched"),
    (dict(attn_steps=2), "attn_steps"),
    (dict(d_modle=64), "d_modle"),
]


@pytest.mark.parametrize("kwargs,field", BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_bad_configs_name_the_field(kwargs, field):
    with pytest.raises(ValidationError) as e:
        ModelConfig(**kwargs)
    assert field in str(e.value)


def test_bad_config_through_yaml_names_the_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  preset: nano\n  attention: cem\n  attn_steps: 0\n")
    with pytest.raises(ConfigError) as e:
        load_run_config(path)
    assert "model.attn_steps" in str(e.value) and str(path) in str(e.value)
    with pytest.raises(ConfigError, match="model.preset"):
        load_run_config(None, ["model.preset=999m"])
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelConfig.preset("999m")


def test_model_library_imports_nothing_from_other_cemlab_packages_or_the_stack():
    """``cemlab/models`` is a self-contained library: every import in it, function-level ones
    included, is the standard library, torch, numpy, pydantic, transformers or ``cemlab.models``."""
    import ast
    import sys
    from pathlib import Path

    import cemlab.models

    allowed = {"torch", "numpy", "pydantic", "transformers"}
    found = {}
    for path in sorted(Path(cemlab.models.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if name.startswith("cemlab.models") or top in allowed or top in sys.stdlib_module_names:
                    continue
                found.setdefault(path.name, []).append(name)
    assert not found, f"cemlab/models imports outside the model library: {found}"


def test_alibi_bias_exact_in_float64_after_double():
    """A model built in float32 and converted with ``.double()`` biases its float64 scores by
    ALiBi slopes exact to float64 (~1e-16 relative), also for a head count that is not a power of
    two; the reference is -m_k (i - j) with m_k = 2^(-8k/3) from Python's floats."""
    import math

    K, S = 3, 7
    cfg = ModelConfig(**{**NANO, "d_model": 24, "n_heads": K}, attention="cem")
    model = build_model(cfg).double()
    expected = torch.tensor([[[-math.pow(2.0, -cfg.attention.alibi_max_bias * k / K) * (i - j) if j <= i else -math.inf
                               for j in range(S)] for i in range(S)] for k in range(1, K + 1)], dtype=torch.float64)
    bias = model.positions(S, torch.device("cpu"), torch.float64).alibi
    assert bias.dtype == torch.float64
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(bias), finite)
    assert (bias[finite] - expected[finite]).abs().max().item() <= 1e-14 * expected[finite].abs().max().item()
    slopes = model.blocks[0].attn.alibi_slopes(torch.device("cpu"), torch.float64)  # the flex path's and energy's
    assert (slopes + expected[:, 1, 0]).abs().max().item() <= 1e-16
    # In float32 the same slopes are rounded once, to float32.
    assert torch.equal(build_model(cfg).positions(S, torch.device("cpu"), torch.float32).alibi, expected.float())
