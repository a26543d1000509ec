"""Accelerator peak throughput, for GPU-hour estimates (``cemlab plan``) and MFU logging.

Peak numbers are dense bf16 tensor-core FLOP/s from the vendors' data sheets (no 2:4 sparsity).
MFU (model FLOPs utilisation) = achieved model FLOP/s / peak; model FLOPs per token come from
``cemlab.models.flops_per_token``.
"""

from __future__ import annotations

#: Dense bf16 peak FLOP/s by accelerator kind.
PEAK_BF16_FLOPS: dict[str, float] = {
    "A100": 312e12,        # A100 SXM4 and PCIe, 40 and 80 GB
    "H100 SXM": 989e12,    # H100 SXM5 (also what a bare "H100" name means here)
    "H100 PCIe": 756e12,
    "H200": 989e12,        # H200 SXM
}

#: The kinds ``cemlab plan`` gives GPU-hour estimates for.
ESTIMATE_KINDS = ("A100", "H100 SXM")


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


def peak_flops(device_name: str | None = None) -> float | None:
    """Dense bf16 peak FLOP/s of ``device_name`` (default: the current CUDA device), or None when
    there is no CUDA device or its kind is not in :data:`PEAK_BF16_FLOPS`."""
    if device_name is None:
        import torch

        if not torch.cuda.is_available():
            return None
        device_name = torch.cuda.get_device_name()
    kind = gpu_kind(device_name)
    return PEAK_BF16_FLOPS[kind] if kind else None


def gpu_hours(flops: float, kind: str, mfu: float) -> float:
    """GPU-hours to execute ``flops`` model FLOPs on ``kind`` at utilisation ``mfu`` (0..1]."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    return flops / (PEAK_BF16_FLOPS[kind] * mfu) / 3600.0
