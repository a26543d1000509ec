"""A local MLflow tracking server on the project's embedded store, started once and reused.

``start_server()`` serves the sqlite store ``<runs>/mlflow/mlflow.db`` with artifacts proxied to
``<runs>/mlflow/artifacts``, on 127.0.0.1 and a free port, waits until it answers and returns its
URL. It records ``{pid, port, url, backend_store_uri, ...}`` in ``<runs>/mlflow/server.json``; a
later call (from any process) that finds a live server for the same store there reuses it. A lock
file serialises concurrent starts. ``starting()`` is the same start in two halves, the launch and
the wait until it answers, for a caller with other work meanwhile (a sweep starts Ray while its
server starts). ``stop_server()`` ends it.

The server runs in its own session (process group), so it outlives the sweep driver that started
it and serves ``make ui`` and the next sweep; one process (``--workers 1``) owns the sqlite file,
which avoids the schema-migration race of several processes opening a fresh store
(docs/tracking.md). Trials get the URL, never the sqlite path.

psutil is imported only in ``_listens``, so ``cemlab ui`` loads it only when it looks at which port
a running server listens on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from cemlab.paths import mlflow_dir
from cemlab.tracking.store import artifact_root, configured_tracking_uri, default_tracking_uri, healthy, open_sqlite_store

STATE_FILE = "server.json"
LOCK_FILE = "server.lock"
LOG_FILE = "server.log"
HOST = "127.0.0.1"

#: Processes this interpreter started, so that stopping them also reaps them.
_STARTED: dict[int, subprocess.Popen] = {}


class ServerError(RuntimeError):
    """The local MLflow server could not be started; the message quotes its log."""


@dataclass
class ServerInfo:
    """What ``server.json`` records about a running local server."""

    url: str
    pid: int
    port: int
    backend_store_uri: str
    artifacts_destination: str
    log: str
    started_at: float


def state_path() -> Path:
    return mlflow_dir() / STATE_FILE


def _read_state() -> ServerInfo | None:
    try:
        return ServerInfo(**json.loads(state_path().read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def _write_state(info: ServerInfo) -> None:
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info), indent=2))
    tmp.replace(state_path())


@contextlib.contextmanager
def _locked():
    """Exclusive lock on ``<runs>/mlflow/server.lock`` (across processes and threads)."""
    with open(mlflow_dir() / LOCK_FILE, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    proc = _STARTED.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def running_server() -> ServerInfo | None:
    """The recorded local server, if it is alive, answers, and serves this project's store."""
    info = _read_state()
    if info is None or info.backend_store_uri != default_tracking_uri():
        return None
    if not _pid_alive(info.pid) or not healthy(info.url):
        return None
    return info


#: The port a newly started local server tries first (MLflow's own default), then the next ones:
#: the dashboard and the links in reports keep one address across restarts. ``$CEMLAB_UI_PORT``
#: changes it.
DEFAULT_PORT = 5000
PORT_ENV = "CEMLAB_UI_PORT"
PORT_TRIES = 20


def preferred_port() -> int | None:
    """The first free port from ``$CEMLAB_UI_PORT`` (default 5000) on, or None if the next
    ``PORT_TRIES`` are all taken."""
    base = int(os.environ.get(PORT_ENV) or DEFAULT_PORT)
    return next((p for p in range(base, base + PORT_TRIES) if _port_free(p)), None)


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its children listens on ``port`` (a server that answers
    on a well-known port may be another store's, started at the same moment)."""
    try:
        import psutil
    except ImportError:  # cannot tell: trust the health check
        return True
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return False
    for proc in procs:
        try:
            if any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
                   for c in proc.net_connections(kind="tcp")):
                return True
        except psutil.Error:
            continue
    return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as the server's own bind sets
    it: a port whose last connections are in TIME_WAIT (a server just stopped) counts as free, so a
    restarted dashboard gets its old address back."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def _server_command(backend: str, artifacts: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
            "--artifacts-destination", str(artifacts), "--host", HOST, "--port", str(port), "--workers", "1"]


def _server_env() -> dict[str, str]:
    """The server's environment. MLflow 3 also starts a job runner with about ten worker
    processes for its GenAI features by default; cemlab uses none of them, and on a small
    machine they cost seconds of start-up and CPU that trials need (set the variable to override)."""
    env = dict(os.environ)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    return env


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def start_server(port: int | None = None, timeout: float = 120.0) -> str:
    """Start (or reuse) the local MLflow server on the project's store; return its URL.

    ``port``: a fixed port (default: the first free one from :data:`DEFAULT_PORT` on, else any
    free one; retried if taken meanwhile)."""
    with starting(port, timeout) as server:
        return server.wait()


@contextlib.contextmanager
def starting(port: int | None = None, timeout: float = 120.0) -> Iterator["PendingServer"]:
    """:func:`start_server` in two halves, for a caller with other work to do while the server
    starts (a sweep starts Ray meanwhile): under the lock, a running server is reused or a new one
    launched (:class:`PendingServer`); the block runs while it starts, and ``wait()`` returns its
    URL once it answers. The lock is held to the end of the block, which waits for the server if
    the block did not: a block that fails with an exception still names a server that did not
    start, as if it had started first; an interrupt (Ctrl-C) ends a server still starting."""
    with _locked():
        server = PendingServer(port, timeout)
        try:
            yield server
        except Exception:
            if not server.waited:
                server.wait()
            raise
        except BaseException:
            server.abandon()
            raise
        if not server.waited:
            server.wait()


class PendingServer:
    """The local server as :func:`starting` finds it: reused (its URL known at once) or launched
    (``port``, ``timeout``: see :func:`start_server`); :meth:`wait` returns its URL once it answers,
    or raises ``ServerError`` with its log. Created under the lock."""

    def __init__(self, port: int | None, timeout: float):
        self.url: str | None = None
        self.waited = False
        self._error: ServerError | None = None
        self._port, self._timeout = port, timeout
        self._proc: subprocess.Popen | None = None
        info = running_server()
        if info is not None:
            self.url = info.url
            return
        _stop_recorded()  # a stale record: its process, if any is left, is ours to end
        self._backend = default_tracking_uri()
        open_sqlite_store(self._backend)  # created/migrated here, under its lock, not by the server racing others
        self._artifacts = artifact_root()
        self._log_path = mlflow_dir() / LOG_FILE
        if port is not None and not _port_free(port):
            raise ServerError(f"port {port} on {HOST} is in use; choose another port or leave it out (a free one is picked)")
        self._tries = 1 if port else 3
        self._env = _server_env()  # once: a retry after the caller changed os.environ (Ray) gets the same
        self._launch()

    def _launch(self) -> None:
        self._tries -= 1
        p = self._port or preferred_port() or _free_port()
        cmd = _server_command(self._backend, self._artifacts, p)
        with open(self._log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=mlflow_dir(), start_new_session=True, env=self._env)
        _STARTED[self._proc.pid] = self._proc
        self._p, self._deadline = p, time.monotonic() + self._timeout

    def wait(self) -> str:
        """The server's URL once it answers (a launch that exits is retried on another port)."""
        self.waited = True
        if self._error is not None:
            raise self._error
        try:
            return self._wait()
        except ServerError as e:
            self._error = e
            raise

    def _wait(self) -> str:
        while self.url is None:
            proc, p = self._proc, self._p
            url = f"http://{HOST}:{p}"
            while time.monotonic() < self._deadline and proc.poll() is None:
                if healthy(url, timeout=1.0) and _listens(proc.pid, p):
                    _write_state(ServerInfo(url=url, pid=proc.pid, port=p, backend_store_uri=self._backend,
                                            artifacts_destination=str(self._artifacts), log=str(self._log_path),
                                            started_at=time.time()))
                    self.url = url
                    return url
                time.sleep(0.25)
            if proc.poll() is None:  # timed out while still starting
                _terminate(proc.pid)
                raise ServerError(f"mlflow server did not answer on {url} within {self._timeout:.0f}s; "
                                  f"log {self._log_path}:\n{_log_tail(self._log_path)}")
            _STARTED.pop(proc.pid, None)
            if self._tries == 0:
                raise ServerError(f"mlflow server exited while starting; log {self._log_path}:\n"
                                  f"{_log_tail(self._log_path)}")
            self._launch()
        return self.url

    def abandon(self) -> None:
        """End a launched server that has not answered yet (the caller was interrupted)."""
        if self.url is None and self._proc is not None and self._proc.poll() is None:
            _terminate(self._proc.pid)


def _terminate(pid: int, timeout: float = 15.0) -> None:
    """End the server process group ``pid`` (it leads its own session): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.1)
        if not _pid_alive(pid):
            break
    proc = _STARTED.pop(pid, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)


def _stop_recorded() -> bool:
    info = _read_state()
    if info is None:
        return False
    stopped = False
    # Only a process recorded for this store, still alive and leading its own group, is ended.
    if info.backend_store_uri == default_tracking_uri() and _pid_alive(info.pid) and _is_group_leader(info.pid):
        _terminate(info.pid)
        stopped = True
    state_path().unlink(missing_ok=True)
    return stopped


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def stop_server() -> bool:
    """Stop the recorded local server of this project's store. True if one was running."""
    with _locked():
        return _stop_recorded()


def shared_tracking_uri() -> str:
    """The tracking URI to hand to trials: ``$MLFLOW_TRACKING_URI`` when set, else the local
    server's URL (started if needed), never the sqlite path."""
    return configured_tracking_uri() or start_server()
