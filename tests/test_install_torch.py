"""``scripts/install-torch.sh`` (what ``make install`` calls) picks the torch build a machine needs.

The machine is faked: ``nvidia-smi`` and ``uname`` on PATH say whether there is a GPU and which
OS this is, and a fake python says which torch (if any) is installed; with ``DRY_RUN=1`` the script
prints the pip command it would run. The unreachable-index case runs real pip (in a throwaway
environment without torch) against a closed local port and must fail with its message within a
minute. No wheel is downloaded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-torch.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def fake_machine(tmp_path: Path, *, gpu: bool, os_name: str = "Linux", torch: str | None = None) -> dict:
    """PATH with a fake ``uname`` (and ``nvidia-smi`` listing a GPU when ``gpu``), and a fake
    python whose ``import torch`` prints ``torch`` ("VERSION CUDA") or fails."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "uname").write_text(f"#!/bin/sh\necho {os_name}\n")
    if gpu:
        (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-0)'\n")
    body = f"echo '{torch}'" if torch else "exit 1"
    (bin_ / "python").write_text(f"#!/bin/sh\ncase \"$*\" in *'import torch'*) {body};; *) exit 3;; esac\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX_URL", "TORCH_VERSION")}
    # Without a GPU, `nvidia-smi` must not be found anywhere on PATH: only the fake folder and the basics.
    env.update(PATH=f"{bin_}:/usr/bin:/bin", PY=str(bin_ / "python"), DRY_RUN="1")
    return env


def install(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)


def pip_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("would run:")]


def test_gpu_linux_gets_the_cuda_build_from_the_configured_index(tmp_path):
    r = install(fake_machine(tmp_path, gpu=True))
    assert r.returncode == 0, r.stderr
    (line,) = pip_lines(r.stdout)
    assert line.endswith("torch==2.13.0") and "--index-url" not in line and "--timeout" in line


def test_cpu_linux_gets_the_cpu_index_and_never_a_plain_pin(tmp_path):
    r = install(fake_machine(tmp_path, gpu=False))
    assert r.returncode == 0, r.stderr
    (line,) = pip_lines(r.stdout)
    assert f"--index-url {CPU_INDEX} torch==2.13.0" in line
    assert "CPU build" in r.stdout
    (tmp_path / "other").mkdir()
    env = fake_machine(tmp_path / "other", gpu=False)
    env.update(TORCH_INDEX_URL="http://mirror.invalid/cpu", TORCH_VERSION="2.12.1")
    (line,) = pip_lines(install(env).stdout)
    assert "--index-url http://mirror.invalid/cpu torch==2.12.1" in line   # one variable moves it


def test_macos_gets_its_own_build_from_the_configured_index(tmp_path):
    r = install(fake_machine(tmp_path, gpu=False, os_name="Darwin"))
    assert r.returncode == 0, r.stderr
    (line,) = pip_lines(r.stdout)
    assert line.endswith("torch==2.13.0") and "--index-url" not in line
    assert "macOS" in r.stdout


@pytest.mark.parametrize("gpu", [False, True])
def test_an_installed_cuda_build_is_kept_with_a_warning_only_without_a_gpu(tmp_path, gpu):
    r = install(fake_machine(tmp_path, gpu=gpu, torch="2.13.0+cu128 12.8"))
    assert r.returncode == 0, r.stderr
    assert not pip_lines(r.stdout) and "already installed: kept" in r.stdout
    assert ("warning" in r.stderr and "CUDA 12.8" in r.stderr) is (not gpu), r.stderr


def test_an_installed_cpu_build_is_kept_silently(tmp_path):
    r = install(fake_machine(tmp_path, gpu=False, torch="2.13.0+cpu cpu"))
    assert r.returncode == 0 and not pip_lines(r.stdout) and "kept" in r.stdout and not r.stderr


def test_an_unreachable_index_fails_within_a_minute_with_a_message(tmp_path):
    """Real pip, no torch installed, pip's own configuration hidden, the CPU index on a closed
    port: the script stops with a message naming TORCH_INDEX_URL, not a hang."""
    venv = tmp_path / "venv"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    if subprocess.run([str(py), "-c", "import pip"], capture_output=True).returncode != 0:
        pytest.skip("the base Python has no pip to lend a throwaway environment")
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/simple"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PY=str(py), TORCH_INDEX_URL=dead, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=dead,
               PIP_NO_CACHE_DIR="1")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - t0
    assert r.returncode != 0
    assert seconds < 60, f"{seconds:.0f}s"
    assert f"TORCH_INDEX_URL={dead}" in r.stderr and "set TORCH_INDEX_URL" in r.stderr, r.stderr[-2000:]
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
