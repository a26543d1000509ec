"""What keeps one sweep invocation safe while its trials run, beside the stages.

- :class:`DriverLock`: ``<log dir>/driver.lock``, held by the running driver of a sweep and scale;
  a second driver runs under a parent run of its own (``cemlab.sweeps.stages.record``).
- :class:`StoreWatch`: a store that goes away. While trials run the driver asks an HTTP store
  ``GET /health`` every 2 s; after three failures in a row (or when a call of the driver fails and
  the store does not answer) it stops every trial (their checkpoints are kept), writes
  ``summary.json`` with the error, names the URI and exits with code 4; ``cemlab sweep NAME``
  again, once the server is back, resumes. MLflow's own HTTP retries are shortened for every
  cemlab process (docs/tracking.md).
- :class:`SigtermAsInterrupt`: Ctrl-C and SIGTERM stop the trials, mark their runs
  ``interrupted`` and the parent run too. Ray's processes share the driver's fate (its trial
  processes end with it). Rerunning the same command resumes.
"""

from __future__ import annotations

import _thread
import fcntl
import json
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from cemlab.sweeps.stages.invocation import write_json_atomic
from cemlab.tracking.store import healthy

#: The driver asks an HTTP store ``GET /health`` this often while trials run (seconds), with this
#: timeout, and calls it gone after this many failures in a row: named within about 15 s.
STORE_CHECK_EVERY_S = 2.0
STORE_CHECK_TIMEOUT_S = 3.0
STORE_CHECK_FAILURES = 3
#: Seconds the driver waits for a stopped or interrupted trial's process to end before marking its run.
STOP_WAIT_S = 30.0
#: Files in the sweep's log folder: the lock a running driver holds, and what it records there.
DRIVER_LOCK = "driver.lock"
DRIVER_STATE = "driver.json"

log = logging.getLogger("cemlab.sweeps")


class SigtermAsInterrupt:
    """SIGTERM -> KeyboardInterrupt in the main thread while the sweep runs (Ctrl-C already is)."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    @staticmethod
    def _handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


class DriverLock:
    """``<log dir>/driver.lock``, held by the running driver of a sweep and scale (released when
    its process dies); ``driver.json`` beside it names that driver's pid and parent run. A second
    driver that finds it held runs anyway (its trials wait on the per-trial locks), but under a
    parent run of its own, and says whose sweep it found."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self._fh = open(log_dir / DRIVER_LOCK, "a")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            self.held = False
            self._fh.close()

    def _state(self) -> dict:
        try:
            return json.loads((self.log_dir / DRIVER_STATE).read_text())
        except (OSError, ValueError):
            return {}

    def other_parent(self) -> str:
        """The running driver's parent run id ("" until it has recorded it)."""
        return str(self._state().get("parent_run_id") or "")

    def other_pid(self) -> int | None:
        return self._state().get("pid")

    def record(self, parent_run_id: str) -> None:
        if self.held:
            write_json_atomic(self.log_dir / DRIVER_STATE, {"pid": os.getpid(), "parent_run_id": parent_run_id,
                                                         "started": time.time()})

    def release(self) -> None:
        if self.held:
            (self.log_dir / DRIVER_STATE).unlink(missing_ok=True)
            self._fh.close()  # closing the file releases the lock
            self.held = False


class StoreWatch:
    """While the trials run: ask an HTTP store ``GET /health`` every :data:`STORE_CHECK_EVERY_S`
    seconds; after :data:`STORE_CHECK_FAILURES` failures in a row, record why in ``lost`` and
    interrupt the main thread (the sweep then stops its trials, see
    ``cemlab.sweeps.stages.record.mark_store_lost``).
    A sqlite store (a file) is not watched."""

    def __init__(self, uri: str):
        self.uri = uri
        self.lost: str | None = None
        self._armed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _down(self) -> bool:
        return not healthy(self.uri, timeout=STORE_CHECK_TIMEOUT_S)

    def _message(self) -> str:
        return (f"the MLflow store at {self.uri} stopped answering (GET /health failed "
                f"{STORE_CHECK_FAILURES} times, {time.strftime('%H:%M:%S')})")

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(STORE_CHECK_EVERY_S):
            failures = failures + 1 if self._down() else 0
            if failures >= STORE_CHECK_FAILURES:
                with self._lock:
                    if self._armed and self.lost is None:
                        self.lost = self._message()
                        log.error("%s: stopping the sweep", self.lost)
                        _thread.interrupt_main()
                return

    def confirm_lost(self, error: BaseException | str) -> bool:
        """After ``error`` in the driver (or a trial): True (and ``lost`` set) when the store does
        not answer."""
        why = error if isinstance(error, str) else f"the driver's last call failed with {type(error).__name__}"
        if self.lost is None and self.uri.startswith(("http://", "https://")) and self._down():
            with self._lock:
                self.lost = self.lost or self._message() + f"; {why}"
        return self.lost is not None

    def __enter__(self) -> "StoreWatch":
        if self.uri.startswith(("http://", "https://")):
            self._armed = True
            self._thread = threading.Thread(target=self._loop, name="cemlab-store-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        with self._lock:
            self._armed = False
        self._stop.set()
        return False


def wait_for_exit(pid: Any, timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) until a trial's process on this machine is gone, so that
    nothing it still writes can race the driver's marking of its run (not with ``$RAY_ADDRESS``:
    the process may run on another node)."""
    if not isinstance(pid, (int, float)) or os.environ.get("RAY_ADDRESS"):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid), 0)
            if Path(f"/proc/{int(pid)}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except (ProcessLookupError, PermissionError, OSError, IndexError):
            return
        time.sleep(0.2)


def trial_pid(log_path: Path) -> int | None:
    """The process of a trial's last attempt, from the header line its log starts each attempt with
    (``cemlab.sweeps.trial.trainable``)."""
    try:
        found = re.findall(r"\) pid (\d+) node", log_path.read_text(errors="replace"))
    except OSError:
        return None
    return int(found[-1]) if found else None

