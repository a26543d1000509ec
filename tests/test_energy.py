"""CEM steps against autograd of independently written energies (issue 2, checks 1-3).

The reference energies here are written from the paper's formulas with dense matrices
(A_k = diag(d_k) + Wq_k^T Wk_k, P_k as D x D), not with the layer's fused code path.
Everything runs in float64; "normalisation off" means the step is evaluated at a given u
(x = u), since the exact step is the gradient with respect to the normalised iterate.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import spence

from cemlab.models.cem import CEMAttention, CEMMLP
from cemlab.models.common import Positions, causal_alibi, alibi_slopes
from cemlab.models.config import ModelConfig



@pytest.fixture(autouse=True)
def _float64():
    """These checks run in float64 (to 1e-8); the default dtype is restored for the other tests."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Random values for every parameter (norm weights, biases, diagonals, V of the dplr too)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = 0.3 if p.ndim >= 2 else 0.5
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale + (1.0 if name.endswith("norm.weight") else 0.0))


def _dense_P(pc, D: int) -> torch.Tensor:
    """P_k = diag(softplus(sqrt(D) p_k)) + U_k V_k^T + V_k U_k^T built from the raw parameters."""
    P = torch.diag_embed(torch.log1p(torch.exp(math.sqrt(D) * pc.p)))
    if pc.kind == "dplr":
        P = P + torch.einsum("kdr,ker->kde", pc.U, pc.V) + torch.einsum("kdr,ker->kde", pc.V, pc.U)
    return P


def _rms(h, w, eps):
    return w * h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps)


def reference_attention_energy(layer: CEMAttention, h: torch.Tensor, u: torch.Tensor, cfg: ModelConfig):
    """Per-head energies E_k(u_i | h_1..i), [B, K, S], from eq. 1 with appendix A's biases."""
    B, S, D = u.shape
    K, Dh = cfg.n_heads, D // cfg.n_heads
    tau = math.sqrt(Dh)
    hn = _rms(h, layer.norm.weight, cfg.norm_eps)
    Wq = layer.Wq.weight.view(K, Dh, D)
    Wk = layer.Wk.weight.view(K, Dh, D)
    A = torch.einsum("kcd,kce->kde", Wq, Wk)  # Wq_k^T Wk_k, [K, D, D]
    if layer.kq_diag is not None:
        A = A + torch.diag_embed(layer.kq_diag.expand(K, D))
    beta = torch.einsum("kde,bje->bkjd", A, hn)  # beta_kj = A_k hn_j
    s = torch.einsum("bkjd,bid->bkij", beta, u) / tau
    i = torch.arange(S)
    dist = (i[:, None] - i[None, :]).double()
    bias = torch.zeros(K, S, S)
    if cfg.attention.alibi:
        m = torch.tensor([2.0 ** (-cfg.attention.alibi_max_bias * (k + 1) / K) for k in range(K)])
        bias = bias - m[:, None, None] * dist.abs()
    if cfg.attention.self_other_bias:
        bias = bias + layer.self_bias[:, None, None] * torch.eye(S)
    bias = bias.masked_fill(dist < 0, float("-inf"))
    s = s + bias
    return -tau * torch.logsumexp(s, dim=-1), torch.softmax(s, dim=-1), hn


ATTN_OPTIONS = [
    dict(kq_diagonal=d, exact_energy_gradient=exact, attn_precond=p, alibi=alibi, self_other_bias=sb, attn_eta=eta)
    for d, p in itertools.product(["none", "shared", "per_head"], ["none", "diag", "dplr"])
    for exact in ([False] if d == "none" else [True])
    for alibi, sb, eta in [(True, True, 0.7)]
] + [dict(kq_diagonal="none", attn_precond="none", alibi=False, self_other_bias=False, attn_eta=1.3)]


@pytest.mark.parametrize("opts", ATTN_OPTIONS, ids=lambda o: "-".join(f"{v}" for v in o.values()))
def test_attention_step_is_preconditioned_energy_gradient(opts):
    B, S, D, K = 2, 7, 12, 3
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", attn_precond_rank=2, context_length=16, **opts)
    layer = CEMAttention(cfg)
    _randomise(layer, seed=hash(tuple(opts.values())) % 1000)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(B, S, D, generator=g)
    u = torch.randn(B, S, D, generator=g, requires_grad=True)

    E_k, _, _ = reference_attention_energy(layer, h, u, cfg)
    grads = [torch.autograd.grad(E_k[:, k].sum(), u, retain_graph=True)[0] for k in range(K)]
    P = _dense_P(layer.precond, D) if layer.precond.kind != "none" else torch.eye(D).expand(K, D, D)
    expected = u - cfg.attention.eta * sum(grads[k] @ P[k].T for k in range(K))

    pos = Positions(seq_len=S, alibi=causal_alibi(S, alibi_slopes(K, cfg.attention.alibi_max_bias), dtype=torch.float64))
    cache = layer.prepare(h, pos)
    step = u + cfg.attention.eta * layer.direction(u, cache)
    torch.testing.assert_close(step, expected, atol=1e-8, rtol=0)
    # The layer's own explicit energy is the same function.
    torch.testing.assert_close(layer.energy(u, cache), E_k.sum(1), atol=1e-8, rtol=0)


@pytest.mark.parametrize("diag", ["shared", "per_head"])
@pytest.mark.parametrize("precond", ["none", "dplr"])
def test_paper_score_only_diagonal_is_not_the_gradient(diag, precond):
    """Algorithm 1 puts d_k into the scores only. Its step equals the exact gradient step minus
    eta * sum_k P_k (d_k * sum_j alpha_ijk hn_j): exactly the diagonal's own gradient term."""
    B, S, D, K = 2, 6, 8, 2
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", kq_diagonal=diag, attn_precond=precond,
                      attn_precond_rank=2, attn_eta=0.9)
    layer = CEMAttention(cfg)
    _randomise(layer, seed=7)
    g = torch.Generator().manual_seed(2)
    h, u = torch.randn(B, S, D, generator=g), torch.randn(B, S, D, generator=g, requires_grad=True)
    E_k, alpha, hn = reference_attention_energy(layer, h, u, cfg)
    grads = [torch.autograd.grad(E_k[:, k].sum(), u, retain_graph=True)[0] for k in range(K)]
    P = _dense_P(layer.precond, D) if layer.precond.kind != "none" else torch.eye(D).expand(K, D, D)
    exact_step = u - cfg.attention.eta * sum(grads[k] @ P[k].T for k in range(K))
    d = layer.kq_diag.expand(K, D)
    diag_term = torch.einsum("bkij,bjd->bkid", alpha, hn) * d[None, :, None, :]  # d_k * sum_j alpha hn_j
    missing = sum(diag_term[:, k] @ P[k].T for k in range(K))

    pos = Positions(seq_len=S, alibi=causal_alibi(S, alibi_slopes(K, cfg.attention.alibi_max_bias), dtype=torch.float64))
    paper_step = u + cfg.attention.eta * layer.direction(u, layer.prepare(h, pos))
    torch.testing.assert_close(paper_step, exact_step - cfg.attention.eta * missing, atol=1e-8, rtol=0)
    assert (paper_step - exact_step).abs().max() > 1e-3  # really not the gradient when d != 0


def phi_reference(z: torch.Tensor) -> torch.Tensor:
    """int_0^z t sigmoid(t) dt by composite 8-point Gauss-Legendre on 32 panels (differentiable)."""
    x, w = (torch.from_numpy(a) for a in np.polynomial.legendre.leggauss(8))
    edges = torch.linspace(0, 1, 33)
    a, b = edges[:-1], edges[1:]
    s = ((b - a)[:, None] * (x + 1) / 2 + a[:, None]).reshape(-1)  # points in [0, 1]
    ws = ((b - a)[:, None] / 2 * w).reshape(-1)
    t = z.unsqueeze(-1) * s
    return z * (t * torch.sigmoid(t) * ws).sum(-1)


def test_phi_reference_matches_closed_form():
    """phi(z) = z softplus(z) + Li2(-e^z) + pi^2/12, with Li2(x) = spence(1 - x) (scipy)."""
    z = np.linspace(-9, 9, 37)
    closed = z * np.log1p(np.exp(z)) + spence(1 + np.exp(z)) + np.pi ** 2 / 12
    ref = phi_reference(torch.from_numpy(z)).numpy()
    np.testing.assert_allclose(ref, closed, atol=1e-11)
    from cemlab.models.common import silu_integral
    np.testing.assert_allclose(silu_integral(torch.from_numpy(z)).numpy(), closed, atol=1e-11)


def test_silu_integral_is_the_closed_form_to_rounding_with_silu_as_its_gradient():
    """cemlab's phi (a folded dilogarithm series) against scipy's dilogarithm over |z| <= 60, in
    float64 and float32; autograd through it gives SiLU."""
    import torch.nn.functional as F

    from cemlab.models.common import silu_integral

    z = np.concatenate([np.linspace(-60, 60, 2401), [-1e-9, 0.0, 1e-9], np.log(np.array([0.5, 2.0]))])
    closed = z * np.log1p(np.exp(z)) + spence(1 + np.exp(z)) + np.pi ** 2 / 12
    scale = np.maximum(1.0, np.abs(closed))
    zt = torch.from_numpy(z).requires_grad_()
    phi = silu_integral(zt)
    assert np.max(np.abs(phi.detach().numpy() - closed) / scale) < 1e-13
    (grad,) = torch.autograd.grad(phi.sum(), zt)
    torch.testing.assert_close(grad, F.silu(zt.detach()), rtol=0, atol=1e-12)
    phi32 = silu_integral(torch.from_numpy(z).float()).double().numpy()
    assert np.max(np.abs(phi32 - closed) / scale) < 1e-6


@pytest.mark.parametrize("precond", ["none", "diag", "dplr"])
@pytest.mark.parametrize("eta", [1.0, 0.37])
def test_mlp_step_is_preconditioned_energy_gradient(precond, eta):
    B, S, D, Dv = 2, 5, 10, 14
    layer = CEMMLP(D, Dv, eta=eta, precond=precond, precond_rank=3)
    _randomise(layer, seed=3)
    g = torch.Generator().manual_seed(4)
    h = torch.randn(B, S, D, generator=g)
    u = torch.randn(B, S, D, generator=g, requires_grad=True)
    hn = _rms(h, layer.norm.weight, layer.norm.eps)
    gamma = hn @ layer.W.weight.T
    xi = -(gamma * phi_reference(u @ layer.V.weight.T)).sum()  # eq. 7
    (grad,) = torch.autograd.grad(xi, u)
    P = _dense_P(layer.precond, D)[0] if layer.precond.kind != "none" else torch.eye(D)
    expected = u - eta * grad @ P.T
    cache = layer.prepare(h)
    torch.testing.assert_close(u + eta * layer.direction(u, cache), expected, atol=1e-8, rtol=0)
    torch.testing.assert_close(layer.energy(u, cache).sum(), xi, atol=1e-8, rtol=0)


def _iterate_unnormalised(layer, h, u0, steps, pos=None):
    cache = layer.prepare(h, pos)
    u, energies = u0, [layer.energy(u0, cache).sum().item()]
    for _ in range(steps):
        u = u + layer.eta * layer.direction(u, cache)
        energies.append(layer.energy(u, cache).sum().item())
    return energies


@pytest.mark.parametrize("precond", ["none", "diag", "dplr"])
def test_small_steps_lower_the_energy(precond, capsys):
    """With P positive definite (its initialisation) and a small step, every step lowers E."""
    torch.manual_seed(0)
    B, S, D, K, T = 2, 6, 16, 4, 5
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", mlp="cem", d_mlp=24, attn_precond=precond,
                      mlp_precond=precond, attn_precond_rank=2, mlp_precond_rank=2, kq_diagonal="shared",
                      exact_energy_gradient=True, attn_eta=0.05, mlp_eta=0.05)
    attn, mlp = CEMAttention(cfg), CEMMLP.from_config(cfg)
    for layer in (attn, mlp):  # random weights, but P keeps its positive-definite init (V = 0)
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if "precond" not in name and p.ndim >= 2:
                    p.normal_(0, 0.4)
            if attn.kq_diag is not None:
                attn.kq_diag.normal_(0, 0.4)
    h, u0 = torch.randn(B, S, D), torch.randn(B, S, D)
    pos = Positions(seq_len=S, alibi=causal_alibi(S, alibi_slopes(K), dtype=torch.float64))
    e_attn = _iterate_unnormalised(attn, h, u0, T, pos)
    e_mlp = _iterate_unnormalised(mlp, h, u0, T)
    with capsys.disabled():
        print(f"\n[{precond}] attention energy over {T} steps (eta=0.05): " + " > ".join(f"{e:.4f}" for e in e_attn))
        print(f"[{precond}] MLP energy over {T} steps (eta=0.05):       " + " > ".join(f"{e:.4f}" for e in e_mlp))
    assert all(b < a for a, b in zip(e_attn, e_attn[1:]))
    assert all(b < a for a, b in zip(e_mlp, e_mlp[1:]))


def test_attention_t1_equals_weight_tied_mha():
    """T=1, P=I, no diagonal, no ALiBi: h + MHA(RMSNorm(h)) with Wv = Wk, Wo = Wq^T, computed by
    torch.nn.functional.multi_head_attention_forward (an independent implementation)."""
    B, S, D, K = 3, 9, 16, 4
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", alibi=False, self_other_bias=False)
    layer = CEMAttention(cfg)
    _randomise(layer, seed=11)
    h = torch.randn(B, S, D)
    out = layer(h, Positions(seq_len=S))
    hn = _rms(h, layer.norm.weight, cfg.norm_eps).transpose(0, 1)  # [S, B, D]
    Wq, Wk = layer.Wq.weight, layer.Wk.weight
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    mha, _ = F.multi_head_attention_forward(
        hn, hn, hn, D, K, in_proj_weight=torch.cat([Wq, Wk, Wk]), in_proj_bias=None, bias_k=None, bias_v=None,
        add_zero_attn=False, dropout_p=0.0, out_proj_weight=Wq.T, out_proj_bias=None, training=False,
        attn_mask=mask, need_weights=False)
    torch.testing.assert_close(out, h + mha.transpose(0, 1), atol=1e-10, rtol=0)
