"""cemlab's FLOP counts and peak-FLOPs table against Lightning's own
(``lightning.fabric.utilities.throughput``): the analytic count per token against
``measure_flops`` (torch's FLOP counter on a meta-device model, forward and backward), cemlab's
bf16 table against Lightning's device table, and the device peak a run uses taken from Lightning.
CPU only: the CUDA device is a stand-in (its name and capability), as no GPU is needed to look up a peak."""

from __future__ import annotations

import pytest
import torch

from cemlab.models import build_model, flops_per_token
from cemlab.models.config import ModelConfig

VARIANTS = {
    "llama": {},
    "cem-attn T2": dict(attention="cem", attn_steps=2),
    "cem-attn T2 dplr": dict(attention="cem", attn_steps=2, attn_precond="dplr"),
    "cem-attn kq shared exact": dict(attention="cem", attn_steps=2, kq_diagonal="shared", exact_energy_gradient=True),
    "cem-mlp T3 dplr": dict(mlp="cem", mlp_steps=3, mlp_precond="dplr"),
    "cem full": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, attn_precond="dplr",
                     mlp_precond="dplr", kq_diagonal="shared"),
    "plain reuse": dict(attn_reuse=2, mlp_reuse=2),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_analytic_flops_per_token_match_lightnings_measure_flops(name):
    """Measured at two batch sizes, the FLOPs per added token (the slope) equal the analytic count
    exactly; what is left (the intercept) is weight-only products computed once per batch (the attention
    dplr preconditioner folded into Wq), which a per-token count leaves out."""
    from lightning.fabric.utilities.throughput import measure_flops

    cfg = ModelConfig.preset("nano", **VARIANTS[name])
    seq = cfg.context_length
    measured = {}
    with torch.device("meta"):
        model = build_model(cfg)
    for batch in (2, 4):
        with torch.device("meta"):
            x = torch.randint(0, cfg.vocab_size, (batch, seq))
        measured[batch] = (measure_flops(model, lambda: model(x)),
                           measure_flops(model, lambda: model(x), lambda y: y.sum()))
    analytic = flops_per_token(cfg, seq)
    for i, key in enumerate(("forward", "train")):
        slope = (measured[4][i] - measured[2][i]) / (2 * seq)
        assert analytic[key] == pytest.approx(slope, rel=1e-9)
        per_batch = measured[2][i] - 2 * seq * slope
        assert per_batch >= 0 and (per_batch > 0) == (VARIANTS[name].get("attn_precond") == "dplr")
        assert per_batch < 2e-3 * measured[2][i]


def test_cemlab_peak_table_agrees_with_lightnings_device_table():
    from lightning.fabric.utilities.throughput import _CUDA_FLOPS

    from cemlab.hardware import PEAK_BF16_FLOPS

    for ours, theirs in (("A100", "a100"), ("H100 SXM", "h100 sxm"), ("H100 PCIe", "h100 pcie")):
        assert PEAK_BF16_FLOPS[ours] == pytest.approx(_CUDA_FLOPS[theirs][torch.bfloat16], rel=1e-3)


@pytest.fixture
def fake_cuda(monkeypatch):
    """A stand-in CUDA device: its name and compute capability (all that a peak lookup reads)."""
    def use(name: str):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return use


def test_the_runs_device_peak_comes_from_lightning_with_the_runs_precision(fake_cuda):
    from lightning.fabric.utilities.throughput import _CUDA_FLOPS

    from cemlab.hardware import peak_flops

    fake_cuda("NVIDIA L4")  # in Lightning's table only
    assert peak_flops(precision="bf16-mixed") == _CUDA_FLOPS["l4"][torch.bfloat16]
    fake_cuda("NVIDIA A100-SXM4-80GB")
    assert peak_flops(precision="bf16-mixed") == 312e12
    assert peak_flops(precision="32-true") == _CUDA_FLOPS["a100"][torch.float32]  # torch's default: true fp32
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # fp32 matmuls run as TF32
    try:
        assert peak_flops(precision="32-true") == _CUDA_FLOPS["a100"]["tfloat32"]
    finally:
        torch.set_float32_matmul_precision(before)
    fake_cuda("NVIDIA H200")  # Lightning's parser does not find it: cemlab's table
    assert peak_flops(precision="bf16-mixed") == 989e12
    fake_cuda("Some Unknown GPU")
    assert peak_flops(precision="bf16-mixed") is None
