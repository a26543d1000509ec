"""What a GPU session needs, checked on the CPU: the offline bundle (scripts/offline-bundle.py)
builds from pinned wheels and installs into a fresh virtual environment with pip's index switched
off; the session script (scripts/gpu-session.sh) plans its steps within its budget and refuses bad
arguments; scripts/gpu-results.py pairs a cell's trials to show what the compile cache saved.

The bundle is built from small wheels made here (no index needed) and cemlab's own wheel; the
full bundle for the GPU image is a documented command (docs/gpu.md), not a test."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, name: str, version: str, requires: list[str], payload: bytes) -> Path:
    """A pure-Python wheel of module ``name`` (``VALUE = version``) with an incompressible ``blob.bin``."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VALUE = {version!r}\n".encode(), f"{name}/blob.bin": payload,
             f"{dist}/METADATA": ("Metadata-Version: 2.1\n" f"Name: {name.replace('_', '-')}\nVersion: {version}\n"
                                  + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            z.writestr(p, data)
    return path


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without this machine's pip configuration (its indexes and wheel folders)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


@pytest.mark.slow
def test_offline_bundle_installs_into_a_fresh_venv_without_an_index(tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "toy_a", "1.0", ["toy-b==2.0", "toy-x; python_version < '3'"], os.urandom(400_000))
    _wheel(links, "toy_b", "2.0", [], os.urandom(400_000))
    _wheel(links, "toy_c", "1.0", [], b"never reached")
    pins = tmp_path / "constraints.txt"
    pins.write_text("# pins\ntoy-a==1.0\ntoy_b==2.0\ntoy-c==1.0\n")
    out = tmp_path / "bundle"
    build = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "offline-bundle.py"), "--out", str(out), "--constraints", str(pins),
         "--find-links", str(links), "--with", "toy-a", "--only", "toy-a", "--only", "toy-b", "--part-size", "1M",
         "--level", "1"], capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert build.returncode == 0, build.stderr
    parts = sorted(out.glob("cemlab-offline-*-of-*.tar"))
    assert [p.name for p in parts] == ["cemlab-offline-1-of-2.tar", "cemlab-offline-2-of-2.tar"]   # 400 kB of noise each
    assert all(p.stat().st_size <= 1 << 20 for p in parts)
    members = sorted(m for p in parts for m in tarfile.open(p).getnames())
    assert [m.split("-")[0] for m in members] == ["cemlab", "toy_a", "toy_b"]   # toy-c is pinned, not needed
    manifest = (out / "MANIFEST.txt").read_text()
    assert "python3 -m pip install --no-index --find-links wheelhouse cemlab" in manifest and "sha256=" in manifest

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = _clean_env(PYTHON=str(py))
    steps = [["unpack"], ["install", "toy-a"], ["install", "--no-deps", "cemlab"]]   # cemlab's own needs: torch & co
    for step in steps:
        done = subprocess.run(["sh", str(out / "install.sh"), *step], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, (step, done.stdout, done.stderr)
    for line in manifest.splitlines():   # the wheels as unpacked are the ones the manifest names
        if ".whl " in line:
            name, digest = line.split()[0], line.split("sha256=")[1].split()[0]
            assert hashlib.sha256((out / "wheelhouse" / name).read_bytes()).hexdigest() == digest, name
    probe = subprocess.run([str(py), "-c", "import toy_a, toy_b, cemlab.paths, importlib.metadata as m; "
                            "print(toy_a.VALUE, toy_b.VALUE, m.version('cemlab'))"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert probe.stdout.split() == ["1.0", "2.0", "0.1.0"], probe.stderr

    fake = tmp_path / "python2"
    fake.write_text("#!/bin/sh\necho 2.7\n")
    fake.chmod(0o755)
    refused = subprocess.run(["sh", str(out / "install.sh")], capture_output=True, text=True,
                             env=_clean_env(PYTHON=str(fake)), timeout=60)
    assert refused.returncode == 2
    assert f"wheels for Python {sys.version_info[0]}.{sys.version_info[1]}; {fake} is Python 2.7" in refused.stderr


def test_offline_bundle_names_what_it_cannot_bundle(tmp_path, monkeypatch):
    bundle = _script("offline-bundle")
    with pytest.raises(bundle.BundleError, match=r"--part-size 2,048 cannot hold a part's tar headers and end"):
        bundle.pack([("big.whl.xz", b"x" * 4096)], 2048)
    parts = bundle.pack([("c", b"x" * 100), ("a", b"x" * 3000), ("b", b"x" * 3000), ("d", b"x" * 5000)], 20 * 1024)
    assert [[n for n, _ in p] for p in parts] == [["d", "c"], ["a", "b"]]   # largest first, into the first part it fits
    big = os.urandom(30_000)   # too large for one part: cut into pieces, each filling a part but the last
    parts = bundle.pack([("c.whl.xz", b"x" * 100), ("big.whl.xz", big)], 20 * 1024)
    assert [[n for n, _ in p] for p in parts] == [["big.whl.xz.1-of-4"], ["big.whl.xz.2-of-4"], ["big.whl.xz.3-of-4"],
                                                  ["big.whl.xz.4-of-4", "c.whl.xz"]]
    assert b"".join(b for p in parts for n, b in p if n.startswith("big")) == big
    for p in parts:   # every part, as written, within the limit
        with tarfile.open(tmp_path / "p.tar", "w", format=tarfile.PAX_FORMAT) as t:
            for name, blob in p:
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
        assert (tmp_path / "p.tar").stat().st_size <= 20 * 1024

    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "toy_a", "1.0", ["toy-b>=2"], b"")
    _wheel(links, "toy_b", "2.0", [], b"")
    root = _wheel(tmp_path, "cemlab", "0.1.0", ["toy-a"], b"")
    monkeypatch.setattr(bundle, "build_cemlab_wheel", lambda dest: root)
    pins = tmp_path / "c.txt"
    pins.write_text("toy-a==1.0\n")
    args = bundle.argparse.Namespace(constraints=pins, installed=None, only=None, python_version=None, with_=[],
                                     find_links=links, keep_small=0)
    with pytest.raises(bundle.BundleError, match=r"toy-b: needed but not pinned in .*c\.txt; pin it there"):
        bundle.collect(args, tmp_path / "wheels")
    installed = tmp_path / "node.txt"
    installed.write_text("# the node's packages\ntoy_b==2.0.1\ntoy-a\n")
    args.installed = installed   # the node has both: toy-b has no pin to fall back on, toy-a is large
    for keep, bundled in ((0, ["cemlab"]), (1 << 20, ["cemlab", "toy_a"])):
        args.keep_small = keep   # ... or small enough to bring as a fallback
        (tmp_path / f"w{keep}").mkdir()
        assert [p.name.split("-")[0] for p in bundle.collect(args, tmp_path / f"w{keep}")] == bundled


def _session(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-session.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_gpu_session_plans_its_steps_within_the_budget(tmp_path):
    done = _session("--dry-run", out=tmp_path)
    assert done.returncode == 1   # at the limits, the last steps would not fit 570 s
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("- ")]
    assert [ln.split()[1] for ln in lines] == ["receive", "install", "tests", "sweep", "sweep:", "results:", "bench:"]
    assert "install.sh install cemlab" in lines[1] and "tests/test_gpu_paths.py tests/test_attention_kernels.py" in lines[2]
    assert "--scale gpu" in lines[3] and r"seed=\[0\]" in lines[3] and "limit 50 s, at most 560 s" in lines[3]
    assert "skipped, 10 s of the 570 s budget left" in lines[4] and r"seed=\[1\]" in lines[4]
    assert (tmp_path / "summary.md").read_text().count("\n- ") == 7

    done = _session("--dry-run", "--budget", "900", "bench", "sweep", out=tmp_path)   # run in the steps' order
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("- ")]
    assert done.returncode == 0 and [ln.split()[1] for ln in lines] == ["sweep", "sweep", "results:", "bench"]
    assert "limit 300 s, at most 600 s" in lines[1] and r"seed=\[1\]" in lines[1]
    assert "cem-attn\\ flex" in lines[3] and "limit 150 s, at most 750 s" in lines[3]


@pytest.mark.parametrize("args,message", [
    (("--dry-run", "sweeep"), "unknown step 'sweeep'; the steps are: receive install tests sweep bench (or all)"),
    (("--dry-run", "--budget", "ten"), "--budget needs a number of seconds"),
    (("--dry-run", "--out"), "--out needs a folder"),
])
def test_gpu_session_refuses_bad_arguments(tmp_path, args, message):
    done = _session(*args, out=tmp_path)
    assert done.returncode == 2 and message in done.stderr


def test_gpu_session_needs_a_folder_for_its_results():
    done = _session("--dry-run")
    assert done.returncode == 2 and "set OUT or pass --out DIR" in done.stderr


def test_gpu_results_sets_each_cells_later_trials_against_its_first(tmp_path):
    results = _script("gpu-results")
    (tmp_path / "summary-p1.json").write_text('{"trials": [{"run_id": "a", "wall_seconds": 61.5}]}')
    (tmp_path / "summary.json").write_text('{"trials": [{"run_id": "b", "wall_seconds": 20}, {"run_id": "c"}]}')
    assert results.trial_walls(tmp_path) == {"a": 61.5, "b": 20.0}   # every invocation's trials
    rows = [{"trial": "86m__llama__lr2e-3__s0", "start": 1, "first_step_s": 80.0},
            {"trial": "86m__cem-attn_T2__lr2e-3__s0", "start": 2, "first_step_s": 100.0},
            {"trial": "86m__llama__lr2e-3__s1", "start": 3, "first_step_s": 8.0},
            {"trial": "86m__cem-attn_T2__lr2e-3__s1", "start": 4, "first_step_s": 30.0},
            {"trial": "86m__cem-mlp_T2__lr2e-3__s0", "start": 5, "first_step_s": None}]
    pairs = results.compile_pairs(rows)
    assert [(p["cell"], p["later"], p["ratio"]) for p in pairs] == [
        ("86m__llama__lr2e-3", "86m__llama__lr2e-3__s1", 0.1), ("86m__cem-attn_T2__lr2e-3", "86m__cem-attn_T2__lr2e-3__s1", 0.3)]
    text = results.markdown([{**r, "status": "finished", "wall_s": 60.0, "steps": 323, "tokens_per_s": 1e6,
                              "mfu": 0.02, "test_ppl": 9.5} for r in rows], pairs, None)
    assert "| 86m__llama__lr2e-3 | 86m__llama__lr2e-3__s0 | 80.0 | 86m__llama__lr2e-3__s1 | 8.0 | 0.10 |" in text
    assert "| 86m__cem-mlp_T2__lr2e-3__s0 | finished | 60.0 | 323 | - | 1,000,000 | 2.0% | 9.50 | - | - |" in text
