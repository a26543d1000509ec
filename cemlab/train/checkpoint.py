"""A run's checkpoint folder: ``last.ckpt`` (Lightning checkpoint) and ``state.json`` (which MLflow
run it logs into, how far it got, and its result once it has one).

Both are replaced atomically: written to a temporary file in the same folder, flushed to disk,
then renamed over the old one (``os.replace``). A crash during a save leaves the previous file
whole; a stray ``*.tmp`` file is ignored and overwritten by the next save. A save that finds no
space left (``ENOSPC``) removes its partial temporary file, keeps the previous checkpoint and raises
:class:`NoSpaceError` naming the folder and the space it needs; the same command, once there is
room, resumes from that previous checkpoint.

A checkpoint to resume from is checked before anything is logged (:func:`resumable_checkpoint`):
one that cannot be read (truncated, corrupt) raises :class:`CheckpointError` naming its path, size
and what failed, with the ways on (``--restart``, or an earlier checkpoint kept in a
``replaced-<time>/`` subfolder); nothing is deleted.

The folder is ``train.checkpoint_dir`` or ``<runs>/checkpoints/<config hash>``: the same config
finds its own checkpoint again, which is what a rerun of ``cemlab train`` and a retried sweep trial
rely on.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cemlab import paths
from cemlab.config import ConfigError, RunConfig

CHECKPOINT_NAME = "last.ckpt"
STATE_NAME = "state.json"


class CheckpointError(ConfigError):
    """A checkpoint cannot be read: bad input of the run (``cemlab train`` exits 2), nothing ran."""


class NoSpaceError(OSError):
    """No space left to write a checkpoint or its state; the partial file is removed, the previous
    checkpoint is whole (``cemlab train`` exits 5)."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


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
    with _space_needed(tmp, lambda: _checkpoint_bytes(trainer, target)):
        trainer.save_checkpoint(tmp, weights_only=False)  # optimizer, schedule and loops too
        if trainer.is_global_zero:
            _fsync_and_replace(tmp, target)
    trainer.strategy.barrier("cemlab.save_checkpoint")
    return target


def _checkpoint_bytes(trainer, previous: Path) -> int:
    """About the size of a checkpoint: the previous one's, else the model's parameters with
    AdamW's two moments (three copies)."""
    if previous.is_file():
        return previous.stat().st_size
    module = trainer.lightning_module
    return 3 * sum(p.numel() * p.element_size() for p in module.parameters())


@contextmanager
def _space_needed(tmp: Path, needed):
    """Turn a full disk while writing ``tmp`` into :class:`NoSpaceError`, after removing the
    partial ``tmp`` (it would keep the disk full); ``needed()``: the bytes the write needs."""
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        tmp.unlink(missing_ok=True)
        free = shutil.disk_usage(tmp.parent).free
        raise NoSpaceError(
            f"no space left in {tmp.parent} to write {tmp.name.removesuffix('.tmp')}: it needs about "
            f"{_mb(needed())} free, {_mb(free)} are; the partial file is removed and the previous checkpoint "
            f"is whole. Free space there (or point train.checkpoint_dir elsewhere), then run the same command: "
            f"it resumes from the last checkpoint") from None


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def resumable_checkpoint(folder: Path) -> Path | None:
    """``folder``'s ``last.ckpt`` when there is one (None when not), after checking that it can
    be read (a whole zip archive, as ``torch.save`` writes, every member's CRC checked: a read of
    the file, no unpickling). Raises :class:`CheckpointError` otherwise; nothing is deleted."""
    path = folder / CHECKPOINT_NAME
    if not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        failed = f"member {bad} fails its CRC check" if bad else None
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        failed = f"{type(e).__name__}: {e}"
    if failed is None:
        return path
    kept = sorted(folder.glob(f"replaced-*/{CHECKPOINT_NAME}"))
    earlier = (f", or go on from the earlier checkpoint {kept[-1]}: move it and its state.json back into {folder}"
               if kept else "; no earlier checkpoint of this config is kept")
    raise CheckpointError(  # one line: a sweep trial's outcome shows the last line of its error
        f"{path} ({path.stat().st_size:,} bytes) cannot be read ({failed}); nothing was deleted. Train anew: "
        f"`cemlab train --restart` (a sweep trial: move last.ckpt and state.json into a new subfolder of the "
        f"folder, then rerun the sweep){earlier}")


def read_state(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None


def write_state(folder: Path, state: dict[str, Any]) -> None:
    tmp = folder / f"{STATE_NAME}.tmp"
    text = json.dumps(state, indent=1, sort_keys=True, default=str)
    with _space_needed(tmp, lambda: len(text.encode())):
        tmp.write_text(text)
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
