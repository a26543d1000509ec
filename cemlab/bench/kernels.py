"""Attention-kernel benchmark: Llama (SDPA), Hugging Face Llama, CEM attention on its reference
path (SDPA with a materialised bias), its flash path (CPU: the same bias constant, SDPA's flash
kernel) and its flex path (FlexAttention), full CEM at T = 1, 2 (and T = 8 checkpointed), with and
without ``torch.compile``, in one process and one run.

    cemlab bench kernels                          # GPU: 86m and 162m, context 2048, bf16
    cemlab bench kernels --device cpu             # CPU: preset small, seq 256, float32

The models of each (preset, compile) group are built and warmed up (compiled) once, then timed in
interleaved rounds (order rotated each round); the median round is reported, and each group's rows
are printed (and written to ``--csv``) as soon as it is done, so a run cut short keeps the groups
it finished. Columns:

- ``kernel``: the attention kernel each configuration actually gets: for SDPA the backend PyTorch
  chooses for those inputs (``torch._fused_sdp_choice``: FLASH_ATTENTION, EFFICIENT_ATTENTION,
  CUDNN_ATTENTION or MATH), ``FLASH_ATTENTION (..., constant mask)`` for the flash path's own
  call of the CPU flash kernel, ``flex`` for FlexAttention (``flex-dense`` where it runs eagerly,
  which materialises the scores).
- ``tok/s``: training tokens per second of forward + backward (``--pass train``, no optimizer
  step) or of the forward alone (``--pass forward``); per second of wall time on CUDA, of the
  process's CPU time on the CPU (not inflated by other work on a shared machine; exact with
  ``--threads 1``, as ``cemlab bench train`` does).
- ``MFU``: tokens/s x model FLOPs per token (``flops_per_token``: train or forward) / the device's
  dense bf16 peak (``cemlab.hardware``); n/a where the peak is unknown (CPUs).
- ``peak MiB``: on CUDA, ``torch.cuda.max_memory_allocated`` above what was allocated before the
  step (models at rest excluded); n/a on CPU (``cemlab bench layers`` measures CPU memory).
- ratios are to cemlab's Llama of the same preset and compile setting in the same run.

FlexAttention has no CPU backward in torch 2.13: on CPU the flex rows of ``--pass train`` print
n/a (``auto`` is the flash path there); ``--pass forward`` times them.

``transformers`` is imported only where the Hugging Face case is built, so the other cases run
without loading it (about 0.6 s); ``cemlab.hardware.peak_flops`` is looked up when the table is
made, so that a test can give it a known peak.
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from cemlab.models import build_model, flops_per_token
import cemlab.models.cem as cem
from cemlab.models.config import ModelConfig
from cemlab.models.hf import hf_config

#: name -> ModelConfig overrides (None = Hugging Face LlamaForCausalLM of the same size). The CEM
#: attention rows use the paper's options (ALiBi, self/other bias); ``diag`` adds a shared KQ diagonal.
VARIANTS: dict[str, dict | None] = {
    "llama": {},
    "hf-llama": None,
    "cem-attn ref": dict(attention="cem", attn_kernel="reference"),
    "cem-attn flash": dict(attention="cem", attn_kernel="flash"),
    "cem-attn flex": dict(attention="cem", attn_kernel="flex"),
    "cem-attn diag ref": dict(attention="cem", kq_diagonal="shared", attn_kernel="reference"),
    "cem-attn diag flash": dict(attention="cem", kq_diagonal="shared", attn_kernel="flash"),
    "cem-attn diag flex": dict(attention="cem", kq_diagonal="shared", attn_kernel="flex"),
    "cem T1": dict(attention="cem", mlp="cem"),
    "cem T2": dict(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2),
    "cem T8 ckpt": dict(attention="cem", mlp="cem", attn_steps=8, mlp_steps=8, checkpoint_recursion=True),
}
GPU_DEFAULT = ["llama", "hf-llama", "cem-attn ref", "cem-attn flex", "cem-attn diag ref", "cem-attn diag flex",
               "cem T1", "cem T2", "cem T8 ckpt"]
CPU_DEFAULT = ["llama", "hf-llama", "cem-attn ref", "cem-attn flash", "cem-attn flex", "cem T1", "cem T2"]


@dataclass
class Row:
    preset: str
    variant: str
    compiled: bool
    kernel: str
    tokens_per_s: float
    mfu: float | None
    peak_mib: float | None
    gflop_per_token: float
    throughput_vs_llama: float = float("nan")
    peak_vs_llama: float = float("nan")


def _backend_name(code: int) -> str:
    names = {int(b.value): n for n, b in SDPBackend.__members__.items()}
    return names.get(int(code), str(code))


def attention_kernels(forward, tokens, autocast, train: bool, compiled: bool = False) -> str:
    """The attention kernels one forward pass of ``forward`` uses (eager; with autograd when
    ``train``, which matters: a mask that needs a gradient rules out the flash kernels): SDPA's
    backend choice for each call's actual inputs, or flex (``compiled``: it will run compiled)."""
    seen: list[str] = []
    sdpa, flex, flash = F.scaled_dot_product_attention, cem.flex, cem.flash_attention

    def spy_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        choice = torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal)
        seen.append(f"{_backend_name(choice)} (Dh={q.shape[-1]}{', float mask' if attn_mask is not None else ''})")
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

    def spy_flex(q, k, v, *args, lse: bool = False):  # only the name is needed (a CPU backward would be refused)
        seen.append(f"flex (Dh={q.shape[-1]})" if q.is_cuda or compiled else f"flex-dense (Dh={q.shape[-1]})")
        o = q.new_zeros(*q.shape[:-1], v.shape[-1])
        return (o, q.new_zeros(q.shape[:-1], dtype=torch.float32)) if lse else o

    def spy_flash(q, k, v, mask, self_bias, scale):  # SDPA itself (causal, no mask) when mask is None
        if mask is not None:
            seen.append(f"FLASH_ATTENTION (Dh={q.shape[-1]}, constant mask)")
        return flash(q, k, v, mask, self_bias, scale)

    F.scaled_dot_product_attention, cem.flex, cem.flash_attention = spy_sdpa, spy_flex, spy_flash
    try:
        with torch.set_grad_enabled(train), autocast, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            forward(tokens)
    finally:
        F.scaled_dot_product_attention, cem.flex, cem.flash_attention = sdpa, flex, flash
    return ", ".join(dict.fromkeys(seen)) or "none"


class Case:
    """One (preset, variant, compile) model, built and warmed up once."""

    def __init__(self, preset: str, name: str, compiled: bool, args):
        self.preset, self.name, self.compiled, self.device = preset, name, compiled, args.device
        self.train = args.pass_ == "train"
        base = ModelConfig.preset(preset, context_length=max(args.seq, ModelConfig.preset(preset).context_length))
        overrides = VARIANTS[name]
        torch.manual_seed(0)
        if overrides is None:
            from transformers import LlamaForCausalLM

            hf_cfg = hf_config(base)
            hf_cfg._attn_implementation = "sdpa"
            self.model = LlamaForCausalLM(hf_cfg).to(args.device)
            eager = lambda t: self.model(t).logits  # noqa: E731
            self.cfg = base
        else:
            self.cfg = ModelConfig.model_validate({**base.model_dump(), **overrides})
            self.model = build_model(self.cfg).to(args.device)
            self.model.set_compiled(compiled)  # as training tells it: attn_kernel auto takes flex only compiled
            eager = self.model
        self.model.train(self.train)
        self.forward = torch.compile(eager) if compiled else eager
        g = torch.Generator(device=args.device).manual_seed(1)
        tokens = torch.randint(0, self.cfg.vocab_size, (args.batch, args.seq + 1), device=args.device, generator=g)
        self.x, self.y = tokens[:, :-1], tokens[:, 1:]
        self.autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if args.dtype == "bf16"
                         else torch.autocast(args.device, enabled=False))
        self.flops = flops_per_token(self.cfg, args.seq)["train" if self.train else "forward"]
        self.kernel = attention_kernels(eager, self.x, self.autocast, self.train, compiled)
        self.skip = None
        if self.train and args.device == "cpu" and "flex" in self.kernel:
            self.skip = "no CPU backward"
        self.times: list[float] = []
        self.peak: float | None = None

    def step(self):
        with self.autocast, torch.set_grad_enabled(self.train):
            logits = self.forward(self.x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        if self.train:
            loss.backward()
            for p in self.model.parameters():
                p.grad = None

    def _sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def warmup(self):
        if self.skip is None:
            self.step()
            self.step()

    def measure(self, steps: int):
        if self.skip is not None:
            return
        if self.peak is None and self.device == "cuda":
            self._sync()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            self.step()
            self._sync()
            self.peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        self._sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            self.step()
        self._sync()
        # CPU: the process's CPU time, which other work on a shared machine does not inflate
        # (exact with --threads 1); CUDA: wall time
        self.times.append(time.perf_counter() - t0 if self.device == "cuda" else time.process_time() - c0)

    def row(self, batch: int, seq: int, steps: int, peak_flops: float | None) -> Row:
        if self.skip is not None:
            return Row(self.preset, self.name, self.compiled, f"{self.kernel} [{self.skip}]", float("nan"), None,
                       None, self.flops / 1e9)
        tps = batch * seq * steps / statistics.median(self.times)
        return Row(self.preset, self.name, self.compiled, self.kernel, tps,
                   tps * self.flops / peak_flops if peak_flops else None, self.peak, self.flops / 1e9)


def add_arguments(p: argparse.ArgumentParser) -> None:
    cuda = torch.cuda.is_available()
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--presets", nargs="*", default=None, help="model presets (GPU: 86m 162m; CPU: small)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (GPU: 2048; CPU: 256)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (GPU: 8; CPU: 4)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="autocast dtype (GPU: bf16; CPU: fp32)")
    p.add_argument("--compile", nargs="*", choices=["off", "on"], default=None,
                   help="torch.compile settings to run (GPU: off on; CPU: off)")
    p.add_argument("--pass", dest="pass_", choices=["train", "forward"], default="train",
                   help="time forward+backward (train, default) or the forward alone")
    p.add_argument("--variants", nargs="*", default=None, help=f"subset of: {', '.join(VARIANTS)}")
    p.add_argument("--steps", type=int, default=None, help="timed steps per round (GPU: 10; CPU: 2)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    p.add_argument("--csv", default=None, help="also write the table to this CSV file")


def _defaults(args) -> None:
    gpu = args.device == "cuda"
    args.presets = args.presets or (["86m", "162m"] if gpu else ["small"])
    args.seq = args.seq or (2048 if gpu else 256)
    args.batch = args.batch or (8 if gpu else 4)
    args.dtype = args.dtype or ("bf16" if gpu else "fp32")
    args.compile = args.compile or (["off", "on"] if gpu else ["off"])
    args.variants = args.variants or (GPU_DEFAULT if gpu else CPU_DEFAULT)
    args.steps = args.steps or (10 if gpu else 2)


def groups(args) -> Iterator[list[Row]]:
    """The rows of each (preset, compile) group as soon as the group is measured: its models are
    built, warmed up (compiled) and timed in interleaved rounds, and freed before the next group,
    so that a run cut short still yields the groups it finished."""
    from cemlab.hardware import peak_flops

    _defaults(args)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but no CUDA device is visible; use --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    peak = peak_flops(device_name(args.device))
    for preset in args.presets:
        for setting in args.compile:
            cases = [Case(preset, v, setting == "on", args) for v in args.variants]
            for case in cases:
                case.warmup()
            order = list(cases)
            for _ in range(args.rounds):
                for case in order:
                    case.measure(args.steps)
                order = order[1:] + order[:1]
            rows = [c.row(args.batch, args.seq, args.steps, peak) for c in cases]
            base = next((r for r in rows if r.variant == "llama"), None)
            for r in rows:
                if base is not None:
                    r.throughput_vs_llama = r.tokens_per_s / base.tokens_per_s
                    if r.peak_mib is not None and base.peak_mib:
                        r.peak_vs_llama = r.peak_mib / base.peak_mib
            del cases, order
            if args.device == "cuda":
                torch.cuda.empty_cache()
            yield rows


def run(args) -> list[Row]:
    """Every group's rows (``groups``), in order."""
    return [r for rows in groups(args) for r in rows]


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor()) if sys.platform.startswith("linux") else platform.processor()
    return f"{model} ({torch.get_num_threads()} threads)"


def print_header(args) -> None:
    print(f"# cemlab bench kernels: device={device_name(args.device)} torch={torch.__version__} pass={args.pass_} "
          f"dtype={args.dtype} batch={args.batch} seq={args.seq} steps={args.steps} rounds={args.rounds} (median; "
          f"{'wall' if args.device == 'cuda' else 'process CPU'} time)")
    print(f"{'preset':<7}{'variant':<19}{'compile':>8}{'tok/s':>10}{'x llama':>8}{'MFU':>7}{'peak MiB':>10}"
          f"{'x llama':>8}{'GFLOP/tok':>10}  kernel", flush=True)


def print_rows(rows: list[Row]) -> None:
    """One group's rows, and T=8 checkpointed's memory against T=1 where the group has both."""
    for r in rows:
        mfu = f"{100 * r.mfu:.1f}%" if r.mfu is not None else "n/a"
        peak = f"{r.peak_mib:.0f}" if r.peak_mib is not None else "n/a"
        print(f"{r.preset:<7}{r.variant:<19}{'on' if r.compiled else 'off':>8}{r.tokens_per_s:>10.0f}"
              f"{r.throughput_vs_llama:>8.2f}{mfu:>7}{peak:>10}{r.peak_vs_llama:>8.2f}{r.gflop_per_token:>10.3f}  {r.kernel}")
    t1 = next((r for r in rows if r.variant == "cem T1"), None)
    for r in rows:
        if r.variant == "cem T8 ckpt" and t1 is not None and r.peak_mib and t1.peak_mib:
            print(f"{r.preset} compile={'on' if r.compiled else 'off'}: T=8 checkpointed peak memory "
                  f"x{r.peak_mib / t1.peak_mib:.2f} of T=1")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cemlab bench kernels", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    out = writer = None
    try:
        for i, rows in enumerate(groups(args)):
            if i == 0:
                print_header(args)
            print_rows(rows)
            if args.csv:  # written as each group ends: a run cut short keeps what it measured
                if out is None:
                    out = open(args.csv, "w", newline="")
                    writer = csv.DictWriter(out, fieldnames=list(asdict(rows[0])))
                    writer.writeheader()
                writer.writerows(asdict(r) for r in rows)
                out.flush()
    except ValueError as e:
        print(f"cemlab bench kernels: {e}", file=sys.stderr)
        return 2
    finally:
        if out is not None:
            out.close()
    if args.csv:
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
