"""Ray for tests that must not touch another user's Ray: a private ``RAY_TMPDIR`` (so Ray's session
files and its "current cluster" file are the test's own), the listening sockets of a process
tree, and a ``ray start --head`` the test ends by its own process group."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from pg_support import free_port, stop_group


@contextlib.contextmanager
def private_ray_tmpdir() -> Iterator[Path]:
    """A short folder under /tmp for ``RAY_TMPDIR`` (Ray's socket paths must stay short)."""
    folder = Path(tempfile.mkdtemp(prefix="cemray-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """Ray in this process for the block: a new local instance (``address="local"``, never a
    cluster that a test in make test's other pytest process started with ``ray start``), Tune and
    Ray quiet, no dashboard."""
    import logging

    import ray

    from cemlab.sweeps.stages.execute import quiet_tune

    quiet_tune()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


def listeners(pid: int) -> list[tuple[str, int, str]]:
    """``(address, port, process name)`` of every listening TCP socket of ``pid`` and its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out += [(c.laddr.ip, c.laddr.port, name) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def stale_ray_cluster_file(ray_tmpdir: Path) -> Path:
    """Ray's "current cluster" file under ``ray_tmpdir`` (as ``RAY_TMPDIR``), naming a head that is
    gone, as a crashed ``ray start`` leaves it."""
    from ray._common.utils import get_ray_address_file

    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(ray_tmpdir)
    try:
        path = Path(get_ray_address_file(None))
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR")
        else:
            os.environ["RAY_TMPDIR"] = before
    assert str(path).startswith(str(ray_tmpdir)), path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"127.0.0.1:{free_port()}")
    return path


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def non_loopback(found: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The listeners of ``found`` that another machine could reach (not 127.0.0.0/8 or ::1)."""
    return [x for x in found if not _loopback(x[0])]


#: ``ray start --block`` drains its node for up to 30 s on SIGTERM before it stops (Ray's
#: ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``, meant for Serve replicas); a test's Ray has nothing to
#: drain, and its stop would otherwise wait that long each time.
NO_DRAIN = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


@contextlib.contextmanager
def ray_head(env: dict[str, str], log: Path) -> Iterator[str]:
    """``ray start --head --block`` on 127.0.0.1 and a free port with ``env`` (its ``RAY_TMPDIR``);
    yields the GCS address; ends its process group."""
    port = free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    env = {**env, **NO_DRAIN}
    with open(log, "ab") as out:
        proc = subprocess.Popen([ray, "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                                 "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not any(p == port for _, p, _ in listeners(proc.pid)):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield address
    finally:
        stop_group(proc)
