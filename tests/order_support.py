"""The order ``make test`` runs its modules in, so that its two processes end together.

``--dist worksteal`` (pytest-xdist) hands worker i a contiguous share of the collected tests (the
pending list's length over the workers left), and a worker that runs dry steals the back half of
another's queue. In the alphabetical order the sweep modules (``test_sweep_run_*``) came last in one
share: that process ran them one after another while the other had nothing left to steal, one core
idle for the last 72 s of a 22-minute run (docs/performance.md, "The test suite").

So modules are ordered by their measured seconds (``tests/module-seconds.json``): dealt, heaviest
first, to the share with the least so far (greedy LPT), each share heavy first, and the lightest tests
moved between shares until each is exactly the size worksteal gives it. What is left at the end of
every queue is then the light in-process tests, which stealing spreads. A module keeps its tests'
order; one missing from the file counts 0 s (it runs among the light ones) until the file is
refreshed: ``make test PYTEST_ARGS=--store-module-seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SECONDS_FILE = Path(__file__).with_name("module-seconds.json")


def shares(n: int, workers: int) -> list[int]:
    """How many of ``n`` tests worksteal first hands each of ``workers`` (in turn, the pending
    tests over the workers left)."""
    out, left = [], n
    for i in range(workers):
        out.append(left // (workers - i))
        left -= out[-1]
    return out


def balanced_order(modules: dict[Hashable, Sequence[T]], seconds: dict[Hashable, float], workers: int) -> list[T]:
    """The tests of ``modules`` (module -> its tests, in order) for ``workers`` worksteal processes:
    see the module's docstring."""
    cost = {m: float(seconds.get(m, 0.0)) for m in modules}
    heavy_first = sorted(modules, key=lambda m: (-cost[m], str(m)))
    if workers < 2:
        return [t for m in heavy_first for t in modules[m]]
    groups: list[list[Hashable]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for m in heavy_first:
        k = min(range(workers), key=lambda k: (load[k], k))
        groups[k].append(m)
        load[k] += cost[m]
    queues = [[t for m in g for t in modules[m]] for g in groups]
    sizes = shares(sum(map(len, queues)), workers)
    spare: list[T] = []
    for q, size in zip(queues, sizes):
        spare += q[size:]
        del q[size:]
    for q, size in zip(queues, sizes):
        take = size - len(q)
        q += spare[:take]
        del spare[:take]
    return [t for q in queues for t in q]


def read_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    """Module path (``tests/test_x.py``) -> seconds, from ``path``; empty if there is none."""
    try:
        return json.loads(path.read_text())["seconds"]
    except FileNotFoundError:
        return {}


def write_seconds(seconds: dict[str, float], path: Path = SECONDS_FILE) -> None:
    data = {"about": "Seconds per test module (setup + call + teardown) in one make test run; "
                     "tests/order_support.py orders the modules by them. Refresh: "
                     "make test PYTEST_ARGS=--store-module-seconds",
            "seconds": {m: round(s, 1) for m, s in sorted(seconds.items())}}
    path.write_text(json.dumps(data, indent=1) + "\n")
