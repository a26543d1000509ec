"""One trial of a config at a time, across sweeps: an exclusive lock on ``sweep.lock`` in the
trial's checkpoint folder, held while the trial trains (released when its process dies).

Two sweeps sharing a trial (the Llama baselines) never train it at the same time: the second
waits (:func:`trial_lock`) and then takes the first one's result. The driver asks the lock before
it tidies up a trial's runs (:func:`lock_is_free`) or records a trial (:func:`try_trial_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from pathlib import Path

#: Lock file inside a trial's checkpoint folder (held while the trial trains).
LOCK_NAME = "sweep.lock"


@contextlib.contextmanager
def trial_lock(folder: Path):
    """Exclusive lock on ``folder/sweep.lock`` (released when the process dies). Yields True when
    another process held it and this one waited (another sweep trained the same config)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_NAME, "a") as fh:
        waited = False
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} another process holds {folder / LOCK_NAME} "
                  f"(another sweep trains this config): waiting for it", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield waited
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def try_trial_lock(folder: Path):
    """The trial lock of ``folder`` if no other process holds it: yields True (held until the
    block ends) or False (busy, not waited for)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_NAME, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def lock_is_free(folder: Path) -> bool:
    """True when no process holds the trial lock of ``folder`` (the driver's check before it
    tidies up a trial's runs)."""
    path = folder / LOCK_NAME
    if not path.is_file():
        return True
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True
