"""Shared test fixtures: an isolated runs folder, one token cache for the sweep tests, a local Ray
per module, and the guards every test runs under."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--store-module-seconds", action="store_true",
                     help="write each test module's seconds in this run to tests/module-seconds.json, the "
                          "order make test runs its modules in (tests/order_support.py)")


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config, items):
    """The modules in the order that ends make test's processes together (tests/order_support.py)."""
    from order_support import balanced_order, read_seconds

    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = balanced_order(modules, read_seconds(), workers)


_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    if config.getoption("--store-module-seconds") and not hasattr(config, "workerinput") and _MODULE_SECONDS:
        from order_support import read_seconds, write_seconds

        write_seconds({**read_seconds(), **_MODULE_SECONDS})


def pytest_collection_finish(session):
    """What collection imported (torch, Lightning, Ray, MLflow, pandas: the test modules' imports)
    is frozen out of the garbage collector's later full collections, as a trial worker's imports are
    (``cemlab.lazy.frozen_imports``): in a test process they took about a quarter of its time."""
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _quiet_env(tmp_path_factory):
    # Tests pick their own MLflow stores; never write into a user's server by accident.
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    # Nor into the checkout's runs folder: a test (or a module-scoped fixture, set up before the
    # runs_dir fixture of its tests) that names no runs folder gets this session's own.
    os.environ["CEMLAB_RUNS_DIR"] = str(tmp_path_factory.mktemp("session-runs"))
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Under make test's two pytest processes, each starts its local MLflow servers from its own
    # port range: a server one process just stopped cannot be answered for by the other's next one.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        from cemlab.tracking.server import DEFAULT_PORT, PORT_ENV, PORT_TRIES

        os.environ.setdefault(PORT_ENV, str(DEFAULT_PORT + 2 * PORT_TRIES * int(worker[2:])))
    # One thread: tests run beside Ray workers and MLflow servers on 2 cores, where more threads
    # oversubscribe the CPU (measured here: 2 threads up to 17x slower under load).
    torch.set_num_threads(1)
    yield


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    """An isolated cemlab runs folder (MLflow store, caches, checkpoints) for one test."""
    d = tmp_path / "runs"
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(d))
    return d


@pytest.fixture(autouse=True)
def _default_dtype_is_restored():
    """A test that changes torch's global default dtype must restore it (a leak changes the
    numerics of every later test in the process)."""
    before = torch.get_default_dtype()
    yield
    assert torch.get_default_dtype() == before, "the test left torch's default dtype changed"


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory) -> Path:
    """One token cache for the sweep tests of a pytest process (and the resume test's subprocesses);
    under ``make test``'s two processes, each has its own base folder and so its own cache."""
    return tmp_path_factory.getbasetemp() / "sweep-data-cache"


@pytest.fixture(scope="module")
def ray_local(request):
    """Local Ray for the whole module (the runner uses an initialised Ray as is), with the module's
    ``RAY_CPUS`` CPUs, else 1: a sweep then runs its trials one after another in one reused worker
    process, where 2 CPUs would start a second (each start costs about 7 s of imports, a third of
    the suite's CPU time), and ``make test`` keeps the machine's other core busy with its other
    pytest process. A module that tests trials at once sets ``RAY_CPUS = 2``."""
    import ray

    from ray_support import local_ray

    with local_ray(num_cpus=getattr(request.module, "RAY_CPUS", 1)):
        yield ray


@pytest.fixture
def sweep_dir(tmp_path, monkeypatch) -> Path:
    """A sweep folder with the project's scales.yaml for hand-written sweep files
    (``sweep_support.write_sweep``), named in ``CEMLAB_SWEEPS_DIR`` so that its sweeps load by name."""
    from sweep_support import local_sweeps

    d = local_sweeps(tmp_path)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(d))
    return d
