"""The CPU numerics switch: which instruction set torch's kernels and its math libraries may use.

A trial's numbers depend on the instruction set its kernels run on: torch's own vectorised kernels
(softmax, norms, reductions; ``torch.backends.cpu.get_cpu_capability()``) and MKL's matrix products
each have an AVX2 and an AVX-512 code path, and they sum in different orders. On one machine the
same config gives the same numbers run after run (bit-identical, measured); the same config on a
CPU of another kind may not (docs/reproducibility.md has the runs and the cost of each lever).

``CEMLAB_NUMERICS`` selects, for every cemlab process that trains (``cemlab train``, each sweep
trial, ``cemlab reproduce``):

``native`` (the default)
    every library picks the fastest code path of this CPU. Bit-identical on the same CPU kind and
    torch build; across kinds within the tolerance of docs/reproducibility.md.
``avx2``
    torch's kernels pinned to AVX2 (``ATEN_CPU_CAPABILITY=avx2``), MKL to its conditional numerical
    reproducibility branch for AVX2 (``MKL_CBWR=AVX2,STRICT``) and oneDNN to AVX2 at most
    (``ONEDNN_MAX_CPU_ISA=AVX2``): the same code path on every x86 CPU that has AVX2. Slower on an
    AVX-512 CPU (measured in docs/reproducibility.md). It removes the two code-path differences
    measured there (torch's and MKL's); whether CPUs of different kinds then agree bit for bit has
    not been measured.

The variables must be set before the process runs its first torch kernel: importing ``cemlab`` sets
them (:func:`export_requested`, which imports nothing but ``os``), so every cemlab process started with
``CEMLAB_NUMERICS`` in its environment (a sweep's Ray workers inherit it) has them before torch runs;
:func:`apply`, called by ``cemlab.train.run.train`` and ``cemlab reproduce`` before they build
anything, sets them too and refuses when torch's kernels already dispatched to another instruction
set (a mode set by hand in a running process). Variables a user set by hand win and are reported
as they are.
"""

from __future__ import annotations

import os

ENV = "CEMLAB_NUMERICS"
MODES: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
#: The library variables any mode may set.
LIBRARY_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


class NumericsError(ValueError):
    """A numerics mode that is unknown or cannot take effect in this process."""


def requested_mode() -> str:
    """The mode ``CEMLAB_NUMERICS`` asks for (``native`` when unset), refused naming the choices."""
    mode = (os.environ.get(ENV) or "native").strip().lower()
    if mode not in MODES:
        raise NumericsError(f"{ENV}={os.environ.get(ENV)!r} is not a numerics mode: choose one of "
                            f"{sorted(MODES)} (docs/reproducibility.md), or unset it for 'native'")
    return mode


def export_requested() -> None:
    """At ``import cemlab``: the library variables of ``$CEMLAB_NUMERICS``'s mode, set where unset. An
    unknown mode is left for :func:`apply` to refuse, with its message, where a run starts."""
    mode = (os.environ.get(ENV) or "native").strip().lower()
    for k, v in MODES.get(mode, {}).items():
        os.environ.setdefault(k, v)


def apply(mode: str | None = None) -> str:
    """Set the library variables of ``mode`` (default: :func:`requested_mode`) in this process's
    environment, so that its first torch kernel and every process it starts use them; returns the
    mode now active (:func:`active_mode`). Raises :class:`NumericsError` when torch's kernels have
    already dispatched to another instruction set in this process."""
    mode = requested_mode() if mode is None else mode
    if mode not in MODES:
        raise NumericsError(f"numerics mode {mode!r} is unknown: choose one of {sorted(MODES)}")
    if mode != "native":
        os.environ[ENV] = mode
    for k, v in MODES[mode].items():
        os.environ.setdefault(k, v)
    if mode != "native":
        import torch

        want = MODES[mode]["ATEN_CPU_CAPABILITY"].upper()
        have = torch.backends.cpu.get_cpu_capability()
        if have != want and os.environ.get("ATEN_CPU_CAPABILITY", "").upper() == want:
            raise NumericsError(f"{ENV}={mode}: torch's kernels already run on {have} in this process (a kernel ran "
                                f"before the mode was set); set {ENV}={mode} in the environment before starting it")
    return active_mode()


def active_mode() -> str:
    """The numerics this process runs with: a mode's name when its variables are set as that mode sets
    them (and no other library variable is), else ``custom(VAR=value ...)``."""
    set_vars = {k: os.environ[k] for k in LIBRARY_VARS if os.environ.get(k)}
    for name, env in MODES.items():
        if set_vars == env:
            return name
    return "custom(" + " ".join(f"{k}={v}" for k, v in sorted(set_vars.items())) + ")"
