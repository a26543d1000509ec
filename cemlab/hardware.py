"""Accelerator peak throughput, for GPU-hour estimates (``cemlab plan``) and MFU logging; and this
machine's memory (``resident_bytes``, ``machine_bytes``: a sweep worker's memory limit, the layer
benchmark).

Peak numbers are dense bf16 tensor-core FLOP/s from the vendors' data sheets (no 2:4 sparsity).
MFU (model FLOPs utilisation) = achieved model FLOP/s / peak; model FLOPs per token come from
``cemlab.models.flops_per_token``.

The peak of the device a run trains on comes from Lightning's device table
(``lightning.fabric.utilities.throughput.get_available_flops``: many more GPUs, and the peak of
the run's compute dtype, e.g. TF32 for ``32-true``); cemlab's own table below is kept for what
Lightning's cannot do: GPU-hour estimates for a named kind without that device (``cemlab plan``),
and the H200, which Lightning's name parsing does not find. ``tests/test_gpu_paths.py`` checks the
two tables agree where both have a kind.

Lightning's table of peak FLOPs (and torch, for the device) is imported inside :func:`peak_flops`,
so the GPU-hour arithmetic of ``cemlab plan`` does not load Lightning.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Dense bf16 peak FLOP/s by accelerator kind.
PEAK_BF16_FLOPS: dict[str, float] = {
    "A100": 312e12,        # A100 SXM4 and PCIe, 40 and 80 GB
    "H100 SXM": 989e12,    # H100 SXM5 (also what a bare "H100" name means here)
    "H100 PCIe": 756e12,
    "H200": 989e12,        # H200 SXM
}

#: The kinds ``cemlab plan`` gives GPU-hour estimates for.
ESTIMATE_KINDS = ("A100", "H100 SXM")
#: The GPU ``cemlab plan`` times a GPU scale's trials on when this machine has none it knows.
REFERENCE_KIND = "H100 SXM"


def gpu_kind(device_name: str) -> str | None:
    """The table key for a ``torch.cuda.get_device_name()`` string, or None if unknown.

    >>> gpu_kind("NVIDIA A100-SXM4-80GB"), gpu_kind("NVIDIA H100 80GB HBM3"), gpu_kind("NVIDIA H100 PCIe")
    ('A100', 'H100 SXM', 'H100 PCIe')
    """
    name = device_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name:
        return "H100 PCIe" if "PCIE" in name else "H100 SXM"
    if "A100" in name:
        return "A100"
    return None


#: ``train.precision`` -> the dtype its matrix products run in.
PRECISION_DTYPE = {"bf16-mixed": "bfloat16", "16-mixed": "float16", "32-true": "float32"}


def peak_flops(device_name: str | None = None, precision: str = "bf16-mixed") -> float | None:
    """Peak FLOP/s of the current CUDA device for ``precision`` (Lightning's table, else cemlab's
    bf16 one), or of a named device (``device_name``, cemlab's bf16 table); None without a CUDA
    device or when neither table knows it."""
    if device_name is None:
        import torch

        if not torch.cuda.is_available():
            return None
        from lightning.fabric.utilities.throughput import get_available_flops

        dtype = getattr(torch, PRECISION_DTYPE.get(precision, "bfloat16"))
        try:
            found = get_available_flops(torch.device("cuda"), dtype)
        except Exception:  # an unknown name warns and returns None; anything else: use cemlab's table
            found = None
        if found:
            return float(found)
        if dtype is not torch.bfloat16:
            return None  # cemlab's table is bf16 only
        device_name = torch.cuda.get_device_name()
    kind = gpu_kind(device_name)
    return PEAK_BF16_FLOPS[kind] if kind else None


def visible_gpus() -> tuple[str | None, int]:
    """The name of this machine's first CUDA device and how many there are ((None, 0) without one)."""
    import torch

    if not torch.cuda.is_available():
        return None, 0
    return torch.cuda.get_device_name(0), torch.cuda.device_count()


def gpu_hours(flops: float, kind: str, mfu: float) -> float:
    """GPU-hours to execute ``flops`` model FLOPs on ``kind`` at utilisation ``mfu`` (0..1]."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    return flops / (PEAK_BF16_FLOPS[kind] * mfu) / 3600.0


# -- this machine's memory (the sweep's worker memory limit, the layer benchmark) --------------

def resident_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/statm``; else psutil)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import psutil

        return int(psutil.Process().memory_info().rss)


def machine_bytes() -> int:
    """The memory this machine has, or the container's cgroup limit where that is lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total
