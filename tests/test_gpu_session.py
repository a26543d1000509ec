"""What a GPU session needs, checked on the CPU: the offline bundle (scripts/offline-bundle.py)
builds from pinned wheels and installs into a fresh virtual environment with pip's index switched
off; the session script (scripts/gpu-session.sh) plans its steps within its budget and refuses bad
arguments; the calls docs/gpu.md gives for a lent GPU machine work where every call starts from a
fresh copy of the checkout (replayed here, with a stand-in only where a GPU is needed); its grids
are the main job's and the two-size run's; scripts/gpu-results.py pairs a cell's trials to show what
the compile cache saved.

The bundle is built from small wheels made here (no index needed) and cemlab's own wheel; the
full bundle for the GPU image is a documented command (docs/gpu.md), not a test."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
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


def _session(*args: str, out: Path | None = None, state: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_SESSION_STATE")}
    if out is not None:
        env["OUT"] = str(out)
    if state is not None:
        env["GPU_SESSION_STATE"] = str(state)
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-session.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def _planned(done: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in done.stdout.splitlines() if ln.startswith("- ")]


def test_gpu_session_plans_its_steps_within_the_budget(tmp_path):
    state = tmp_path / "state"
    done = _session("--dry-run", out=tmp_path, state=state)
    assert done.returncode == 1   # at the limits, the last step would not fit 570 s
    lines = _planned(done)
    assert [ln.split()[1] for ln in lines] == ["receive", "install", "bench", "main", "main:", "sizes:"]
    # the bundle is unpacked and installed from the state folder, outside the checkout
    assert f"{state}/bundle/install.sh unpack" in lines[0] and f"{state}/bundle/install.sh install cemlab" in lines[1]
    assert "--presets 86m --batch 8 --seq 2048 --dtype bf16 --compile on" in lines[2]
    assert "limit 150 s, at most 270 s" in lines[2]
    assert "--scale gpu" in lines[3] and "limit 230 s, at most 560 s" in lines[3]   # 60 s kept for its tables
    assert f"--runs {state}/runs > main.md" in lines[4]
    assert "skipped, 10 s of the 570 s budget left" in lines[5] and r"size=\[86m\,108m\]" in lines[5]
    assert (tmp_path / "summary.md").read_text().count("\n- ") == 6
    assert not state.exists()   # a dry run leaves the machine as it was

    done = _session("--dry-run", "--budget", "900", "--limit", "main=100", "sweep", "main", out=tmp_path, state=state)
    lines = _planned(done)   # run in the steps' order
    assert done.returncode == 0 and [ln.split()[1] for ln in lines] == ["main", "main:", "sweep", "sweep:", "sweep", "sweep:"]
    assert "limit 100 s, at most 160 s" in lines[0]
    assert r"seed=\[0\]" in lines[2] and "limit 300 s, at most 520 s" in lines[2]
    assert r"seed=\[1\]" in lines[4] and "limit 300 s, at most 880 s" in lines[4]
    assert f"--runs {state}/runs-cache > sweep.md" in lines[5]


def test_gpu_session_runs_the_main_jobs_grid_then_the_same_over_two_sizes(tmp_path):
    from cemlab.sweeps.sweepfile.load import load_sweep

    lines = _planned(_session("--dry-run", "main", "sizes", "--budget", "2000", out=tmp_path, state=tmp_path / "s"))
    spec = load_sweep("recursion_ablation")
    grids, flags = {}, {}
    for step in ("main", "sizes"):
        line = next(ln for ln in lines if ln.startswith(f"- {step} ("))
        words = shlex.split(line.split("--scale gpu ")[1].split(" --plain")[0])
        grids[step] = spec.expand("gpu", overrides=[w for w in words if not w.startswith("--")])
        flags[step] = [w for w in words if w.startswith("--")]
    main, sizes = grids["main"], grids["sizes"]
    # the 54-trial grid the 5-minute target is set for; the two-size run brackets (its verdicts need it)
    assert flags == {"main": ["--no-bracketing"], "sizes": []}
    cells = {re.sub(r"__lr[^_]+__s\d+$", "", t.trial_id) for t in main}
    assert len(main) == 54 and len(cells) == 9   # the main job: 9 cells x 2 rates x 3 seeds
    assert {t.axes["lr"] for t in main} == {2e-3, 4e-3} and {t.axes["seed"] for t in main} == {0, 1, 2}
    assert {t.trial_id.split("__")[0] for t in sizes} == {"86m", "108m"} and len(sizes) == 108
    assert {t.trial_id for t in main} < {t.trial_id for t in sizes}   # the two-size run reuses the main job's trials


DOCS = ROOT / "docs" / "gpu.md"


def _documented_calls() -> list[dict]:
    """The calls docs/gpu.md gives for the lent machine (its table headed ``| call | carry | command |``):
    the paths each carries, its command and the runner's time limit for it."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| call | carry | command |"))
    calls = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        calls.append({"call": cells[0], "carry": re.findall(r"`([^`]+)`", cells[1]),
                      "command": re.findall(r"`([^`]+)`", cells[2])[0], "limit": cells[3]})
    return calls


def _checkout_files() -> list[str]:
    """What the runner copies of the checkout: its tracked files and the untracked ones git does not ignore."""
    done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [f for f in done.stdout.split("\0") if f and (ROOT / f).is_file()]


class _Machine:
    """The lent machine as docs/gpu.md describes it: every call runs in a fresh copy of the checkout
    (the same path each time) with the paths it carries, and nothing written there is kept; its
    /tmp (here ``tmp``) and its Python's installed packages (a virtual environment) last from call
    to call until the machine is given back. The commands that need a GPU run the stand-in
    (tests/gpu_session_support.py); unpacking, installing and handing over run for real."""

    def __init__(self, base: Path, bundle: Path, python: Path, journal: Path):
        self.base, self.bundle, self.python, self.journal = base, bundle, python, journal
        self.tmp = base / "machine-tmp"
        self.tmp.mkdir()
        self.checkout = base / "checkout"
        self.files = _checkout_files()
        self.stand_in = base / "stand-in"
        self.stand_in.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                                 f"{shlex.quote(str(ROOT / 'tests' / 'gpu_session_support.py'))} \"$@\"\n")
        self.stand_in.chmod(0o755)
        self.n = 0

    @property
    def state(self) -> Path:
        return self.tmp / "cemlab-gpu-session"

    def call(self, command: str, carry: list[str], **env: str) -> tuple[subprocess.CompletedProcess, Path]:
        if self.checkout.exists():
            shutil.rmtree(self.checkout)
        for rel in self.files:
            (self.checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, self.checkout / rel)
        for rel in carry:   # the bundle as scripts/offline-bundle.py wrote it, under offline-bundle/
            assert rel.startswith("offline-bundle/"), rel
            (self.checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.bundle / rel.removeprefix("offline-bundle/"), self.checkout / rel)
        self.n += 1
        out = self.base / f"out-{self.n}"   # the runner's $OUT, empty at each call's start
        out.mkdir()
        keep = {k: v for k, v in _clean_env().items()
                if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OUT") and not k.startswith("CEMLAB_")}
        env = {**keep, "OUT": str(out), "PYTHON": str(self.python), "GPU_SESSION_STATE": str(self.state),
               "GPU_SESSION_STAND_IN": str(self.stand_in), "STAND_IN_JOURNAL": str(self.journal), **env}
        done = subprocess.run(["bash", "-c", command], cwd=self.checkout, env=env, capture_output=True, text=True,
                              timeout=300)
        return done, out

    def give_back(self) -> None:
        shutil.rmtree(self.tmp)
        self.tmp.mkdir()


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else f"({path.name} missing)"


def test_the_documented_bundle_part_travels_beside_the_checkout_within_a_calls_64_mib():
    # the runner carries the working tree and the paths a call names, 64 MiB in all
    build = re.search(r"```bash\n(python3 scripts/offline-bundle\.py.*?)```", DOCS.read_text(), re.S)[1]
    part = _script("offline-bundle").parse_size(re.search(r"--part-size (\S+)", build)[1])
    tree = sum((ROOT / f).stat().st_size for f in _checkout_files())
    assert part + tree + (16 << 10) <= 64 << 20, f"part {part / 2**20:.1f} MiB + tree {tree / 2**20:.1f} MiB"


@pytest.mark.slow
def test_the_documented_calls_work_when_each_starts_from_a_fresh_checkout(tmp_path):
    # A bundle of two parts whose install needs both: cemlab (the toy one) needs toy-a, too large for
    # one part and cut in two pieces, one in each; toy-a needs toy-b, in part 2.
    bundle_script = _script("offline-bundle")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = [_wheel(wheels, "cemlab", "0.0.1", ["toy-a"], b""),
            _wheel(wheels, "toy_a", "1.0", ["toy-b==2.0"], os.urandom(900_000)),
            _wheel(wheels, "toy_b", "2.0", [], os.urandom(200_000))]
    bundle = tmp_path / "bundle"
    parts = bundle_script.write_bundle(
        bundle_script.argparse.Namespace(out=bundle, part_size=600 << 10, level=0, python_version=None), made)
    members = {p.name: [m.split("-")[0] + m.partition(".whl.xz")[2] for m in tarfile.open(p).getnames()] for p in parts}
    assert members == {"cemlab-offline-1-of-2.tar": ["toy_a.1-of-2"],
                       "cemlab-offline-2-of-2.tar": ["cemlab", "toy_a.2-of-2", "toy_b"]}
    image = tmp_path / "image-python"   # the machine's Python: what pip installs there stays while it is warm
    subprocess.run([sys.executable, "-m", "venv", str(image)], check=True, timeout=300)
    journal = tmp_path / "journal.jsonl"
    machine = _Machine(tmp_path, bundle, image / "bin" / "python", journal)

    calls = _documented_calls()
    assert sorted(c for call in calls for c in call["carry"] if c.endswith(".tar")) == [
        f"offline-bundle/{p.name}" for p in parts]   # every part carried, each once
    outs = []
    for call in calls:
        done, out = machine.call(call["command"], call["carry"])
        assert done.returncode == 0, (call, done.stdout[-4000:], done.stderr[-2000:],
                                      _read(machine.state / "results" / "install.log"))
        outs.append(out)
        left = {str(p.relative_to(machine.checkout)) for p in machine.checkout.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
        assert left == set(machine.files) | set(call["carry"])   # nothing of the session kept in the checkout

    for call in calls:   # the runner's limit leaves the script 30 s over its own budget, within the 600 s a call has
        budget = re.search(r"--budget (\d+)", call["command"])
        assert (int(budget.group(1)) if budget else 570) + 30 <= int(re.match(r"\d+", call["limit"])[0]) <= 600, call

    runs = [json.loads(line) for line in journal.read_text().splitlines()]
    # every command that needs the GPU found the bundle installed, also in calls after the install's
    assert runs and all(r["probe"] == ["0.0.1", "1.0", "2.0"] for r in runs), runs
    sweeps = [r for r in runs if r["argv"][:3] == ["-m", "cemlab.cli", "sweep"] and "--mark-interrupted" not in r["argv"]]
    main = [r for r in sweeps if "size=[86m]" in r["argv"]]
    sizes = [r for r in sweeps if "size=[86m,108m]" in r["argv"]]
    assert len(main) == 1 and main[0]["before"] == []   # the main job from a fresh runs folder
    assert sizes and [r["before"] for r in sizes] == [["86m"]] + [["86m", "108m"]] * (len(sizes) - 1)
    assert {r["runs"] for r in sweeps} == {str(machine.state / "runs")}   # one runs folder, outside the checkout
    assert any(r["argv"][:3] == ["-m", "cemlab.cli", "bench"] for r in runs)

    last = outs[-1]   # what the last call brings back: every call's steps and tables on this machine
    summary = _read(last / "summary.md")
    assert summary.count("# GPU session call") == len(calls)
    for step in ("receive", "install", "bench", "main", "sizes"):
        assert re.search(rf"^- {step}: exit 0, ", summary, re.M), (step, summary)
    assert "| 86m |" in _read(last / "main.md") and "stages-main.jsonl" in _read(last / "main.md")
    assert "| 108m |" in _read(last / "sizes.md") and "stages-sizes.jsonl" in _read(last / "sizes.md")
    assert "| llama |" in _read(last / "bench.log")
    names = tarfile.open(last / "session.tar.gz").getnames()
    assert {"results/install.log", "results/main.log", "runs/logs/recursion_ablation-gpu/stages-main.jsonl"} <= set(names)
    assert "reports/recursion_ablation/index.md" in tarfile.open(last / "report.tar.gz").getnames()
    assert len(list(last.iterdir())) <= 8   # the runner brings back 8 files

    # A sweep stopped at its limit: its runs marked interrupted, its tables from what finished.
    seen = len(runs)
    done, out = machine.call("scripts/gpu-session.sh --limit sizes=3 sizes", [], STAND_IN_HANG="134m",
                             SIZES_AXES="size=[86m,134m] precond=[dplr] lr=[2.0e-3,4.0e-3]")
    summary = _read(out / "summary.md")
    assert done.returncode == 1 and "- sizes: exit 124 (timed out at 3 s), " in summary, summary
    after = [json.loads(line)["argv"] for line in journal.read_text().splitlines()][seen:]
    assert "size=[86m,134m]" in after[0] and "--mark-interrupted" in after[1], after
    assert "| 134m |" in _read(out / "sizes.md")   # recorded before the stop

    # The machine given back between the calls (it keeps its /tmp only while warm): said, not hidden.
    machine.give_back()
    call = next(c for c in calls if " install " in f" {c['command']} ")
    done, out = machine.call(call["command"], call["carry"])
    summary = _read(out / "summary.md")
    assert done.returncode == 1
    assert "- install: not run: cemlab-offline-1-of-2.tar never reached this machine" in summary, summary
    assert "- main: not run: no install on this machine" in summary


@pytest.mark.parametrize("args,message", [
    (("--dry-run", "sweeep"), "unknown step 'sweeep'; the steps are: receive install bench main sizes tests sweep (or all)"),
    (("--dry-run", "--budget", "ten"), "--budget needs a number of seconds"),
    (("--dry-run", "--limit", "mian=30"), "--limit needs STEP=SECONDS for one of the steps"),
    (("--dry-run", "--limit", "main"), "--limit needs STEP=SECONDS for one of the steps"),
    (("--dry-run", "--limit", "main=0"), "--limit needs STEP=SECONDS for one of the steps"),
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
