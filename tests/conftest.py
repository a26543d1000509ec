"""Shared test fixtures."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _quiet_env():
    # Tests pick their own MLflow stores; never write into a user's server by accident.
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
