"""What the sweep tests share: the project's sweep folder and files, a test-only sweep folder,
running a sweep as ``cemlab sweep`` does, reading its runs back, the grid a sweep file plans
(computed from the YAML itself, not through ``cemlab.sweeps.sweepfile.load``) and a trial's checkpoint state.
The fixtures (``data_cache``, ``ray_local``) are in conftest.py."""

from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from pathlib import Path

import yaml

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
SWEEP_FILES = sorted(p for p in REPO_SWEEPS.glob("*.yaml") if p.name != "scales.yaml")
SCALES_YAML = yaml.safe_load((REPO_SWEEPS / "scales.yaml").read_text())
SCALES = list(SCALES_YAML)


#: The variants of a test-only ``recursion_ablation`` (the cells the recursion claims read): Llama, and
#: CEM attention with dplr and a shared KQ diagonal at T and eta; a file adds ``    axes: {T: [...], eta: [...]}``.
RECURSION_VARIANTS = """\
variants:
  - {group: llama, label: llama}
  - group: cem-attn
    label: "cem-attn T{T} eta={eta}"
    set: {model.attention: cem, model.kq_diagonal: shared, model.attn_steps: "{T}", model.attn_precond: dplr,
          model.attn_eta: "{eta}"}
"""


def expected_grid(path: Path, scale: str) -> tuple[int, int]:
    """(rows of the plan, runs they stand for) from the raw YAML: size x lr x seed x sum over
    variants of the product of their own axes, each axis replaced by the file's override at
    ``scale``; a ``search: optuna`` file has one row per cell standing for ``samples`` runs."""
    d = yaml.safe_load(path.read_text())
    per_scale = d.get("scales") or {}
    like = SCALES_YAML[scale].get("like")  # a `like:` scale takes its parent's sweep overrides
    over = per_scale.get(scale, per_scale.get(like, {}) if like else {})
    axes = d.get("axes") or {}

    def n(name: str, default: list) -> int:
        return len(over.get(name, axes.get(name, default)))

    searched = d.get("search") == "optuna"
    top = n("size", [None]) * n("seed", [0]) * (1 if searched else n("lr", [None]))
    cells = top * sum(math.prod(len(over.get(k, v)) for k, v in (var.get("axes") or {}).items())
                      for var in d["variants"])
    if not searched:
        return cells, cells
    samples = d["optuna"]["samples"]
    return cells, cells * (samples.get(scale, samples.get(like)) if isinstance(samples, dict) else samples)


#: The main job's sweep file as the ladder's committed stage table ran it (docs/ladder-stages.csv: its
#: ladder before the rungs took a confirmation stage and carried rates, 2026-11-29): the plan's time
#: constants were measured on it, until the rungs are rerun.
AS_MEASURED = Path(__file__).resolve().parent / "data" / "recursion_ablation-ladder-as-measured.yaml"

def local_sweeps(tmp_path: Path, **files: str) -> Path:
    """A sweep folder with the project's scales and the given test-only sweep files."""
    d = tmp_path / "sweeps"
    d.mkdir(exist_ok=True)
    shutil.copy(REPO_SWEEPS / "scales.yaml", d / "scales.yaml")
    for name, text in files.items():
        (d / f"{name}.yaml").write_text(textwrap.dedent(text))
    return d


def write_sweep(d: Path, name: str, text: str) -> Path:
    """A hand-written sweep file ``name`` in the folder ``d``."""
    p = d / f"{name}.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def assert_refused(d: Path, name: str, text: str, fragments: list[str], scale: str | None = None) -> str:
    """Write the sweep file ``name`` into ``d``, load it (and expand it at ``scale``, if given) and
    assert the ``SweepError`` names the file and every one of ``fragments`` (the field and the fix);
    the message."""
    import pytest

    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.sweeps.sweepfile.schema import SweepError

    path = write_sweep(d, name, text)
    with pytest.raises(SweepError) as info:
        spec = load_sweep(path)
        if scale is not None:
            spec.expand(scale)
    msg = str(info.value)
    assert str(path) in msg, msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in:\n{msg}"
    return msg


def run(name: str, cache: Path, report: bool = True, **kw):
    """``cemlab sweep NAME --scale smoke``: the sweep, then (``report``) its report, as the command does."""
    from rich.console import Console

    from cemlab.cli import report_after_sweep
    from cemlab.report.looks.interim_look_store import sweep_bracket, sweep_look
    from cemlab.sweeps.runner import run_sweep

    console = Console(file=open("/dev/null", "w"), width=200)  # the table is tested in test_sweep_run_progress
    kw.setdefault("looker", sweep_look)  # the judge of a seeded sweep's looks, as cemlab sweep hands it in
    kw.setdefault("bracketer", sweep_bracket)  # the judge of its bracketing looks, likewise
    result = run_sweep(name, "smoke", cache_dir=cache, console=console, live=False, **kw)
    if report:
        report_after_sweep(result, console, kw.get("overrides"))
    return result


def client_for(result):
    from mlflow.tracking import MlflowClient

    return MlflowClient(result.tracking_uri)


def experiment_runs(client, sweep: str) -> list:
    exp = client.get_experiment_by_name(f"cemlab/{sweep}")
    assert exp is not None, f"no experiment cemlab/{sweep}"
    return client.search_runs([exp.experiment_id], max_results=1000)


def all_runs(client) -> list:
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, max_results=1000)


def linked_files(index: Path) -> list[str]:
    return re.findall(r'(?:src|href)="([^"#:]+)"', index.read_text())


def trial_state(runs: Path, log_dir: Path, trial_id: str) -> dict:
    """state.json of a trial's checkpoint folder, found through the config hash in its log."""
    log = log_dir / f"{trial_id}.log"
    if not log.is_file():
        return {}
    m = re.search(r"\(config ([0-9a-f]+)\)", log.read_text())
    try:
        return json.loads((runs / "checkpoints" / m.group(1) / "state.json").read_text()) if m else {}
    except (OSError, ValueError):
        return {}


#: The main job's seeding plan before its confirmation stage (seeds 0-2 at tiny, looks 3 -> 6 at
#: 0.0025 + 0.0475): the seed-look machinery is still the sweep file's ``seeding:``, tested on it.
SEEDED_MAIN_JOB = """\
seeding:
  max_seeds: {tiny: 6}
  batch: 3
  alpha_split: {tiny: [0.0025, 0.0475]}
"""


def seeded_sweeps(tmp_path: Path) -> Path:
    """A copy of the project's sweep folder whose ``recursion_ablation`` adds seeds by looks at tiny
    (``SEEDED_MAIN_JOB``, seeds 0-2) instead of its confirmation stage."""
    d = tmp_path / "seeded-sweeps"
    shutil.copytree(REPO_SWEEPS, d, dirs_exist_ok=True)
    p = d / "recursion_ablation.yaml"
    text = p.read_text()
    head, _, rest = text.partition("\nconfirmation:\n")
    tail = rest[rest.index("\n# The ladder"):] if "\n# The ladder" in rest else ""
    head = head.replace("precond: [dplr], seed: [0, 1]}", "precond: [dplr], seed: [0, 1, 2]}", 1)
    tail = "".join(line for line in tail.splitlines(keepends=True)   # the rungs' budgets need the section
                   if not line.startswith(("  budget:", "  fresh:", "  primary_seeds:")))
    p.write_text(head + "\n" + SEEDED_MAIN_JOB + tail.lstrip("\n"))
    return d
