"""A throwaway ``mlflow server`` for tests: 127.0.0.1, a free port, its own process group, a
backend store and artifact folder the test chooses; it can be killed (as a crash would) and
started again on the same store."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_support import die_with_parent, free_port, stop_group

SERVER_START_TIMEOUT_S = 180.0


def mlflow_executable() -> str:
    """The ``mlflow`` console script of the Python running the tests."""
    exe = Path(sys.executable).with_name("mlflow")
    return str(exe) if exe.exists() else (shutil.which("mlflow") or "mlflow")


class MlflowServer:
    """``mlflow server`` on ``backend_uri``; :meth:`start` returns its URL (a new port each time)."""

    def __init__(self, backend_uri: str, artifacts: Path, log_path: Path, extra_args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None):
        self.backend_uri, self.artifacts, self.log_path = backend_uri, artifacts, log_path
        self.extra_args, self.extra_env = tuple(extra_args), dict(extra_env or {})
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> str:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"   # no GenAI job workers on 2 cores
        env.update(self.extra_env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [mlflow_executable(), "server", "--backend-store-uri", self.backend_uri,
                 "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
                 "--host", "127.0.0.1", "--port", str(port), "--workers", "1", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.log_path.parent,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self.url
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"mlflow server not healthy after {SERVER_START_TIMEOUT_S:.0f}s:\n"
                            f"{self.log_path.read_text()[-3000:]}")
            time.sleep(0.5)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """End the server's process group (SIGKILL: as a crash or a pulled plug would)."""
        if self.proc is None:
            return
        stop_group(self.proc, sig)
        self.proc = None


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log_path: Path, extra_args: tuple[str, ...] = (),
                  extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``mlflow server`` on 127.0.0.1 and a free port; yield its URL; stop its process group.
    ``extra_args`` / ``extra_env``: more server options (e.g. ``--app-name basic-auth``) and variables."""
    server = MlflowServer(backend_uri, artifacts, log_path, extra_args, extra_env)
    try:
        yield server.start()
    finally:
        server.kill(signal.SIGTERM)


@contextlib.contextmanager
def sqlite_server(folder: Path) -> Iterator[MlflowServer]:
    """An :class:`MlflowServer` on a new sqlite store in ``folder`` (started); stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    server = MlflowServer(f"sqlite:///{folder / 'mlflow.db'}", folder / "artifacts", folder / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.kill(signal.SIGTERM)
