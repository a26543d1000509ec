"""The step-size modes, where the descent state starts (x0), and when a step is not energy descent.

- eta = '1/T' at T = 1 is today's model bit for bit; at T = 2 it is a fixed eta = 1/2 bit for bit;
- a learned eta stays positive, starts at 1/T and gets gradients;
- x0 = 'rmsnorm' against a forward pass written here from Algorithm 1 (x0 = RMSNorm(h), u_t =
  RMSNorm(x_t), x_{t+1} = x_t + eta * direction(u_t), output x_T), independent of the layer's loop;
- with a KQ diagonal the score-only step (Algorithm 1) can raise the energy where the exact
  gradient step lowers it: a constructed case with one token, where the energy is linear in u.
"""

from __future__ import annotations

import math

import pytest
import torch

from cemlab.models import build_model
from cemlab.models.cem import CEMAttention, CEMMLP
from cemlab.models.common import Positions
from cemlab.models.config import ModelConfig


def _cfg(**kw) -> ModelConfig:
    base = dict(d_model=32, n_layers=2, n_heads=4, d_mlp=48, vocab_size=64, context_length=16, attention="cem",
                mlp="cem", kq_diagonal="shared", attn_precond="dplr", mlp_precond="diag", attn_precond_rank=2)
    return ModelConfig(**{**base, **kw})


def _logits(cfg: ModelConfig, tokens: torch.Tensor, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    with torch.no_grad():
        return model(tokens)


TOKENS = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))


def test_eta_one_over_T_at_T1_is_todays_model_bit_for_bit():
    a = _logits(_cfg(attn_steps=1, mlp_steps=1), TOKENS)
    b = _logits(_cfg(attn_steps=1, mlp_steps=1, attn_eta="1/T", mlp_eta="1/T"), TOKENS)
    assert torch.equal(a, b)


def test_eta_one_over_T_at_T2_is_fixed_half_bit_for_bit():
    a = _logits(_cfg(attn_steps=2, mlp_steps=2, attn_eta=0.5, mlp_eta=0.5), TOKENS)
    b = _logits(_cfg(attn_steps=2, mlp_steps=2, attn_eta="1/T", mlp_eta="1/T"), TOKENS)
    assert torch.equal(a, b)
    # and differs from the paper's eta = 1 at T = 2 (the modes are not all the same model)
    assert not torch.allclose(a, _logits(_cfg(attn_steps=2, mlp_steps=2), TOKENS))


def test_one_over_T_follows_test_time_steps():
    torch.manual_seed(0)
    model = build_model(_cfg(attn_steps=2, mlp_steps=2, attn_eta="1/T", mlp_eta="1/T"))
    with model.recursion_steps(attn=4, mlp=4):
        assert all(sub.step_sizes() == [0.25] * 4 for _, _, sub in model.cem_sublayers())
    assert all(sub.step_sizes() == [0.5, 0.5] for _, _, sub in model.cem_sublayers())


@pytest.mark.parametrize("checkpointed", [False, True])
def test_learned_eta_is_positive_starts_at_one_over_T_and_gets_gradients(checkpointed):
    cfg = _cfg(attn_steps=2, mlp_steps=3, attn_eta="learned", mlp_eta="learned", checkpoint_recursion=checkpointed)
    torch.manual_seed(0)
    model = build_model(cfg)
    subs = list(model.cem_sublayers())
    assert len(subs) == 4
    for name, _, sub in subs:
        T = 2 if name == "attn" else 3
        assert sub.eta_raw.shape == (T,) and sub.step_sizes() == pytest.approx([1 / T] * T, rel=1e-6)
    loss = model(TOKENS).logsumexp(-1).mean()
    loss.backward()
    for _, _, sub in subs:
        g = sub.eta_raw.grad
        assert g is not None and torch.isfinite(g).all() and (g != 0).all()
    # positive by construction: even a raw value driven far negative gives eta > 0
    with torch.no_grad():
        subs[0][2].eta_raw.fill_(-50.0)
    assert all(e > 0 for e in subs[0][2].step_sizes())
    # beyond the trained steps a learned step size repeats its last value
    with model.recursion_steps(attn=4):
        sizes = subs[0][2].step_sizes()
        assert len(sizes) == 4 and sizes[2] == sizes[3] == sizes[1]


def test_bad_step_size_is_named():
    with pytest.raises(ValueError, match="attn_eta"):
        _cfg(attn_eta="half")
    with pytest.raises(ValueError, match="mlp_eta"):
        _cfg(mlp_eta=0)


# ----------------------------------------------------------------------------------------------
# x0 = RMSNorm(h), residual absorbed (Algorithm 1 read literally)
# ----------------------------------------------------------------------------------------------

def _rms(x, w, eps):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("T", [1, 2])
def test_x0_rmsnorm_mlp_against_algorithm_1(T):
    torch.manual_seed(3)
    D, Dv, eta = 12, 20, 0.7
    layer = CEMMLP(D, Dv, steps=T, eta=eta, x0="rmsnorm")
    with torch.no_grad():
        layer.norm.weight.uniform_(0.5, 1.5)
    h = torch.randn(2, 5, D) * 3
    w, eps = layer.norm.weight, layer.norm.eps
    # Algorithm 1, MLP subroutine: h <- RMSNorm(h); x <- h; gamma = W h; T times u <- RMSNorm(x),
    # x <- x + eta V^T(gamma * SiLU(V u)); return x (no skip connection around it)
    hn = _rms(h, w, eps)
    gamma = hn @ layer.W.weight.T
    x = hn
    for _ in range(T):
        u = _rms(x, w, eps)
        x = x + eta * (gamma * torch.nn.functional.silu(u @ layer.V.weight.T)) @ layer.V.weight
    torch.testing.assert_close(layer(h, None), x, atol=1e-6, rtol=1e-6)
    # the default keeps the residual stream: x0 = h
    layer.x0 = "h"
    x = h
    for _ in range(T):
        u = _rms(x, w, eps)
        x = x + eta * (gamma * torch.nn.functional.silu(u @ layer.V.weight.T)) @ layer.V.weight
    torch.testing.assert_close(layer(h, None), x, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("T", [1, 2])
def test_x0_rmsnorm_attention_against_algorithm_1(T):
    torch.manual_seed(4)
    B, S, D, K = 2, 6, 16, 2
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", alibi=False, self_other_bias=False, attn_steps=T,
                      attn_eta=0.8, cem_x0="rmsnorm")
    layer = CEMAttention(cfg)
    h = torch.randn(B, S, D) * 2
    w, eps, Dh = layer.norm.weight, cfg.norm_eps, D // K
    hn = _rms(h, w, eps)
    k = (hn @ layer.Wk.weight.T).view(B, S, K, Dh)
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    x = hn
    for _ in range(T):
        u = _rms(x, w, eps)
        q = (u @ layer.Wq.weight.T).view(B, S, K, Dh)
        a = torch.einsum("bikc,bjkc->bkij", q, k) / math.sqrt(Dh)
        alpha = a.masked_fill(~mask, float("-inf")).softmax(-1)
        o = torch.einsum("bkij,bjkc->bikc", alpha, k).reshape(B, S, D)  # values = keys
        x = x + 0.8 * o @ layer.Wq.weight  # sum_k Wq_k^T o_k
    torch.testing.assert_close(layer(h, Positions(seq_len=S)), x, atol=1e-5, rtol=1e-5)


def test_x0_is_left_out_of_the_config_hash_at_its_default():
    import hashlib
    import json

    from cemlab.config import RunConfig

    a = RunConfig(model=_cfg())
    assert a.hash() != RunConfig(model=_cfg(cem_x0="rmsnorm")).hash()
    # at the default, the hash is the one of the config without the field (runs made before it match)
    d = a.model_dump(mode="json")
    d["model"].pop("cem_x0")
    for sec, key in (("model", "name"), ("model", "checkpoint_recursion"), ("model", "attn_kernel")):
        d[sec].pop(key)
    for key in ("progress_bar", "compile", "checkpoint_dir", "val_interval", "checkpoint_every", "num_threads",
                "test_recursion_steps", "devices", "accelerator"):
        d["train"].pop(key)
    d["train"].pop("curve_batches")   # left out of the hash at its default (null) too
    d.pop("tracking")
    d["data"].pop("cache_dir")
    payload = json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert a.hash() == hashlib.sha256(payload.encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------------
# Score-only diagonal (Algorithm 1) is not energy descent
# ----------------------------------------------------------------------------------------------

def _one_token_layer(exact: bool) -> CEMAttention:
    """One head, head width D, Wq^T Wk = I, diagonal d = -2: with one token the energy is linear,
    E(u) = -(Wq u).(Wk hn) - hn.(d * u) = -u.hn + 2 u.hn = u.hn, so -grad E = -hn; the score-only
    step direction is Wq^T o = Wq^T Wk hn = hn: straight up the energy."""
    D = 8
    cfg = ModelConfig(d_model=D, n_heads=1, attention="cem", kq_diagonal="shared", exact_energy_gradient=exact,
                      alibi=False, self_other_bias=False, attn_eta=0.01)
    layer = CEMAttention(cfg)
    with torch.no_grad():
        q = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(0)))[0]
        layer.Wq.weight.copy_(q)
        layer.Wk.weight.copy_(q)  # Wq^T Wk = q^T q = I
        layer.kq_diag.fill_(-2.0)
    return layer


def test_exact_gradient_step_descends_and_score_only_step_climbs():
    torch.manual_seed(5)
    h = torch.randn(1, 1, 8)
    u = torch.randn(1, 1, 8)
    pos = Positions(seq_len=1)
    energies = {}
    for exact in (True, False):
        layer = _one_token_layer(exact)
        cache = layer.prepare(h, pos)
        e0 = layer.energy(u, cache).sum().detach()
        hn = cache[0]
        torch.testing.assert_close(e0, (u * hn).sum())  # E(u) = u.hn, as constructed
        e1 = layer.energy(u + layer.eta * layer.direction(u, cache), cache).sum().detach()
        energies[exact] = (float(e0), float(e1))
    (e0, e1_exact), (_, e1_score) = energies[True], energies[False]
    assert e1_exact < e0 < e1_score
