"""A run's checkpoint folder: ``last.ckpt`` (Lightning checkpoint) and ``state.json`` (which MLflow
run it logs into, how far it got, and its result once it has one).

Both are replaced atomically: written to a temporary file in the same folder, flushed to disk,
then renamed over the old one (``os.replace``). A crash during a save leaves the previous file
whole; a stray ``*.tmp`` file is ignored and overwritten by the next save.

The folder is ``train.checkpoint_dir`` or ``<runs>/checkpoints/<config hash>``: the same config
finds its own checkpoint again, which is what a rerun of ``cemlab train`` and a retried sweep trial
rely on.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cemlab import paths
from cemlab.config import RunConfig

CHECKPOINT_NAME = "last.ckpt"
STATE_NAME = "state.json"


def checkpoint_dir(cfg: RunConfig) -> Path:
    if cfg.train.checkpoint_dir:
        d = Path(cfg.train.checkpoint_dir).expanduser().resolve()
    else:
        d = checkpoint_folder(paths.runs_dir(), cfg.hash())
    d.mkdir(parents=True, exist_ok=True)
    return d


def checkpoint_folder(runs_dir: str | Path, config_hash: str) -> Path:
    """The checkpoint folder of config ``config_hash`` in the runs folder ``runs_dir``:
    ``<runs>/checkpoints/<config hash>`` (not created). A sweep trial trains there."""
    return Path(runs_dir) / "checkpoints" / config_hash


def _fsync_and_replace(tmp: Path, target: Path) -> None:
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    try:  # make the rename itself durable
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def save_checkpoint(trainer, folder: Path) -> Path:
    """Write ``last.ckpt`` atomically through ``trainer.save_checkpoint`` (call it on every rank:
    Lightning gathers what it needs and writes on rank zero)."""
    target = folder / CHECKPOINT_NAME
    tmp = folder / f"{CHECKPOINT_NAME}.tmp"
    trainer.save_checkpoint(tmp, weights_only=False)  # optimizer, schedule and loops too
    if trainer.is_global_zero:
        _fsync_and_replace(tmp, target)
    trainer.strategy.barrier("cemlab.save_checkpoint")
    return target


def read_state(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None


def write_state(folder: Path, state: dict[str, Any]) -> None:
    tmp = folder / f"{STATE_NAME}.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True, default=str))
    _fsync_and_replace(tmp, folder / STATE_NAME)


def set_aside(folder: Path) -> Path | None:
    """Start afresh without deleting anything: move ``last.ckpt``, ``state.json`` and the metric
    history ``metrics.jsonl`` (with any stray temporary files) into a new ``replaced-<UTC time>/``
    subfolder; return it, or None when there was nothing to move."""
    names = [n for n in (CHECKPOINT_NAME, STATE_NAME, "metrics.jsonl", f"{CHECKPOINT_NAME}.tmp", f"{STATE_NAME}.tmp")
             if (folder / n).exists()]
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = folder / f"replaced-{stamp}"
    i = 1
    while aside.exists():
        i += 1
        aside = folder / f"replaced-{stamp}-{i}"
    aside.mkdir()
    for n in names:
        os.replace(folder / n, aside / n)
    return aside
