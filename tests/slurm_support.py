"""A throwaway one-node SLURM cluster for tests: Debian's ``munge`` and ``slurm-wlm``, every
file under one temporary folder, daemons on free ports of 127.0.0.1.

``slurm_cluster()`` is a context manager that starts ``munged`` (its own key and socket),
``slurmctld`` and ``slurmd`` (this machine as the one node, with 2 CPUs) and yields a
:class:`SlurmCluster` whose ``env`` points SLURM's commands at it (``SLURM_CONF``). Everything is
stopped and deleted on exit, also when the body raises; if the test process dies, the daemons
get SIGTERM from the kernel (parent death signal). The fixture ``slurm`` wraps it for a module.

The daemons run as root (``SlurmUser=root``), which is how the tests run here; without root, or
without the binaries, the fixture skips with the reason (fails under CI, which installs them
through scripts/test-prereqs.sh). Accounting (``sacct``) needs a ``slurmdbd`` with a database:
the job's final state is read with ``scontrol`` (finished jobs are kept for ``MinJobAge``) and
from the job completion log (``jobcomp/filetxt``).

Timings of the test controller: ``KillWait=60``, the time a requeued job's processes get between
SIGTERM and SIGKILL (SLURM's default of 30 s was too short for the driver's clean stop on the
loaded 2-core machine: it was killed before it marked its run interrupted); the scheduler
looks at pending jobs every second (``sched_interval``, ``bf_interval``; SLURM's 60 s and 30 s
left a requeued job pending up to half a minute after it became eligible); a requeued job is
eligible ``cred_expire`` (5 s) after it ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pg_support import die_with_parent, enter_or_skip, free_port, stop_group

START_TIMEOUT_S = 60.0
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")


class SlurmUnavailable(RuntimeError):
    """SLURM or munge is missing here, or cannot run its daemons."""


@dataclass
class SlurmCluster:
    root: Path
    env: dict[str, str]
    node: str

    def run(self, *cmd: str, check: bool = True) -> str:
        r = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}{r.stdout}\n{self.logs()}")
        return r.stdout

    def sbatch(self, script: Path, env: dict[str, str]) -> int:
        """Submit ``script`` with ``env`` as the submitting shell's environment; the job id."""
        r = subprocess.run(["sbatch", "--parsable", str(script)], env={**env, "SLURM_CONF": self.env["SLURM_CONF"]},
                           capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}): {r.stderr}")
        return int(r.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields (JobState, Restarts, ExitCode, ...)."""
        text = self.run("scontrol", "show", "job", str(job_id), "--oneliner")
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: int, until, timeout: float, what: str) -> dict[str, str]:
        """Poll the job until ``until(fields)``; fail with the controller's view and logs after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if until(info):
                return info
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id}: not {what} after {timeout:.0f}s: {info}\n{self.logs()}")
            time.sleep(0.25)  # scontrol answers in milliseconds

    def completion_log(self) -> str:
        path = self.root / "log" / "jobcomp.txt"
        return path.read_text() if path.exists() else ""

    def logs(self, lines: int = 15) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / "log" / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)


def _conf(root: Path, node: str, munge_socket: Path) -> str:
    return f"""ClusterName=cemlabtest
FirstJobId={random.randrange(10_000, 1_000_000)}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=60
SchedulerParameters=sched_interval=1,bf_interval=1
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _start(cmd: list[str], root: Path, name: str) -> subprocess.Popen:
    with open(root / "log" / f"{name}.out", "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True,
                                preexec_fn=die_with_parent)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        stop_group(proc)


@contextlib.contextmanager
def slurm_cluster() -> Iterator[SlurmCluster]:
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        raise SlurmUnavailable(f"{', '.join(missing)} not found: install Debian's slurm-wlm and munge as root "
                               f"(apt-get install -y slurm-wlm munge; make test does this through "
                               f"scripts/test-prereqs.sh)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test's slurmctld/slurmd run as root (SlurmUser=root); run the tests as root")
    root = Path(tempfile.mkdtemp(prefix="cemlab-slurm-"))  # short: slurmd's step sockets live in its spool
    procs: list[subprocess.Popen] = []
    try:
        for sub in ("state", "spool", "log", "munge-key", "munge"):
            (root / sub).mkdir()
        os.chmod(root, 0o755)
        os.chmod(root / "munge", 0o755)  # munged wants its socket folder open to all, its key folder not
        os.chmod(root / "munge-key", 0o700)
        key = root / "munge-key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = root / "munge" / "socket"
        procs.append(_start(["munged", "-F", f"--socket={sock}", f"--key-file={key}",
                             f"--pid-file={root / 'munge' / 'pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                             f"--seed-file={root / 'munge' / 'seed'}"], root, "munged"))
        node = socket.gethostname().split(".")[0]
        conf = root / "slurm.conf"
        conf.write_text(_conf(root, node, sock))
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(conf)}
        cluster = SlurmCluster(root, env, node)
        _wait_for(lambda: sock.exists(), procs, root, "munged's socket")
        procs.append(_start(["slurmctld", "-D", "-i", "-f", str(conf)], root, "slurmctld"))
        procs.append(_start(["slurmd", "-D", "-f", str(conf)], root, "slurmd"))
        _wait_for(lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%T", check=False), procs, root,
                  "an idle node in sinfo")
        yield cluster
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _wait_for(ready, procs: list[subprocess.Popen], root: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            outs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                             for p in sorted((root / "log").glob("*")) if p.is_file())
            raise RuntimeError(f"SLURM test cluster: no {what} ({'a daemon exited' if dead else 'timed out'}):\n{outs}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """One SLURM controller and node for a test module. Skipped with the reason when SLURM cannot
    run here, except under CI (``CI`` set), where that is an error."""
    with contextlib.ExitStack() as stack:
        yield enter_or_skip(stack, slurm_cluster(), SlurmUnavailable)
