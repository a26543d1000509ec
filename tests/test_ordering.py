"""The order make test runs its modules in (``tests/order_support.py``): checked by a simulation of
pytest-xdist's worksteal scheduling, written here from its documented rule (each worker first gets
a contiguous share, the pending tests over the workers left; a worker down to fewer than two queued
tests steals the back half of the longest queue, keeping two there)."""

from __future__ import annotations

import heapq
import random
from pathlib import Path

import pytest
from order_support import SECONDS_FILE, balanced_order, read_seconds, shares

TESTS = Path(__file__).resolve().parent


def worksteal_makespan(order: list[tuple[str, float]], workers: int) -> float:
    """When the last of ``workers`` processes ends ``order`` ((test, seconds) each), under worksteal."""
    queues, left = [], list(order)
    for i in range(workers):
        k = len(left) // (workers - i)
        queues.append(left[:k])
        left = left[k:]
    events = [(q[0][1], i) for i, q in enumerate(queues) if q]
    heapq.heapify(events)
    end = 0.0
    while events:
        t, i = heapq.heappop(events)
        queues[i].pop(0)
        end = max(end, t)
        if len(queues[i]) < 2:
            victim = max(range(workers), key=lambda j: len(queues[j]))
            n = min(len(queues[victim]) // 2, len(queues[victim]) - 2)
            if victim != i and n > 0:
                queues[i] += queues[victim][-n:]
                del queues[victim][-n:]
        if queues[i]:
            heapq.heappush(events, (t + queues[i][0][1], i))
    return end


def _suite(seed: int) -> tuple[dict[str, list[tuple[str, float]]], dict[str, float]]:
    """A suite like cemlab's: many light modules of many fast tests, a few heavy ones of a few long
    tests, the heavy ones alphabetically last (as the sweep modules are)."""
    rng = random.Random(seed)
    modules = {}
    for m in range(60):
        n = rng.randint(3, 40)
        modules[f"tests/test_a{m:02d}.py"] = [(f"a{m}-{j}", rng.uniform(0.01, 0.5)) for j in range(n)]
    for m in range(12):
        n = rng.randint(1, 5)
        modules[f"tests/test_z{m:02d}.py"] = [(f"z{m}-{j}", rng.uniform(20, 90)) for j in range(n)]
    seconds = {m: sum(d for _, d in tests) for m, tests in modules.items()}
    return modules, seconds


def test_the_processes_end_together_where_the_alphabetical_order_leaves_one_alone():
    over_before = over_after = 0.0
    for seed in range(8):
        modules, seconds = _suite(seed)
        alphabetical = [t for m in sorted(modules) for t in modules[m]]
        ordered = balanced_order(modules, seconds, 2)
        ideal = sum(seconds.values()) / 2
        before, after = worksteal_makespan(alphabetical, 2), worksteal_makespan(ordered, 2)
        print(f"\nseed {seed}: ideal {ideal:.1f} s, alphabetical {before:.1f} s, balanced {after:.1f} s")
        assert sorted(ordered) == sorted(alphabetical)
        assert after <= before + 0.5 and after <= ideal + 2.0   # within a light test or two of ideal
        over_before, over_after = over_before + before - ideal, over_after + after - ideal
    assert over_before > 10 * over_after + 30   # the alphabetical order left one process alone


def test_each_share_is_worksteals_size_heavy_first_and_modules_keep_their_order():
    modules, seconds = _suite(7)
    for workers in (1, 2, 3):
        ordered = balanced_order(modules, seconds, workers)
        position = {t: i for i, t in enumerate(ordered)}
        assert sorted(ordered) == sorted(t for ts in modules.values() for t in ts)
        start = 0
        for size in shares(len(ordered), workers):
            share = ordered[start:start + size]
            start += size
            for tests in modules.values():   # a module's tests in their order (a module may be split)
                mine = [position[t] for t in tests if t in share]
                assert mine == sorted(mine)
            heavy = [d for _, d in share if d >= 20]
            # the heavy tests open the share, the light ones follow (stealing spreads them)
            assert [d >= 20 for _, d in share] == [True] * len(heavy) + [False] * (len(share) - len(heavy))
    assert shares(1271, 2) == [635, 636] and shares(10, 3) == [3, 3, 4]


def test_a_module_missing_from_the_file_runs_among_the_light_ones():
    modules = {"tests/test_new.py": ["n1", "n2"], "tests/test_known.py": ["k1"]}
    assert balanced_order(modules, {"tests/test_known.py": 5.0}, 1) == ["k1", "n1", "n2"]


def test_the_seconds_file_names_only_modules_that_exist():
    seconds = read_seconds(SECONDS_FILE)
    assert len(seconds) > 50
    missing = [m for m in seconds if not (TESTS.parent / m).is_file()]
    assert not missing, f"refresh tests/module-seconds.json (make test PYTEST_ARGS=--store-module-seconds): {missing}"
