"""Trials per GPU from measurements: how many trials of a GPU scale share one GPU.

A scale's ``resources.gpus_per_worker`` (0.25 at ``gpu``: 4 trials per GPU) is a guess until a sweep
has run there. Each trial on CUDA logs, once at the end of training (``cemlab.train.callbacks.gpu_usage``),
its peak GPU memory, the device's total memory and the GPU's busy share (time in training steps over
the trial's slot time). :func:`trials_per_gpu` turns those of the finished runs into a count:

- memory: at most ``floor(headroom * total / max peak)`` trials fit side by side (the largest trial
  decides; ``headroom`` leaves room for the CUDA context, allocator fragmentation and compile);
- utilisation: at most ``ceil(1 / mean busy share)`` trials keep the GPU busy (a trial that trains 25%
  of its slot time leaves room for about 4; one busy 100% for 1); a share of 0 sets no bound;
- CPUs: at most ``cpus_per_node // cpus_per_trial`` trials run on the node at all;
- at least 1, at most ``cap``.

``cemlab plan SWEEP --scale gpu`` prints the count with its reasons (:func:`slots_plan`, ``Plan.gpu_slots``),
and ``cemlab sweep ... --gpu-slots measured`` runs the sweep with ``gpus_per_worker = 1 / n``
(``cemlab.sweeps.plan.measured_share``; the share is the sweep's runtime choice, kept on its ``Invocation`` and
applied to every trial it runs, the grid's and those its looks add: :func:`with_share`). Without measurements the plan
prints no line and the sweep is refused, saying so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.tracking import schema

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


MIB_PER_GIB = 1024.0


def trials_per_gpu(peak_mib: list[float], total_mib: float, busy: list[float], cpus_per_node: int,
                   cpus_per_trial: int, headroom: float = 0.85, cap: int = 8) -> tuple[int, str]:
    """How many trials share one GPU, and a one-line reason (module docstring). With no memory
    measurement (or no total), returns ``(0, reason)``: 0 means keep the scale's setting."""
    if not peak_mib or not total_mib or total_mib <= 0:
        return 0, "no GPU memory measured: keeping the scale's setting"
    peak = max(peak_mib)
    by_memory = max(1, math.floor(headroom * total_mib / peak)) if peak > 0 else cap
    parts = [f"memory: {peak / MIB_PER_GIB:.3g} of {total_mib / MIB_PER_GIB:.3g} GiB at peak allows {by_memory}"]
    bounds = [by_memory]
    share = sum(busy) / len(busy) if busy else None
    if share is not None and share > 0:
        by_busy = max(1, math.ceil(1.0 / min(share, 1.0)))
        bounds.append(by_busy)
        parts.append(f"the GPU busy {share:.0%} of a trial allows {by_busy}")
    elif share is not None:
        parts.append("the GPU busy 0% of a trial: no bound")
    else:
        parts.append("no busy share measured: no bound")
    by_cpus = max(1, cpus_per_node // max(cpus_per_trial, 1))
    bounds.append(by_cpus)
    parts.append(f"{cpus_per_node} CPUs / {cpus_per_trial} allows {by_cpus}")
    n = max(1, min(min(bounds), cap))
    if min(bounds) > cap:
        parts.append(f"capped at {cap}")
    return n, "; ".join(parts)


@dataclass
class Measured:
    """The GPU measurements of a scale's finished runs (``system/gpu_*`` metrics) and the count they give."""
    runs: int
    peak_mib: list[float]
    total_mib: float
    busy: list[float]
    count: int            # 0: no measurement, keep the scale's setting
    reason: str


def measurements(rows: list, client: "MlflowClient") -> tuple[list[float], float, list[float], int]:
    """Peak MiB of each finished run of a plan's ``rows`` (``TrialPlan``, read with a store: a run id
    where finished) that holds a GPU and logged one, the smallest total MiB among them, their busy
    shares and the number of such runs."""
    peaks, totals, busy = [], [], []
    for r in rows:
        if r.status != "done" or not r.run_id or r.trial.resources.gpus <= 0:
            continue
        m = client.get_run(r.run_id).data.metrics
        if schema.GPU_PEAK_MIB not in m or schema.GPU_TOTAL_MIB not in m:
            continue
        peaks.append(m[schema.GPU_PEAK_MIB])
        totals.append(m[schema.GPU_TOTAL_MIB])
        if schema.GPU_BUSY_SHARE in m:
            busy.append(m[schema.GPU_BUSY_SHARE])
    return peaks, min(totals, default=0.0), busy, len(peaks)


def cpus_per_node() -> int:
    """The CPUs of this machine (the node a local sweep runs its trials on)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def measured_slots(rows: list, client: "MlflowClient", cpus: int | None = None) -> Measured:
    """:func:`trials_per_gpu` of a plan's ``rows``' finished runs with GPU measurements, for the CPUs of this node."""
    peaks, total, busy, runs = measurements(rows, client)
    gpu_rows = [r for r in rows if r.trial.resources.gpus > 0]
    per_trial = max((r.trial.resources.workers * r.trial.resources.cpus_per_worker for r in gpu_rows), default=1)
    count, reason = trials_per_gpu(peaks, total, busy, cpus if cpus is not None else cpus_per_node(), int(per_trial))
    return Measured(runs=runs, peak_mib=peaks, total_mib=total, busy=busy, count=count, reason=reason)


def slots_line(m: Measured, scale_gpus_per_worker: float) -> str:
    """The plan's line: ``Trials per GPU: measured 3 (...) against the scale's 4 (gpus_per_worker 0.25)``."""
    scale_n = f"{1 / scale_gpus_per_worker:g}" if scale_gpus_per_worker > 0 else "-"
    against = f"against the scale's {scale_n} (gpus_per_worker {scale_gpus_per_worker:g})"
    if not m.count:
        return f"Trials per GPU: not measured ({m.reason}); {against}"
    return f"Trials per GPU: measured {m.count} ({m.reason}; {m.runs} finished runs) {against}"


def slots_plan(rows: list, client: "MlflowClient", cpus: int | None = None) -> dict[str, Any]:
    """``Plan.gpu_slots``: for a scale whose trials hold GPUs and with finished runs that measured theirs,
    the measured count, its reason, the runs behind it, the scale's own trials per GPU and the plan's line;
    else empty (no line printed)."""
    gpu_rows = [r for r in rows if r.trial.resources.gpus > 0]
    if not gpu_rows:
        return {}
    m = measured_slots(gpu_rows, client, cpus)
    if not m.runs:
        return {}
    share = min(r.trial.resources.gpus_per_worker for r in gpu_rows)
    return {"count": m.count, "reason": m.reason, "runs": m.runs, "scale_trials_per_gpu": 1 / share,
            "line": slots_line(m, share)}


class NoMeasurement(SweepError):
    """``--gpu-slots measured`` with no finished run that measured its GPU."""


def with_share(trials, share: float | None) -> list:
    """``trials`` with every one that holds a GPU asking for ``share`` GPUs per worker instead of its scale's
    setting (``cemlab sweep --gpu-slots measured``); None, or a trial without a GPU: unchanged. Resources are
    outside the config hash: the trials stay the same runs."""
    if share is None:
        return list(trials)
    return [replace(t, resources=t.resources.model_copy(update={"gpus_per_worker": share}))
            if t.resources.gpus_per_worker > 0 else t for t in trials]
