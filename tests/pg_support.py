"""Throwaway PostgreSQL servers for tests: Debian's server binaries, a temporary data folder,
127.0.0.1 and a free port.

``postgres_server()`` is a context manager that yields a :class:`PostgresServer` (its ``uri`` is
``postgresql://user:password@127.0.0.1:port/db``); the fixtures ``postgres`` and
``postgres_uri`` wrap it for pytest. Everything is stopped and deleted on exit, also when the
body raises; if the test process itself dies, the server gets SIGTERM from the kernel (parent
death signal) and stops on its own.

The binaries come from Debian's ``postgresql`` package (``/usr/lib/postgresql/<major>/bin``).
When they are missing and we are root, the package is installed with apt-get (CI installs it
beforehand through scripts/test-prereqs.sh). ``initdb`` refuses to run as root, so as root the
server runs as the ``postgres`` system user that the package creates (or, failing that, a
``cemlab-pg`` system user created here).

Use from a test module::

    from pg_support import postgres, postgres_uri  # noqa: F401  (pytest fixtures)
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_USER = "cemlab"
SERVICE_USER = "postgres"            # created by Debian's postgresql package
FALLBACK_SERVICE_USER = "cemlab-pg"  # created here when the package's user is missing
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing and cannot be installed here."""


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server with one database, reachable with password auth over TCP."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    data_dir: Path
    log_path: Path

    @property
    def uri(self) -> str:
        """libpq URI of the database: ``postgresql://user:password@127.0.0.1:port/db``."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"

    @property
    def sqlalchemy_uri(self) -> str:
        """The URI for SQLAlchemy, hence for MLflow's ``--backend-store-uri``.

        SQLAlchemy 2.1 maps a bare ``postgresql://`` to the psycopg 3 driver, which cemlab does
        not install; ``postgresql+psycopg2://`` selects psycopg2 (``psycopg2-binary``)."""
        return self.uri.replace("postgresql://", "postgresql+psycopg2://", 1)

    def connect(self, dbname: str | None = None):
        """A psycopg2 connection to ``dbname`` (default: the test database)."""
        import psycopg2

        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password,
            dbname=dbname or self.dbname, connect_timeout=5,
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """``preexec_fn`` for servers started by tests: the kernel sends the child SIGTERM when the
    test process dies (Linux ``PR_SET_PDEATHSIG``), so a killed test run leaves no server behind."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """End the process group a test started (``start_new_session=True``) with ``sig``; SIGKILL if
    it is still there after ``timeout`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def enter_or_skip(stack: contextlib.ExitStack, cm, unavailable: type[Exception]):
    """Enter ``cm`` on ``stack``; when it raises ``unavailable`` (a real engine that cannot run
    here), skip the test with the reason, except under CI (``CI`` set), where that is a failure:
    CI must not silently skip tests of real engines."""
    try:
        return stack.enter_context(cm)
    except unavailable as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


def pg_bin_dir(install: bool = True) -> Path:
    """The ``bin`` folder of the newest installed PostgreSQL major version.

    Installs Debian's ``postgresql`` package first when it is missing, ``install`` is true and we
    are root; otherwise raises :class:`PostgresUnavailable` naming the fix."""
    found = _installed_bin_dirs()
    if not found and install and os.geteuid() == 0 and shutil.which("apt-get"):
        _apt_install_postgresql()
        found = _installed_bin_dirs()
    if not found:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb); install "
            "Debian's package as root: apt-get install -y postgresql (make test does this through "
            "scripts/test-prereqs.sh)"
        )
    return found[-1]


def _installed_bin_dirs() -> list[Path]:
    dirs = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    return sorted(dirs, key=lambda d: int(re.sub(r"\D", "", d.parent.name) or 0))


def _apt_install_postgresql() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"]
    if subprocess.run(cmd, env=env, capture_output=True, timeout=900).returncode != 0:
        # Package lists may be missing or stale on a fresh machine.
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=900)
        subprocess.run(cmd, env=env, capture_output=True, timeout=900)


def _service_account() -> tuple[int, int] | None:
    """(uid, gid) to run the server as, or None to run it as ourselves (when not root)."""
    if os.geteuid() != 0:
        return None
    for name in (SERVICE_USER, FALLBACK_SERVICE_USER):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
         FALLBACK_SERVICE_USER],
        check=True, capture_output=True,
    )
    entry = pwd.getpwnam(FALLBACK_SERVICE_USER)
    return entry.pw_uid, entry.pw_gid


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen) -> None:
    """Fast shutdown (SIGINT: abort open transactions, then exit cleanly); SIGKILL if stuck."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


def _wait_ready(proc: subprocess.Popen, server: PostgresServer) -> None:
    """Poll until the server accepts password logins; raise with the server log if it exits."""
    import psycopg2

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"postgres exited with code {proc.returncode} while starting; log "
                f"{server.log_path}:\n{_log_tail(server.log_path)}"
            )
        try:
            server.connect(dbname="postgres").close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"postgres did not accept connections within {START_TIMEOUT_S:.0f}s; log "
                    f"{server.log_path}:\n{_log_tail(server.log_path)}"
                ) from None
            time.sleep(0.2)


@contextlib.contextmanager
def postgres_server(dbname: str = "cemlab_test") -> Iterator[PostgresServer]:
    """Start a PostgreSQL server with database ``dbname``; stop it and delete its files on exit."""
    bin_dir = pg_bin_dir()
    account = _service_account()
    run_as = {"user": account[0], "group": account[1], "extra_groups": []} if account else {}
    root = Path(tempfile.mkdtemp(prefix="cemlab-pg-"))
    proc: subprocess.Popen | None = None
    try:
        data_dir, sock_dir, log_path = root / "data", root / "sock", root / "postgres.log"
        sock_dir.mkdir()
        password = secrets.token_hex(16)
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        if account:
            for p in (root, sock_dir, pwfile):
                os.chown(p, *account)
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", PG_USER, f"--pwfile={pwfile}",
             "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8",
             "--locale=C", "--no-sync"],
            cwd=root, capture_output=True, text=True, **run_as,
        )
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")

        for _attempt in range(3):  # a port picked free can be taken before postgres binds it
            server = PostgresServer("127.0.0.1", free_port(), PG_USER, password, dbname, data_dir,
                                    log_path)
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [str(bin_dir / "postgres"), "-D", str(data_dir), "-p", str(server.port),
                     "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sock_dir}",
                     # A test database: durability off for speed.
                     "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                    cwd=root, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
                    **run_as,
                )
            try:
                _wait_ready(proc, server)
                break
            except RuntimeError:
                _stop(proc)
                if "could not bind" not in _log_tail(log_path):
                    raise
        else:
            raise RuntimeError(f"postgres could not bind a free port; log:\n{_log_tail(log_path)}")

        from psycopg2 import sql

        conn = server.connect(dbname="postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        finally:
            conn.close()
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    """A fresh PostgreSQL server and database for one test.

    Skipped with the reason when the server binaries are missing and cannot be installed, except
    under CI (``CI`` set), where that is an error: CI must not silently skip database tests."""
    with contextlib.ExitStack() as stack:
        yield enter_or_skip(stack, postgres_server(), PostgresUnavailable)


@pytest.fixture
def postgres_uri(postgres: PostgresServer) -> str:
    """``postgresql://...`` URI of a fresh test database."""
    return postgres.uri
