"""Numbers and statements in the docs agree with where they come from: the README's timings are the
table ``scripts/measure-timings.py`` prints from ``docs/timings.json``; its speed table and memory
figures quote ``docs/performance.md``; its ``make test`` time is the one a named commit's message
records; its exit-code lists are the codes each command defines; ``make help`` lists the scales of
``sweeps/scales.yaml``; the README and ``docker/README.md`` say the same about the image."""

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


def _suite_measurement() -> dict[str, str]:
    """The README's last measured ``make test``: the quoted result, the commit whose message records
    it, and its date."""
    m = re.search(r"Last measured: `(make test: \d+ passed[^`]* in \d+ min \d+ s)` \(commit ([0-9a-f]{7,40}), "
                  r"(\d{4}-\d{2}-\d{2})", _flat(README))
    assert m, "the README no longer says when make test was last measured, in the form this test reads"
    return dict(quote=m.group(1), commit=m.group(2), date=m.group(3))


def test_readme_timings_are_the_table_the_script_prints():
    mt = _timings_script()
    assert mt.table(mt.read_timings()) in README
    # every wall time the README gives for these rows is in that table
    table = mt.table(mt.read_timings())
    suite = _suite_measurement()  # make test's time: quoted from a commit (its own test below)
    for m in re.finditer(r"\d+ min \d+ s|about \d+ s\b|\(a minute\)", README.replace(suite["quote"], "")):
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
    from cemlab.sweeps.sweepfile.load import load_sweep

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
    from cemlab.sweeps.plan import plan_sweep

    # at most: the confirmation stage's budget; at least: the selection stage (the grid and its
    # bracketing step, certain with two rates: the better of two is an end), all --no-seeding runs
    plan = plan_sweep("recursion_ablation", "tiny", read_store=False)
    most, least = plan.max_trials, plan.min_trials
    spec = load_sweep("recursion_ablation")
    assert most == spec.confirmation_budget("tiny", trials) and n_lrs == 2
    assert least == len(cells) * (n_lrs + spec.bracket_steps("tiny")) * n_seeds
    assert f"at scale tiny: <{least} to {most}> finished" in text
    assert f"as many as a budget of {most} models buys" in text
    assert f"one-sided {spec.confirmation.alpha / 2:.2%}" in text


def test_readme_quotes_the_last_make_test_as_its_commit_records_it():
    """To update: commit with the run's result in the message (``make test: N passed, M skipped in
    X min Y s``), then quote it here with that commit and its date."""
    suite = _suite_measurement()
    git = subprocess.run(["git", "-C", str(ROOT), "show", "-s", "--format=%cs%n%B", suite["commit"]],
                         capture_output=True, text=True)
    if git.returncode != 0:
        pytest.skip(f"commit {suite['commit']} is not in this checkout (a shallow clone?): {git.stderr.strip()}")
    date, _, message = git.stdout.partition("\n")
    assert suite["quote"] in _flat(message), f"commit {suite['commit']}'s message does not say {suite['quote']!r}"
    assert suite["date"] == date, f"commit {suite['commit']} is of {date}, the README says {suite['date']}"


def _exit_codes(package: str) -> dict[str, set[int]]:
    """Per module of ``cemlab/<package>``: the codes its module-level ``EXIT_* = n`` names define."""
    import ast

    found: dict[str, set[int]] = {}
    for path in sorted((ROOT / "cemlab" / package).rglob("*.py")):
        codes: set[int] = set()
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for name, value in zip(names, values):
                    if isinstance(name, ast.Name) and name.id.startswith("EXIT_") and isinstance(value, ast.Constant):
                        codes.add(value.value)
        if 0 in codes:  # a command's codes start at 0 (a worker's own exit status does not)
            found[str(path.relative_to(ROOT))] = codes
    return found


def _readme_codes(lead: str) -> set[int]:
    """The codes of the README's list that starts with ``lead``, up to the end of its paragraph."""
    start = README.index(lead)
    para = _flat(README[start:README.find("\n\n", start)])
    return {int(c) for c in re.findall(r"(?:codes: |; )(\d+) ", para)}


@pytest.mark.parametrize("command, package, lead", [
    ("train", "train", "`cemlab train` exit codes:"),
    ("sweep", "sweeps", "`cemlab sweep` exit codes:"),
    ("report", "report", "Exit codes: 0 ok"),
    ("reproduce", "reproduce", "`cemlab reproduce` exit codes:"),
])
def test_readme_lists_every_exit_code_each_command_defines(command, package, lead):
    defined = _exit_codes(package)
    assert len(defined) == 1, f"cemlab/{package} defines exit codes in {sorted(defined)}: which are cemlab {command}'s?"
    (where, codes), = defined.items()
    assert _readme_codes(lead) == codes, f"README's cemlab {command} exit codes differ from {where}'s EXIT_* names"


def _named_files(text: str) -> list[tuple[str, str | None]]:
    """The files a text names in backticks with a folder (``report/stats/trend.py``,
    ``tests/test_ladder.py::test_name``), placeholders such as ``tasks/<name>.py`` left out."""
    found = re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|yaml|md|sh))(?:::(\w+))?`", text)
    return [(path, test or None) for path, test in found]


@pytest.mark.parametrize("doc, section", [("docs/architecture.md", "## Where to add"), ("docs/extending.md", None)])
def test_where_to_add_names_files_that_exist(doc, section):
    """Each file "Where to add" and docs/extending.md send a reader to exists (under the repository or
    ``cemlab/``), and each ``file::test`` is a test of that file: a module moved or renamed moves here too."""
    text = (ROOT / doc).read_text()
    if section:  # its table's rows (the paragraph after it names files as they were)
        start = text.index(section)
        text = "\n".join(line for line in text[start:text.find("\n## ", start + 1)].splitlines() if line.startswith("|"))
    named = _named_files(text)
    assert named, f"{doc} names no file"
    for path, test in named:
        where = [p for p in (ROOT / path, ROOT / "cemlab" / path) if p.is_file()]
        assert where, f"{doc} names {path}, which is neither in the repository nor in cemlab/"
        if test:
            assert f"def {test}(" in where[0].read_text(), f"{doc} names {path}::{test}, which is no test there"
