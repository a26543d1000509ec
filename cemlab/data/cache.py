"""On-disk cache entries shared by concurrent processes (Ray trials preparing the same data).

An entry is a folder ``<root>/<key>/``. It is built in a private temporary folder beside it and
renamed into place in one step, so a reader sees either no entry or a complete one, never a
half-written one. Builders of the same key take an exclusive ``fcntl.flock`` on ``<key>.lock``:
the first one builds, the others wait and then find the entry (a cache hit). ``flock`` needs a
local file system (or one that supports it); the cache lives under the runs folder by default.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator


def stable_key(payload: Any, length: int = 16) -> str:
    """A short hex digest of a JSON-serialisable payload (dict key order does not matter)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@contextlib.contextmanager
def locked(root: Path, key: str) -> Iterator[None]:
    """Hold the exclusive build lock of entry ``key`` (blocks while another process holds it)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def new_build_dir(root: Path, key: str) -> Path:
    """A fresh temporary folder to build entry ``key`` in. Call it holding the lock: leftovers of
    an earlier builder of this key that crashed are removed first (nobody else can be using them)."""
    for stale in root.glob(f"{key}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    d = root / f"{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    return d


def publish(build_dir: Path, final: Path) -> None:
    """Move a finished build into place atomically (replacing a broken entry, if any)."""
    if final.exists():
        shutil.rmtree(final)
    os.rename(build_dir, final)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
