"""Proof by extension: a preconditioner kind added as a plugin (``tests/plugins/scalar_precond.py``,
P_k = softplus(c_k) I), touching no file of ``cemlab/``, is validated, computes what its dense form
says in CEM attention and the CEM MLP, is counted (parameters, FLOPs), gets its weight-decay group,
and runs through a sweep and its report with ``CEMLAB_PLUGINS`` (inherited by the Ray workers)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from cemlab.config import ConfigError, load_run_config
from cemlab.gp import GPConfig
from cemlab.models import CEMAttention, CEMMLP, build_model, count_parameters, flops_per_token
from cemlab.models.common import Positions, alibi_slopes, causal_alibi
from cemlab.models.config import ModelConfig
from cemlab.models.preconditioners import PRECONDITIONERS
from cemlab.models.registry import plugins_scope
from cemlab.train.plan import decay_groups

TESTS = Path(__file__).resolve().parent
PLUGIN = "plugins.scalar_precond"


@pytest.fixture(autouse=True)
def plugin(monkeypatch):
    """The plugin as a user adds it: named in CEMLAB_PLUGINS, imported by the registry on demand
    (and forgotten after the test)."""
    monkeypatch.setenv("CEMLAB_PLUGINS", PLUGIN)
    with plugins_scope():
        assert "scalar" in PRECONDITIONERS  # loads the plugin
        yield PRECONDITIONERS.get("scalar")


def test_config_accepts_the_plugin_kind_and_names_the_kinds_for_an_unknown_one():
    cfg = ModelConfig(attention="cem", mlp="cem", attn_precond="scalar", mlp_precond="scalar")
    assert (cfg.attention.precond, cfg.mlp.precond) == ("scalar", "scalar")
    assert cfg.model_dump()["attn_precond"] == "scalar"
    assert GPConfig(precond="scalar").precond == "scalar"
    with pytest.raises(ValidationError) as e:
        ModelConfig(attention="cem", attn_precond="scalr")
    msg = str(e.value)
    assert "attn_precond='scalr'" in msg and all(k in msg for k in ("none", "diag", "dplr", "scalar"))
    with pytest.raises(ConfigError, match=r"model\.mlp_precond: .*unknown preconditioner kind.*'scalar'"):
        load_run_config(None, ["model.mlp=cem", "model.mlp_precond=bogus"])
    with pytest.raises(ValidationError, match=r"precond='bogus'.*'scalar'"):
        GPConfig(precond="bogus")


def test_application_equals_the_dense_form(plugin):
    torch.manual_seed(0)
    P = plugin(3, 8).double()
    with torch.no_grad():
        P.c.copy_(torch.tensor([[-1.0], [0.3], [2.0]]))
    y = torch.randn(5, 3, 8, dtype=torch.float64)
    expected = torch.einsum("nde,bne->bnd", P.dense(), y)
    torch.testing.assert_close(P.apply(y), expected)
    # the dense form itself, from the definition: softplus(c_k) * I
    for k, c in enumerate((-1.0, 0.3, 2.0)):
        torch.testing.assert_close(P.dense()[k], math.log1p(math.exp(c)) * torch.eye(8, dtype=torch.float64))


def _random_scales(layer, n):
    with torch.no_grad():
        layer.precond.c.copy_(torch.linspace(-1.0, 1.5, n, dtype=torch.float64)[:, None])


@pytest.mark.parametrize("kq,exact", [("none", False), ("per_head", True)])
def test_cem_attention_step_is_the_dense_preconditioned_energy_gradient(kq, exact):
    """direction(u) = -sum_k P_k grad_u E_k(u), with P_k the plugin's dense matrices and the gradient
    by autograd of the layer's explicit energy (eq. 1); the plugin does not fold, so this is the
    general output path."""
    torch.manual_seed(1)
    D, K, S = 16, 4, 6
    cfg = ModelConfig(d_model=D, n_heads=K, attention="cem", attn_precond="scalar", kq_diagonal=kq,
                      exact_energy_gradient=exact, attn_kernel="reference", context_length=16)
    layer = CEMAttention(cfg).double()
    _random_scales(layer, K)
    if layer.kq_diag is not None:
        with torch.no_grad():
            layer.kq_diag.normal_(0, 0.3)
    h, u = torch.randn(2, S, D, dtype=torch.float64), torch.randn(2, S, D, dtype=torch.float64)
    pos = Positions(seq_len=S, alibi=causal_alibi(S, alibi_slopes(K, 8.0), dtype=torch.float64))
    cache = layer.prepare(h, pos)
    u_var = u.clone().requires_grad_(True)
    E = layer.energy(u_var, cache, per_head=True)  # [B, K, S]
    grads = [torch.autograd.grad(E[:, k].sum(), u_var, retain_graph=True)[0] for k in range(K)]
    P = layer.precond.dense()
    expected = -sum(grads[k] @ P[k].T for k in range(K))
    torch.testing.assert_close(layer.direction(u, cache), expected, atol=1e-10, rtol=1e-10)


def test_cem_mlp_step_is_the_dense_preconditioned_energy_gradient():
    """P V^T(gamma * SiLU(V u)) (eq. 13) against explicit matrices: -P grad_u xi(u), the gradient of
    xi = -gamma . phi(V u) written out as -V^T(gamma * SiLU(V u))."""
    torch.manual_seed(2)
    D, Dv = 12, 20
    layer = CEMMLP(D, Dv, precond="scalar").double()
    _random_scales(layer, 1)
    h, u = torch.randn(3, 5, D, dtype=torch.float64), torch.randn(3, 5, D, dtype=torch.float64)
    cache = layer.prepare(h)
    gamma = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-6) @ layer.W.weight.T
    V = layer.V.weight
    grad = -(gamma * F.silu(u @ V.T)) @ V
    expected = -grad @ layer.precond.dense()[0].T
    torch.testing.assert_close(layer.direction(u, cache), expected, atol=1e-10, rtol=1e-10)


def test_parameters_flops_and_decay_groups():
    L, D, K, V, S = 2, 32, 4, 64, 16
    kw = dict(d_model=D, n_layers=L, n_heads=K, d_mlp=48, vocab_size=V, context_length=S, attention="cem", mlp="cem")
    model = build_model(ModelConfig(**kw, attn_precond="scalar", mlp_precond="scalar"))
    counts = count_parameters(model)
    assert counts["preconditioners"] == L * (K + 1)  # one scalar per head, one per MLP
    assert counts["total"] == count_parameters(build_model(ModelConfig(**kw)))["total"] + L * (K + 1)

    # FLOPs by hand (2 per multiply-add, matmuls only): the scale is element-wise, so none is added
    Dv = 48
    attn = 2 * D * D + 4 * D * D             # Wk once; Wq as query and output projection
    scores = 2 * S * D + 2 * S * D
    mlp = 2 * D * Dv + 4 * D * Dv
    fpt = flops_per_token(ModelConfig(**kw, attn_precond="scalar", mlp_precond="scalar"))
    assert fpt["forward"] == L * (attn + scores + mlp) + 2 * D * V
    dplr = flops_per_token(ModelConfig(**kw, attn_precond="dplr", mlp_precond="dplr", attn_precond_rank=2,
                                       mlp_precond_rank=3))
    assert dplr["forward"] - fpt["forward"] == L * (4 * D * 2 + 4 * K * 2 * D + 8 * D * 3)

    decay, no_decay = decay_groups(model)
    cs = {n for n, _ in model.named_parameters() if n.endswith("precond.c")}
    assert len(cs) == 2 * L and cs <= set(no_decay) and not cs & set(decay)  # 2-D, yet not decayed
    assert "blocks.0.attn.Wq.weight" in decay


SCALAR_SWEEP = """\
figure: "test: a plugin's preconditioner"
axes: {size: [86m]}
variants:
  - {group: cem, label: "cem scalar", set: {model.attention: cem, model.mlp: cem, model.attn_precond: scalar,
                                           model.mlp_precond: scalar}}
"""


@pytest.fixture(scope="module")
def plugin_for_workers():
    """Set before Ray starts (module scope, requested before ``ray_local``), so the workers inherit it."""
    with pytest.MonkeyPatch.context() as mp, plugins_scope():
        mp.setenv("CEMLAB_PLUGINS", PLUGIN)
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        yield


@pytest.fixture
def plugin_env(monkeypatch, tmp_path, runs_dir):
    from sweep_support import local_sweeps

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, scalar=SCALAR_SWEEP)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    return tmp_path


@pytest.mark.slow
def test_a_sweep_and_its_report_run_with_the_plugin(plugin_for_workers, ray_local, plugin_env, data_cache):
    from sweep_support import client_for, experiment_runs, run

    from cemlab.tracking.server import stop_server

    try:
        result = run("scalar", data_cache)
        runs = [r for r in experiment_runs(client_for(result), "scalar") if "model.attn_precond" in r.data.params]
        assert len(runs) == 1, f"the trial did not record a run: {result}"
        params = runs[0].data.params
        assert (params["model.attn_precond"], params["model.mlp_precond"]) == ("scalar", "scalar")
        assert runs[0].info.status == "FINISHED"
        assert math.isfinite(runs[0].data.metrics["val/loss"])
        assert result.report is not None and result.report_error is None, result.report_error
        assert "scalar" in (result.report.parent / "trials.csv").read_text()
    finally:
        stop_server()
