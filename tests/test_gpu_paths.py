"""The GPU-facing paths, checked for correctness on the CPU: no GPU is available where these
tests usually run, so what can be exercised without one is exercised here; on a GPU machine the
same file runs there (scripts/gpu-session.sh), each test under the suite's own time limit.

- bf16 autocast through every layer option (on a GPU, ``precision: auto`` means bf16-mixed);
- Lightning's ``bf16-mixed`` precision end to end;
- ``torch.compile`` of CEM models (recursion, preconditioners, KQ diagonal, checkpointing);
- MFU = model FLOP/s / the device's peak, as logged by the training callback.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cemlab.models import build_model, flops_per_token
from cemlab.models.config import ModelConfig
from gpu_support import gpu_file_timeout

pytestmark = gpu_file_timeout

NANO = dict(d_model=32, n_layers=2, n_heads=4, d_mlp=48, vocab_size=97, context_length=64)

VARIANTS = {
    "llama": dict(),
    "cem-attn exact per-head dplr T2": dict(attention="cem", attn_steps=2, attn_precond="dplr",
                                            kq_diagonal="per_head", exact_energy_gradient=True, attn_precond_rank=2),
    "cem-mlp T3 dplr": dict(mlp="cem", mlp_steps=3, mlp_precond="dplr", mlp_precond_rank=4),
    "cem T2 shared diag, checkpointed": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2,
                                             kq_diagonal="shared", attn_precond="diag", mlp_precond="diag",
                                             checkpoint_recursion=True),
}


def _loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bf16_autocast_matches_fp32(variant):
    """Under bf16 autocast every layer option runs, keeps its norms and softmax statistics
    stable, and gives the fp32 loss and gradient direction to bf16 accuracy."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**NANO, **VARIANTS[variant]))
    with torch.no_grad():  # non-zero diagonals, self biases and low-rank V, so every path is live
        for name, p in model.named_parameters():
            if name.endswith(("kq_diag", "self_bias", "precond.V")):
                p.normal_(0, 0.1)
    tokens = torch.randint(0, NANO["vocab_size"], (4, 48))

    loss32 = _loss(model, tokens)
    loss32.backward()
    g32 = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16 = _loss(model, tokens)
    loss16.backward()
    g16 = torch.cat([p.grad.flatten() for p in model.parameters()])

    assert torch.isfinite(loss16) and torch.isfinite(g16).all()
    assert loss16.item() == pytest.approx(loss32.item(), rel=2e-2)
    cos = F.cosine_similarity(g16.double(), g32.double(), dim=0)
    assert cos > 0.98, f"bf16 gradient direction differs: cos={cos:.4f}"


@pytest.mark.slow
def test_compiled_cem_model_matches_eager():
    """torch.compile (inductor, CPU) of a full CEM model with recursion, dplr preconditioners,
    a KQ diagonal and per-step checkpointing: same loss and gradients as eager."""
    torch.manual_seed(0)
    cfg = ModelConfig(**{**NANO, "n_layers": 1}, attention="cem", mlp="cem", attn_steps=2, mlp_steps=2,
                      attn_precond="dplr", mlp_precond="dplr", kq_diagonal="shared", attn_precond_rank=2,
                      mlp_precond_rank=2, checkpoint_recursion=True)
    eager = build_model(cfg)
    compiled_src = build_model(cfg)
    compiled_src.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_src)
    tokens = torch.randint(0, NANO["vocab_size"], (2, 33))
    l1, l2 = _loss(eager, tokens), _loss(compiled, tokens)
    l1.backward()
    l2.backward()
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-5)
    for (name, p1), p2 in zip(eager.named_parameters(), compiled_src.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
def test_lightning_bf16_mixed_trains_like_fp32(tmp_path, monkeypatch):
    """``train.precision: bf16-mixed`` (what ``auto`` picks on a GPU) runs through the whole
    training path and follows the fp32 loss curve. On the GPU or the CPU, whichever is here.

    What it leaves out, so that it finishes within seconds on a GPU too: ``torch.compile`` (both
    runs, and through it FlexAttention: compiling them took minutes there, during which Lightning
    holds a SIGTERM back until the next batch; the compiled paths have their own tests) and
    MLflow's system metrics thread; and the fp32 run asks for ``32-true``, which ``auto`` would
    have made bf16 on a GPU."""
    from pathlib import Path

    from cemlab.config import load_run_config
    from cemlab.tracking import schema
    from cemlab.train import train

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    default = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
    common = ["model.n_layers=1", "model.attention=cem", "model.attn_steps=2", "train.tokens=4096",
              "train.batch_size=8", "train.micro_batch_size=8", "train.val_interval=4", "train.test_batches=1",
              "train.num_threads=1", "data.max_chars=300000", f"data.cache_dir={tmp_path / 'cache'}",
              "train.compile=false", "tracking.system_metrics=false"]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    fp32 = train(load_run_config(default, [*common, "train.precision=32-true"]), tracking_uri=uri, resume=False)
    bf16 = train(load_run_config(default, [*common, "train.precision=bf16-mixed"]), tracking_uri=uri, resume=False)
    assert bf16.status == fp32.status == "finished"
    assert bf16.metrics[schema.TEST_LOSS] == pytest.approx(fp32.metrics[schema.TEST_LOSS], rel=2e-2)
    assert bf16.metrics[schema.TEST_LOSS] != fp32.metrics[schema.TEST_LOSS]  # it really ran in bf16
    # The GPU's measurements for trials per GPU (cemlab.sweeps.gpu_slots): logged on CUDA only, once.
    from mlflow.tracking import MlflowClient

    gpu_keys = {schema.GPU_PEAK_MIB, schema.GPU_TOTAL_MIB, schema.GPU_BUSY_SHARE}
    logged = set(MlflowClient(uri).get_run(bf16.run_id).data.metrics)
    assert schema.TEST_LOSS in logged
    assert (gpu_keys <= logged) if torch.cuda.is_available() else not (gpu_keys & logged)


def test_mfu_is_model_flops_over_device_peak(monkeypatch):
    """The training callback's MFU: tokens/s x training FLOPs per token / (peak x devices), with
    the peak looked up from the device name (A100 312, H100 SXM 989, H200 989 TFLOP/s bf16)."""
    from types import SimpleNamespace

    from cemlab import hardware
    from cemlab.tasks import get_task
    from cemlab.tracking import schema
    from cemlab.train.callbacks import RunCallback

    assert hardware.peak_flops("NVIDIA A100-SXM4-40GB") == 312e12
    assert hardware.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert hardware.peak_flops("NVIDIA H200") == 989e12
    assert hardware.peak_flops("Some CPU") is None

    cfg = ModelConfig.preset("162m", attention="cem", mlp="cem", attn_steps=2, mlp_steps=2)
    fpt = flops_per_token(cfg, 2048)["train"]
    plan = SimpleNamespace(tokens_per_step=128 * 2048, micro_batch_size=8, total_steps=10)
    cb = RunCallback(plan=plan, task=get_task("lm"), val_dataset=list(range(16)), energy_batch=None,
                     folder=None, state={}, flops_per_unit=fpt, val_batches=1,
                     peak_flops=hardware.peak_flops("NVIDIA H100 80GB HBM3"))
    cb._t_last = 10.0
    monkeypatch.setattr("cemlab.train.callbacks.time.perf_counter", lambda: 12.0)  # one step took 2 s
    cb._log_step(SimpleNamespace(world_size=8), SimpleNamespace(step_loss=3.0, step_lr=1e-3, grad_norm=None), step=1)
    tokens_per_s = 128 * 2048 / 2.0
    assert cb.latest[schema.TOKENS_PER_S] == pytest.approx(tokens_per_s)
    assert cb.latest[schema.FLOPS_PER_S] == pytest.approx(tokens_per_s * fpt)
    assert cb.latest[schema.MFU] == pytest.approx(tokens_per_s * fpt / (989e12 * 8))


def test_train_compile_auto_means_gpu_only():
    """``train.compile: auto`` (the default) compiles on a GPU and not on the CPU; true/false force it."""
    from cemlab.config import load_run_config

    assert load_run_config(None, []).train.compile == "auto"
    for value, gpu, cpu in (("auto", True, False), ("true", True, True), ("false", False, False)):
        t = load_run_config(None, [f"train.compile={value}"]).train
        assert (t.compiles("gpu"), t.compiles("cpu")) == (gpu, cpu), value
    with pytest.raises(ValueError, match="train.compile"):
        load_run_config(None, ["train.compile=sometimes"])
