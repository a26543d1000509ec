"""The package's shape, read from its source (docs/architecture.md): no import cycle between files,
no import upwards between the layers, files and functions a reader can hold, and tasks that own
their differences (no comparisons against a task name outside the config's own validation)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "cemlab"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> dict[str, set[str]]:
    """Every cemlab module each module imports, at any depth of the file (lazy imports too)."""
    edges = {}
    for mod, path in MODULES.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name) if name.startswith("cemlab") else None
                if target and target != mod and not (is_pkg and target.startswith(mod + ".")):
                    deps.add(target)
        edges[mod] = deps
    return edges


EDGES = _edges()


def test_no_import_cycle_between_files():
    """Depth-first search for a back edge; the cycle found is named."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(EDGES.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        state[m] = 2
        path.pop()
        return None

    for m in sorted(EDGES):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " -> ".join(cycle)


#: Package -> cemlab packages it must not import (the layers of docs/architecture.md, upwards).
FORBIDDEN = {
    "models": {"config", "gp", "data", "tasks", "tracking", "train", "sweeps", "report", "bench", "paper", "cli"},
    "data": {"tasks", "tracking", "train", "sweeps", "report", "bench", "cli"},
    "tasks": {"train", "sweeps", "report", "bench", "cli"},
    "tracking": {"train", "sweeps", "report", "bench", "cli"},
    "train": {"sweeps", "report", "bench", "cli"},
    "sweeps": {"report", "bench", "cli"},
    "report": {"train", "bench", "cli"},
    "paper": set(MODULES),
    "metric_names": set(MODULES),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_upwards(package):
    bad = sorted(f"{m} -> {d}" for m, deps in EDGES.items() if m.split(".")[1:2] == [package]
                 for d in deps if (d.split(".") + [""])[1] in FORBIDDEN[package] - {package})
    assert not bad, bad


#: The report's folders as floors (docs/architecture.md): a folder imports only its own floor or below.
REPORT_FLOORS = {"stats": 0, "inputs": 0, "claims": 1, "looks": 2, "figures": 3, "pages": 4}


def test_no_import_up_the_reports_floors():
    def floor(m: str):
        parts = m.split(".")
        return REPORT_FLOORS.get(parts[2]) if parts[:2] == ["cemlab", "report"] and len(parts) > 3 else None

    bad = sorted(f"{m} -> {d}" for m, deps in EDGES.items() if floor(m) is not None
                 for d in deps if floor(d) is not None and floor(d) > floor(m))
    unknown = sorted({m.split(".")[2] for m in MODULES if m.startswith("cemlab.report.") and len(m.split(".")) > 3}
                     - set(REPORT_FLOORS))
    assert not bad and not unknown, (bad, unknown)


def test_files_and_functions_stay_short():
    """Package modules at most 500 lines and functions at most 80; test modules at most 600 lines."""
    tests = sorted((ROOT.parent / "tests").glob("*.py"))
    long_files = [f"{p.relative_to(ROOT.parent)} {n}" for limit, paths in ((500, MODULES.values()), (600, tests))
                  for p in paths if (n := len(p.read_text().splitlines())) > limit]
    long_functions = [f"{p.relative_to(ROOT.parent)}:{node.name} {node.end_lineno - node.lineno + 1}"
                      for p in MODULES.values() for node in ast.walk(ast.parse(p.read_text()))
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > 80]
    assert not long_files and not long_functions, (long_files, long_functions)


def test_only_the_config_compares_task_names():
    """Code that differs per task asks ``cemlab.tasks``; the config's validation of its ``task:``
    literal against its sections is the one place that names tasks."""
    from cemlab.tasks import TASKS

    found = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare) or ast.unparse(node.left).endswith(".sampler"):
                continue  # Optuna's "gp" sampler is not a task
            if any(isinstance(c, ast.Constant) and c.value in TASKS for c in [node.left, *node.comparators]):
                found.append(f"{mod}:{node.lineno}")
    outside = [f for f in found if not f.startswith("cemlab.config:")]
    assert not outside, outside


def test_no_test_module_imports_another():
    """What tests share (fixtures, helpers, servers) lives in conftest.py and the ``*_support.py``
    modules; a test module importing another would run that module's fixtures under two names
    and tie the two files' edits together."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not offenders, offenders


def test_one_module_spells_where_a_trial_lives_on_disk():
    """A sweep trial's checkpoint folder and log are built by ``sweeps/trial/files.py`` alone: the
    other sweep modules ask it instead of joining paths (or calling ``checkpoint_folder``) themselves."""
    owner = "cemlab.sweeps.trial.files"
    callers = sorted(m for m, deps in EDGES.items() if "cemlab.train.checkpoint" in deps and m.startswith("cemlab.sweeps")
                     and any(isinstance(n, ast.alias) and n.name in ("checkpoint_folder", "read_state")
                             for n in ast.walk(ast.parse(MODULES[m].read_text()))))
    assert callers == [owner], callers
    spelled = [f"{m}:{i}" for m, p in MODULES.items() if m.startswith("cemlab.sweeps") and m != owner
               for i, line in enumerate(p.read_text().splitlines(), 1)
               if '"faults"' in line or '.log"' in line or '"checkpoints"' in line]
    assert not spelled, spelled


def _package(module: str) -> str:
    """``cemlab.tasks.lm`` -> ``tasks``; a top-level module is its own package (``config``)."""
    return module.split(".")[1] if module.count(".") else module


def test_no_two_packages_import_each_other():
    """Between cemlab's packages imports go one way only (module-level or inside a function, as
    EDGES counts them): a pair that imports each other has no layer order."""
    imports = {(_package(m), _package(d)) for m, deps in EDGES.items() for d in deps if _package(m) != _package(d)}
    mutual = sorted(f"{a} <-> {b}" for a, b in imports if (b, a) in imports and a < b)
    assert not mutual, mutual


def _private_imports() -> list[str]:
    """``from cemlab.x import _name``: a module reaching into another's private names."""
    found = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cemlab") and not node.level:
                found += [f"{mod}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_modules():
    """What one module needs from another is public (no leading underscore) and documented there."""
    assert not _private_imports(), _private_imports()
