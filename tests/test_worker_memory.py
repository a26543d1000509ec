"""The memory limit of a trial's worker (``cemlab.sweeps.trial.memory``): the limit it works out,
and the guard ending its own process over the limit only while armed, with a line that names the
limit and the variable. The guard runs in a child interpreter here (it ends its process); a real
sweep's worker ended by it, and the trial's retry with unchanged numbers, are in
``tests/test_sweep_reuse.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from cemlab.sweeps.trial import memory

ROOT = Path(__file__).resolve().parents[1]


def _meminfo_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_the_limit_is_the_share_of_the_machine_or_the_variable():
    total = _meminfo_total()
    cgroup = Path("/sys/fs/cgroup/memory.max")
    if cgroup.is_file() and cgroup.read_text().strip().isdigit():
        total = min(total, int(cgroup.read_text()))
    expect = max(0.9 * 0.5 * total, min(4 << 30, 0.9 * total))
    assert memory.limit_from_env(0.5, env={}) == pytest.approx(expect, rel=1e-6)
    # a trial's small share of a machine with many cores: the floor, not a limit a small trial breaks
    assert memory.limit_from_env(1 / 64, env={}) == pytest.approx(min(4 << 30, 0.9 * total), rel=1e-6)
    assert memory.limit_from_env(1.0, env={memory.MEMORY_ENV: "1536"}) == 1536 << 20
    assert memory.limit_from_env(0.5, env={memory.MEMORY_ENV: "0"}) is None
    for bad in ("lots", "-3"):
        with pytest.raises(ValueError, match=rf"{memory.MEMORY_ENV}='{bad}'.*0 for none"):
            memory.limit_from_env(1.0, env={memory.MEMORY_ENV: bad})


def test_the_share_is_the_larger_of_cpus_and_gpus():
    assert memory.node_share(1, 0, {"CPU": 2.0}) == 0.5
    assert memory.node_share(4, 1, {"CPU": 96.0, "GPU": 8.0}) == 0.125
    assert memory.node_share(8, 0, {"CPU": 96.0, "GPU": 8.0}) == pytest.approx(8 / 96)
    assert memory.node_share(1, 0, {}) == 1.0   # Ray could not say: the whole machine


def test_resident_bytes_agrees_with_psutil():
    assert memory.resident_bytes() == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)


def _child(body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent("""\
        import sys, time
        from cemlab.sweeps.trial import memory
        base = memory.resident_bytes()
        guard = memory.MemoryGuard(base + (200 << 20), interval=0.05)
        """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_an_armed_guard_ends_its_process_over_the_limit_and_says_why():
    done = _child("""\
        guard.arm("t1")
        kept = b"\\x01" * (400 << 20)
        time.sleep(5)
        print("still running")
        """)
    assert done.returncode == memory.EXIT_CODE, done
    assert "still running" not in done.stdout
    assert "trial t1: worker pid" in done.stderr and "over its limit of" in done.stderr
    assert f"({memory.MEMORY_ENV}; 0 turns the limit off)" in done.stderr


def test_a_disarmed_guard_leaves_the_process_alone():
    done = _child("""\
        guard.arm("t1")
        guard.disarm()
        kept = b"\\x01" * (400 << 20)
        time.sleep(0.5)
        print("still running")
        """)
    assert done.returncode == 0 and "still running" in done.stdout, done


def test_a_worker_already_over_the_limit_ends_when_armed_before_the_trial_computes():
    done = _child("""\
        kept = b"\\x01" * (400 << 20)   # what the previous trial left, while disarmed
        time.sleep(0.3)
        guard.arm("t2")
        print("the trial started")
        """)
    assert done.returncode == memory.EXIT_CODE and "the trial started" not in done.stdout, done
    assert "trial t2:" in done.stderr


def test_a_trial_scope_frees_the_trials_cycles_and_freezes_what_survives_it():
    """A reused worker ends each trial with a full collection (the trial's reference cycles go) and
    freezes what survives (``gc.freeze``), so the next trial's collection does not walk the imported
    modules again; a cycle made by a later trial is still collected, one the scope does not own is
    not touched. In a child interpreter: freezing is for the whole process."""
    code = textwrap.dedent("""\
        import gc, weakref
        from cemlab.sweeps.trial.job import trial_scope

        class Node:
            pass

        def cycle():
            a, b = Node(), Node()
            a.b, b.a = b, a
            return weakref.ref(a)

        gc.disable()  # only the scope collects
        with trial_scope():
            first = cycle()
            kept = Node()
        frozen = gc.get_freeze_count()
        assert first() is None and frozen > 0, (first(), frozen)
        with trial_scope():
            second = cycle()
        assert second() is None
        print("ok", frozen, gc.get_freeze_count())
        """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done
