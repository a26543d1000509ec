"""The CLI answers before it imports the heavy libraries: ``cemlab --help``, a refused argument and
tab completion import none of torch, Lightning, Ray, MLflow, pandas or SciPy; ``cemlab plan`` imports
torch (it builds the models, for their shapes only, to count their parameters) but none of the others.

Held on what each command imports (``python -X importtime``, in a fresh interpreter), not on wall
clock: docs/performance.md has the times."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "ray", "mlflow", "pandas", "scipy", "optuna")


def imported(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """The top-level packages ``cemlab ARGS`` imports, and the finished process."""
    full_env = {**os.environ, "CEMLAB_RUNS_DIR": str(tmp_path / "runs"), **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cemlab.cli", *args], env=full_env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", proc.stderr, flags=re.M)
    assert names, proc.stderr[-2000:]   # -X importtime reported what it imported
    return {n.split(".")[0] for n in names}, proc


@pytest.mark.parametrize("args, code", [(["--help"], 0), (["plan", "--no-such-flag"], 2),
                                        (["sweep", "recursion_ablation", "--scale", "no-such-scale"], 2)],
                         ids=["help", "refused-flag", "refused-scale"])
def test_help_and_refused_arguments_import_no_heavy_library(tmp_path, args, code):
    top, proc = imported(args, tmp_path)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "cemlab" in top and "argparse" in top
    assert not top & set(HEAVY), sorted(top & set(HEAVY))


def test_tab_completion_imports_no_heavy_library(tmp_path):
    out = tmp_path / "completions"
    line = "cemlab sw"
    top, proc = imported([], tmp_path, env={"_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
                                            "COMP_TYPE": "9", "_ARGCOMPLETE_IFS": "\n",
                                            "_ARGCOMPLETE_STDOUT_FILENAME": str(out)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text().split() == ["sweep"]   # it completed the subcommand
    assert "argcomplete" in top and not top & set(HEAVY), sorted(top & set(HEAVY))


def test_plan_of_a_small_sweep_imports_torch_only(tmp_path):
    top, proc = imported(["plan", "recursion_ablation", "--scale", "smoke"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recursion_ablation" in proc.stdout and "86m" in proc.stdout
    assert "torch" in top   # the parameter counts build the models (shapes only)
    assert not top & (set(HEAVY) - {"torch"}), sorted(top & set(HEAVY))
