"""Where cemlab keeps its files: one runs folder per project (MLflow store, caches, checkpoints;
a run's checkpoint folder is ``cemlab.train.checkpoint.checkpoint_folder``).

The runs folder is ``$CEMLAB_RUNS_DIR`` when set, else ``./runs`` under the current directory,
always made absolute, because Ray trials change into a temporary directory: the sweep driver
resolves it once and hands the absolute path to every trial.
"""

from __future__ import annotations

import os
from pathlib import Path


def runs_dir() -> Path:
    p = Path(os.environ.get("CEMLAB_RUNS_DIR") or (Path.cwd() / "runs")).expanduser().resolve()
    p.mkdir(parents=True, exist_ok=True)
    return p


def _runs_subdir(name: str) -> Path:
    p = runs_dir() / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def cache_dir() -> Path:
    return _runs_subdir("cache")


def compile_cache_dir() -> Path:
    """``<runs>/compile-cache``: torch.compile's on-disk caches for every run of this runs folder
    (``cemlab.train.trainer.use_compile_cache``), so that a sweep's trials of one shape compile once."""
    return _runs_subdir("compile-cache")


def mlflow_dir() -> Path:
    return _runs_subdir("mlflow")


def sweep_log_dir(sweep: str, scale: str, runs: Path | None = None) -> Path:
    """A sweep's log folder at one scale, ``<runs>/logs/<sweep>-<scale>`` (not created): its trials'
    logs, ``driver.json``, ``summary.json`` and ``stages.jsonl``."""
    return (runs or runs_dir()) / "logs" / f"{sweep}-{scale}"


def reports_dir() -> Path:
    """``$CEMLAB_REPORTS_DIR`` or ``./reports``."""
    p = Path(os.environ.get("CEMLAB_REPORTS_DIR") or (Path.cwd() / "reports")).expanduser().resolve()
    p.mkdir(parents=True, exist_ok=True)
    return p
