"""Layer benchmark: forward+backward throughput and memory of Llama, CEM variants and Hugging Face.

    cemlab bench layers [--preset small] [--batch 4] [--seq 512] [--rounds 3] [--csv out.csv]

Every variant is measured in its own fresh process (so peak memory is its own), in interleaved
rounds (variant order rotated each round), and the median round is reported: this keeps the
ratios honest on a machine shared with other work. Columns:

- ``tok/s``: training tokens per second of forward + backward (no optimizer step).
- ``peak MiB``: on CUDA, ``torch.cuda.max_memory_allocated`` above the model and batch at rest; on
  CPU, the peak resident set size above the size before the first step, in a separate process whose
  large allocations bypass glibc's cache (so it follows live gradients and activations).
- ``saved MiB``: bytes of activations saved for backward (``saved_tensors_hooks``), exact and
  machine-independent; this is what activation checkpointing reduces.
- ``GFLOP/tok``: model FLOPs per token (training, ``flops_per_token``); ``MFU`` where the
  device's peak is known (``cemlab.hardware``).
- ratios are to cemlab's Llama of the same size in the same run.

``transformers`` is imported only where the Hugging Face variant is built, so the other variants run
without loading it (about 0.6 s).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import ctypes.util
import multiprocessing as mp
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from cemlab.hardware import peak_flops, resident_bytes
from cemlab.models import build_model, count_parameters, flops_per_token
from cemlab.models.config import ModelConfig
from cemlab.models.hf import hf_config

#: name -> ModelConfig overrides (None = Hugging Face LlamaForCausalLM of the same size)
VARIANTS: dict[str, dict | None] = {
    "llama": {},
    "hf-llama": None,
    "cem-attn T1": dict(attention="cem"),
    "cem-attn T2": dict(attention="cem", attn_steps=2),
    "cem-mlp T1": dict(mlp="cem"),
    "cem-mlp T2": dict(mlp="cem", mlp_steps=2),
    "cem T1": dict(attention="cem", mlp="cem"),
    "cem T2": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2),
    "cem T2 dplr": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, attn_precond="dplr", mlp_precond="dplr"),
    "cem T8": dict(attention="cem", mlp="cem", attn_steps=8, mlp_steps=8),
    "cem T8 ckpt": dict(attention="cem", mlp="cem", attn_steps=8, mlp_steps=8, checkpoint_recursion=True),
}


@dataclass
class Result:
    variant: str
    tokens_per_s: float
    peak_mib: float
    saved_mib: float
    gflop_per_token: float
    mfu: float | None
    params_m: float


def _build(preset: str, overrides: dict | None, seq: int, device: str):
    cfg = ModelConfig.preset(preset, context_length=max(seq, ModelConfig.preset(preset).context_length))
    if overrides is None:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(hf_config(cfg)).to(device)
        return cfg, model, lambda t: model(t).logits
    cfg = cfg.model_copy(update=overrides)
    cfg = ModelConfig.model_validate(cfg.model_dump())
    model = build_model(cfg).to(device)
    return cfg, model, model


def _measure(preset: str, name: str, overrides: dict | None, batch: int, seq: int, steps: int, device: str,
             threads: int | None, memory_only: bool = False) -> Result:
    if threads:
        torch.set_num_threads(threads)
    if memory_only and device == "cpu":
        _release_freed_memory()
    torch.manual_seed(0)
    cfg, model, fwd = _build(preset, overrides, seq, device)
    model.train()
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)

    def step():
        with autocast:
            logits = fwd(x)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        for p in model.parameters():
            p.grad = None

    # exact activation bytes saved for backward
    saved = 0
    seen: set = set()

    def pack(t):
        nonlocal saved
        key = (t.untyped_storage().data_ptr(), t.dtype)
        if key not in seen:
            seen.add(key)
            saved += t.untyped_storage().nbytes()
        return t

    # Memory above the model, its gradients-to-be and the batch at rest: the baseline is taken
    # before any step, since the allocator keeps what a first step allocated.
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resident_bytes()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast:
            logits = fwd(x)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    del logits, loss
    for p in model.parameters():
        p.grad = None
    step()  # warm-up (kernels, allocator)
    t0 = time.perf_counter()
    for _ in range(1 if memory_only else steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    dt = time.perf_counter() - t0
    tps = float("nan") if memory_only else batch * seq * steps / dt
    fpt = flops_per_token(cfg if overrides is not None else cfg, seq)["train"]
    peak_dev = peak_flops(torch.cuda.get_device_name() if device == "cuda" else None)
    n_params = sum(p.numel() for p in model.parameters()) if overrides is None else count_parameters(model)["total"]
    return Result(name, tps, max(peak, 0) / 2**20, saved / 2**20, fpt / 1e9,
                  (tps * fpt / peak_dev) if peak_dev else None, n_params / 1e6)


def _worker(args, queue):
    try:
        queue.put(_measure(*args))
    except Exception as e:  # report, don't hang the parent
        queue.put(e)


def run_variant(*args, memory_only: bool = False) -> Result:
    """Measure one variant in a fresh process (``memory_only``: peak memory, no timing)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_worker, args=(args + (memory_only,), queue))
    p.start()
    out = queue.get()
    p.join()
    if isinstance(out, Exception):
        raise out
    return out


def _release_freed_memory() -> None:
    """Serve large allocations from mmap, returned to the OS when freed (glibc ``mallopt``), so the
    process's resident size follows live memory instead of freed-but-cached blocks. Only for the
    CPU memory measurement: timing keeps the default allocator, whose caching is part of normal
    training speed."""
    M_MMAP_THRESHOLD = -3
    try:
        ctypes.CDLL(ctypes.util.find_library("c")).mallopt(M_MMAP_THRESHOLD, 65536)
    except (OSError, AttributeError):  # not glibc: RSS then includes the allocator's cache
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cemlab bench layers", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="small", help="model size preset (default: small)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=4, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), help=f"subset of: {', '.join(VARIANTS)}")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    p.add_argument("--csv", default=None, help="also write the table to this CSV file")


def run(args) -> int:
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        print(f"unknown variants {unknown}; choose from {list(VARIANTS)}", file=sys.stderr)
        return 2
    rounds: dict[str, list[Result]] = {v: [] for v in args.variants}
    order = list(args.variants)
    for r in range(args.rounds):
        for name in order:
            rounds[name].append(run_variant(args.preset, name, VARIANTS[name], args.batch, args.seq, args.steps,
                                            args.device, args.threads))
        order = order[1:] + order[:1]
    results = {}
    for name, rs in rounds.items():
        med = statistics.median(r.tokens_per_s for r in rs)
        best = min(rs, key=lambda r: abs(r.tokens_per_s - med))
        peak = max(r.peak_mib for r in rs)
        if args.device == "cpu":  # RSS of the timing processes includes allocator caching
            peak = run_variant(args.preset, name, VARIANTS[name], args.batch, args.seq, args.steps,
                               args.device, args.threads, memory_only=True).peak_mib
        results[name] = Result(**{**asdict(best), "peak_mib": peak})
    ref = results.get("llama")
    print(f"# cemlab bench layers: preset={args.preset} batch={args.batch} seq={args.seq} device={args.device} "
          f"threads={torch.get_num_threads() if args.threads is None else args.threads} rounds={args.rounds} (median)")
    head = f"{'variant':<14}{'params M':>9}{'tok/s':>10}{'x llama':>9}{'peak MiB':>10}{'x llama':>9}{'saved MiB':>10}{'GFLOP/tok':>10}{'MFU':>7}"
    print(head)
    rows = []
    for name, r in results.items():
        tr = r.tokens_per_s / ref.tokens_per_s if ref else float("nan")
        mr = r.peak_mib / ref.peak_mib if ref and ref.peak_mib else float("nan")
        mfu = f"{100 * r.mfu:.1f}%" if r.mfu is not None else "n/a"
        print(f"{name:<14}{r.params_m:>9.2f}{r.tokens_per_s:>10.0f}{tr:>9.2f}{r.peak_mib:>10.1f}{mr:>9.2f}"
              f"{r.saved_mib:>10.1f}{r.gflop_per_token:>10.3f}{mfu:>7}")
        rows.append({**asdict(r), "throughput_vs_llama": tr, "peak_vs_llama": mr})
    if "cem T8 ckpt" in results and "cem T1" in results:
        t1, t8c = results["cem T1"], results["cem T8 ckpt"]
        print(f"\nT=8 checkpointed vs T=1: peak memory x{t8c.peak_mib / t1.peak_mib:.2f}, "
              f"saved activations x{t8c.saved_mib / t1.saved_mib:.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
