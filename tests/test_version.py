"""cemlab's version: ``cemlab.__version__`` and ``cemlab --version`` say the same string, the
installed metadata's where there is one and the source checkout's ``pyproject.toml`` version where
there is none (a checkout on PYTHONPATH, not installed), and MLflow's check of a logged model's
requirements, which falls back to ``cemlab.__version__`` without metadata, finds it and warns nothing.

Each case runs in a fresh interpreter with the checkout first on PYTHONPATH; "installed" puts a
distribution of another version (9.8.7) ahead of the real one, "absent" hides every cemlab
distribution from both metadata readers (the standard library's and the backport MLflow uses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Run in the child: hides cemlab's metadata when asked, then reports what each reader says.
PROBE = r"""
import contextlib, io, json, logging, sys
import importlib.metadata, importlib_metadata

if sys.argv[1] == "absent":
    for lib in (importlib.metadata, importlib_metadata):
        real = lib.Distribution.from_name.__func__
        def from_name(cls, name, _real=real, _lib=lib):
            if name == "cemlab":
                raise _lib.PackageNotFoundError(name)
            return _real(cls, name)
        lib.Distribution.from_name = classmethod(from_name)

import cemlab
from cemlab.cli import main

out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main(["--version"])

from mlflow.utils import requirements_utils

warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
requirements_utils._logger.addHandler(handler)
requirements_utils.warn_dependency_requirement_mismatches([f"cemlab=={getattr(cemlab, '__version__', '0')}"])
print(json.dumps({"attr": getattr(cemlab, "__version__", None), "cli": out.getvalue().strip(),
                  "metadata": [lib.version("cemlab") if sys.argv[1] != "absent" else None
                               for lib in (importlib.metadata, importlib_metadata)],
                  "mlflow_warnings": warnings}))
"""


def _probe(case: str, tmp_path: Path, first: Path | None = None) -> dict:
    path = [str(first)] if first else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", PROBE, case], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_version_comes_from_the_installed_metadata(tmp_path):
    dist = tmp_path / "site" / "cemlab-9.8.7.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: cemlab\nVersion: 9.8.7\n")
    got = _probe("installed", tmp_path, first=tmp_path / "site")
    assert got["metadata"] == ["9.8.7", "9.8.7"]   # both readers see the planted distribution first
    assert got["attr"] == "9.8.7" and got["cli"] == "cemlab 9.8.7"
    assert got["mlflow_warnings"] == []


def test_a_source_checkout_without_metadata_has_its_pyproject_version(tmp_path):
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    got = _probe("absent", tmp_path)
    # MLflow read cemlab.__version__ (no metadata to read) and found the requirement met: no
    # "module 'cemlab' has no attribute '__version__'", no mismatch
    assert got["mlflow_warnings"] == []
    assert got["attr"] == expected and got["cli"] == f"cemlab {expected}"


def test_without_metadata_or_a_cemlab_pyproject_the_version_says_unknown(tmp_path, monkeypatch):
    import importlib.metadata

    from cemlab import version as v

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(v, "version", absent)
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "another"\nversion = "3.0"\n')
    assert v.package_version(other) == v.UNKNOWN == "0+unknown"
    assert v.package_version(tmp_path / "missing.toml") == v.UNKNOWN
    other.write_text('[project]\nname = "cemlab"\nversion = "1.2.3"\n')
    assert v.package_version(other) == "1.2.3"
    other.write_text("[project\n")   # not TOML: no version read from it, none made up
    assert v.package_version(other) == v.UNKNOWN

