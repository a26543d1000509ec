"""A memory limit for each trial's worker process, so that a trial that leaks memory takes down
only its own worker, never the trial in the next slot, and never changes a number.

A grid's trials run in warm workers (Tune's ``reuse_actors``): memory a trial leaks where Python's
collector cannot free it (a native allocation a library keeps, a module-level cache) stays in the
worker for its next trials. Without a limit, a leak grows until the node runs out of memory, and
then Ray's memory monitor (or the kernel) kills *some* worker, possibly the other slot's trial.
With it, a :class:`MemoryGuard` thread in each worker checks the process's resident memory every
``interval`` seconds while a trial trains and tests; over the limit it writes one line to the
trial's log (the limit, the resident size, and how to change it) and ends its own process. Ray
reports the worker dead, Tune retries the trial (``--retries``) from its last checkpoint on a fresh
worker, and exact resume gives it the numbers an unkilled run gets (``tests/test_sweep_reuse.py``).
A worker that a finished trial left over the limit is ended as its next trial starts, before any
compute, so that trial too runs on a fresh worker.

Why not retire a leaking worker between trials instead: Tune's function trainables give no way to
decline reuse of a cached worker without reporting an error for the next trial, and a cached
worker that exits breaks Tune's own bookkeeping; so the guard acts only while a trial runs (armed
around its training and test, disarmed before its final report), where a dead worker is an
ordinary trial failure. What it costs: a breach spends one of the trial's retries.

The limit (``CEMLAB_WORKER_MEMORY_MB``): unset, the trial's share of the node's memory, 90% of
(the memory Linux gives this machine or container) x the larger of (the trial's CPUs / the node's
CPUs, its GPUs / the node's GPUs), and at least 4 GiB (or 90% of a smaller machine), so that a
small machine with many cores does not end healthy trials; a number of MiB sets it; ``0`` turns
the guard off. It watches
the trial's own process (a trial of several Ray Train workers is not guarded: its Tune process
only waits for them).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from cemlab.hardware import machine_bytes, resident_bytes

MEMORY_ENV = "CEMLAB_WORKER_MEMORY_MB"
SHARE = 0.9               # of the trial's share of the node's memory
EXIT_CODE = 75            # the worker's exit status after a breach (EX_TEMPFAIL: try again)
MIB = 1 << 20
FLOOR = 4 << 30           # the least default limit, bytes


def limit_from_env(share: float, env: dict[str, str] | None = None) -> int | None:
    """The worker's limit in bytes (None: no guard) for a trial holding ``share`` of its node (a
    fraction in (0, 1]): ``$CEMLAB_WORKER_MEMORY_MB`` if set (0: none), else 90% of that share of
    the machine's memory, at least ``FLOOR`` (or 90% of a smaller machine). A value that is not a number is a ``ValueError`` naming the variable."""
    text = (env if env is not None else os.environ).get(MEMORY_ENV, "").strip()
    if text:
        try:
            mb = float(text)
        except ValueError:
            raise ValueError(f"{MEMORY_ENV}={text!r} is not a number: give the memory limit of a trial's worker "
                             f"in MiB, or 0 for none") from None
        if mb < 0:
            raise ValueError(f"{MEMORY_ENV}={text!r} is negative: give the limit in MiB, or 0 for none")
        return int(mb * MIB) or None
    total = machine_bytes()
    # at least FLOOR (or 90% of a smaller machine): on a laptop with many cores and little memory a
    # trial's share would fall below what a healthy small trial holds
    return int(max(SHARE * min(1.0, max(share, 0.0)) * total, min(FLOOR, SHARE * total))) or None


def node_share(cpus: float, gpus: float, node: dict[str, float]) -> float:
    """The larger of the trial's CPUs and GPUs as a fraction of its node's (Ray's resource dict)."""
    parts = [cpus / node["CPU"] if node.get("CPU") else 0.0, gpus / node["GPU"] if gpus and node.get("GPU") else 0.0]
    return max(parts) or 1.0


def this_node_resources() -> dict[str, float]:
    """Ray's resources of the node this worker runs on (empty where Ray cannot say)."""
    import ray

    try:
        me = ray.get_runtime_context().get_node_id()
        for n in ray.nodes():
            if n.get("NodeID") == me:
                return dict(n.get("Resources") or {})
    except Exception:  # the limit falls back to the CPU count of this machine
        pass
    return {"CPU": float(os.cpu_count() or 1)}


class MemoryGuard:
    """A daemon thread that ends this process when its resident memory exceeds ``limit`` bytes
    while armed (see the module docstring). ``arm`` checks at once, so a worker that a previous
    trial left over the limit ends before the new trial computes anything."""

    def __init__(self, limit: int, interval: float = 0.25):
        self.limit, self.interval = int(limit), float(interval)
        self._trial: str | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="cemlab-memory-guard", daemon=True)
        self._thread.start()

    def arm(self, trial_id: str) -> None:
        with self._lock:
            self._trial = trial_id
        self.check()

    def disarm(self) -> None:
        with self._lock:
            self._trial = None

    def check(self) -> None:
        """End the process if armed and over the limit."""
        with self._lock:
            trial = self._trial
        if trial is None:
            return
        rss = resident_bytes()
        if rss > self.limit:
            self._breach(trial, rss)

    def _breach(self, trial: str, rss: int) -> None:
        sys.stderr.write(
            f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial}: worker pid {os.getpid()} holds "
            f"{rss / MIB:.0f} MiB, over its limit of {self.limit / MIB:.0f} MiB ({MEMORY_ENV}; 0 turns the limit "
            f"off); ending this worker so that the trial resumes from its last checkpoint on a fresh one, "
            f"and no other trial runs out of memory\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)

    def _watch(self) -> None:
        while True:
            time.sleep(self.interval)
            self.check()


_guard: MemoryGuard | None = None
_node: dict[str, float] | None = None


def guard_for(cpus: float, gpus: float) -> MemoryGuard | None:
    """This process's guard with the limit for a trial of ``cpus`` and ``gpus`` under the current
    environment (None when the limit is off). The thread is made once per process; the limit is
    worked out again for every trial (the variable travels with each trial's job)."""
    global _guard, _node
    if os.environ.get(MEMORY_ENV, "").strip():
        share = 1.0
    else:
        if _node is None:
            _node = this_node_resources()
        share = node_share(cpus, gpus, _node)
    limit = limit_from_env(share)
    if limit is None:
        return None
    if _guard is None:
        _guard = MemoryGuard(limit)
    _guard.limit = limit
    return _guard
