"""Numbers and statements in the docs agree with where they come from: the README's timings are the
table ``scripts/measure-timings.py`` prints from ``docs/timings.json``; its speed table and memory
figures quote ``docs/performance.md``; ``make help`` lists the scales of ``sweeps/scales.yaml``; the
README and ``docker/README.md`` say the same about the image."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _timings_script():
    spec = importlib.util.spec_from_file_location("measure_timings", ROOT / "scripts" / "measure-timings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_timings_are_the_table_the_script_prints():
    mt = _timings_script()
    assert mt.table(mt.read_timings()) in README
    # every wall time the README gives for these rows is in that table
    table = mt.table(mt.read_timings())
    for m in re.finditer(r"\d+ min \d+ s|about \d+ s\b|\(a minute\)", README):
        assert m.group(0) in table, f"README gives a wall time outside the measured table: {m.group(0)!r}"
    # a measured row shows its time, machine and date; an unmeasured one says how to measure it
    rows = mt.table({"train": {"seconds": 65.4, "machine": "CPU X, 2 cores, load 7.9", "date": "2026-11-23 22:10 UTC"}})
    assert "| one training run | `cemlab train configs/default.yaml` | 1 min 05 s | CPU X, 2 cores, load 7.9 | " \
           "2026-11-23 22:10 UTC |" in rows
    assert "| the main job | `make sweep SWEEP=recursion_ablation` | not measured yet: " \
           "`python3 scripts/measure-timings.py sweep` | | |" in rows


def test_the_script_with_no_row_prints_the_table_and_names_an_unknown_row(capsys):
    mt = _timings_script()
    assert mt.main([]) == 0
    assert mt.table(mt.read_timings()) in capsys.readouterr().out
    with pytest.raises(SystemExit):
        mt.main(["sweeps"])
    assert "unknown row(s) sweeps: choose from sweep, install, train" in capsys.readouterr().err


def test_readme_quotes_the_speed_table_and_memory_of_docs_performance():
    perf = (ROOT / "docs" / "performance.md").read_text()
    start = perf.index("| variant | tok/s (run 1, 2, 3) |")
    table = []
    for line in perf[start:].splitlines():
        if not line.startswith("|"):
            break
        table.append(line)
    assert "\n".join(table) in README
    memory = re.search(r"T = 8 with per-step checkpointing peaks at\s+[^;]+;[^)]+\)", perf).group(0)
    assert _flat(memory) in _flat(README)
    command = re.search(r"cemlab bench kernels --device cpu --threads 1 --rounds \d+ --steps 1 \\\n\s+--variants llama "
                        r"hf-llama[^\n]+", perf).group(0)
    assert _flat(command) in _flat(README)


def test_make_help_lists_every_scale_of_scales_yaml():
    scales = list(yaml.safe_load((ROOT / "sweeps" / "scales.yaml").read_text()))
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, check=True).stdout
    listed = re.search(r"SCALE=\S+ \(([^)]*)\)", out).group(1).split("|")
    assert listed == scales and "tiny-prose" in listed


def test_readme_and_docker_readme_agree_that_a_cpu_image_was_built_and_run():
    docker = _flat((ROOT / "docker" / "README.md").read_text())
    assert "A CPU build of the image was built and run here with Podman" in docker
    assert "a CPU build of the image was built and run with Podman" in _flat(README)
    assert "has not been built" not in README


def test_readme_counts_the_main_jobs_trials_and_cells_as_the_sweep_file_plans_them(monkeypatch):
    from cemlab.sweeps.spec.load import load_sweep

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(ROOT / "sweeps"))
    trials = load_sweep("recursion_ablation").expand("tiny")
    cells = {(t.variant, t.size) for t in trials}
    lrs = {t.config.train.lr for t in trials}
    seeds = {t.config.train.seed for t in trials}
    text = _flat(README)
    m = re.search(r"at its `tiny` scale: (\d+) small models \((\d+) cells x (\d+) learning rates x (\d+) seeds", text)
    assert m, "the README's paragraph on the main job no longer counts its models"
    n, n_cells, n_lrs, n_seeds = map(int, m.groups())
    assert (n, n_cells, n_lrs, n_seeds) == (len(trials), len(cells), len(lrs), len(seeds))
    spec = load_sweep("recursion_ablation")
    looks = spec.looks("tiny", trials)  # seeds added where a verdict is open: at most the last look's seeds
    most = len(trials) // len(looks[0]) * len(looks[-1])
    assert f"at scale tiny: <{len(trials)} to {most}> finished" in text
    assert f"(at most {most} models;" in text
