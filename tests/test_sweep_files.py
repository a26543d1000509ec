"""Every sweep file of the project plans at every scale, and ``cemlab plan`` lists them all.

The trial count of each plan is checked against the grid computed here from the YAML itself
(top-level axes times each variant's own axes, with the file's per-scale overrides), not through
``cemlab.sweeps.sweepfile.load``. Running every file end to end is in ``test_sweep_run_all.py``.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from sweep_support import REPO_SWEEPS, SCALES, SWEEP_FILES, expected_grid

def test_the_project_has_sweeps_and_scales():
    assert len(SWEEP_FILES) >= 10 and {"smoke", "tiny", "paper"} <= set(SCALES)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_every_sweep_plans_at_every_scale(path, scale, capsys, monkeypatch, tmp_path):
    from cemlab.cli import main

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    code = main(["plan", path.stem, "--scale", scale, "--json", "--no-store"])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    plan = json.loads(out.out)
    rows, runs = expected_grid(path, scale)
    assert plan["sweep"] == path.stem and plan["scale"] == scale and plan["store"] is None
    assert len(plan["trials"]) == rows
    assert sum(t["samples"] for t in plan["trials"]) == runs
    assert len({t["trial_id"] for t in plan["trials"]}) == rows          # ids unique
    assert len({t["config_hash"] for t in plan["trials"]}) == rows       # no two identical configs
    for t in plan["trials"]:
        assert t["status"] == "todo" and t["params"] > 0 and t["tokens"] > 0 and t["steps"] > 0
        assert t["flops"] > 0


def test_plan_lists_every_sweep_and_marks_a_broken_one(capsys, monkeypatch, tmp_path):
    """One file that fails validation does not hide the others: each is listed, the broken one
    with its error, and the exit code says something is wrong."""
    from cemlab.cli import main

    d = tmp_path / "sweeps"
    shutil.copytree(REPO_SWEEPS, d)
    # Sorts first, so a listing that stops at the first error lists nothing else.
    (d / "aaa_broken.yaml").write_text("figure: Fig 9\ntask: lm\naxes: {size: [86m], lr: [-1.0]}\n"
                                       "variants: [{group: llama, label: llama}]\n")
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(d))
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    code = main(["plan", "--scale", "smoke"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0
    for path in SWEEP_FILES:
        rows, _ = expected_grid(path, "smoke")
        line = next((ln for ln in out.out.splitlines() if f" {path.stem} " in ln), None)
        assert line is not None, f"{path.stem} not listed:\n{out.out}"
        assert str(rows) in line.split(), line
    assert "aaa_broken" in out.out
    assert "learning rates must be > 0" in " ".join(text.split())   # the broken file's own error


def test_a_claim_whose_rule_is_missing_fails_naming_claim_and_rule():
    from cemlab import paper
    from cemlab.report.claims.catalog import bind

    entry = dict(paper.CLAIM_ENTRIES[0], id="new-claim", function="rule_new_claim")
    assert [c.id for c in bind([paper.CLAIM_ENTRIES[0]])] == [paper.CLAIMS[0]]
    for e in (entry, dict(entry, function="np")):   # "np" is in the rules module, but not a rule
        with pytest.raises(LookupError, match=f"claim 'new-claim' .*rule '{e['function']}'.*cemlab.report.claims.rules"):
            bind([paper.CLAIM_ENTRIES[0], e])


def test_sweep_files_name_the_reports_figures_and_claims_without_loading_it():
    """The ids a sweep file's ``figures:``/``claims:`` are checked against (``cemlab.paper``) are
    the report's figure builders and claims, in page order; each claim is bound to the rule its
    entry names, and every rule is some claim's; loading every sweep file imports neither the
    report nor matplotlib; every claim is listed by some sweep, a claim's own sweep first
    (mlp-loses-more compares the MLP sweep with the attention sweep)."""
    import subprocess
    import sys

    from cemlab import paper
    from cemlab.report.inputs.grids import SweepGrids
    from cemlab.report.claims.catalog import CLAIMS, RULE_MODULES
    from cemlab.report.figures.catalog import PAPER_FIGURES

    assert [(f.__module__, f.__name__) for f in PAPER_FIGURES.values()] == \
        [("cemlab.report.figures.paper_figures", fid) for fid in paper.FIGURES]
    assert [c.id for c in CLAIMS] == list(paper.CLAIMS) and len(set(paper.CLAIMS)) == len(CLAIMS) > 0
    def rule(name):   # the one module of RULE_MODULES that defines it
        (fn,) = [getattr(m, name) for m in RULE_MODULES if callable(getattr(m, name, None))]
        return fn

    assert [c.evaluate for c in CLAIMS] == [rule(e["function"]) for e in paper.CLAIM_ENTRIES]
    assert {e["function"] for e in paper.CLAIM_ENTRIES} == \
        {n for m in RULE_MODULES for n, f in vars(m).items() if n.startswith("rule_") and f.__module__ == m.__name__}
    code = ("import sys; from cemlab.sweeps.sweepfile.files import list_sweeps; from cemlab.sweeps.sweepfile.load import load_sweep; "
            "specs = [load_sweep(n) for n in list_sweeps()]; "
            "print(sum(len(s.figures) + len(s.claims) for s in specs), "
            "sorted(m for m in sys.modules if m.startswith(('matplotlib', 'cemlab.report'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "CEMLAB_SWEEPS_DIR": str(REPO_SWEEPS)}).stdout.split(" ", 1)
    listed = sum(len(d.get("figures") or []) + len(d.get("claims") or [])
                 for d in (yaml.safe_load(p.read_text()) for p in SWEEP_FILES))
    assert int(out[0]) == listed > 0 and out[1].strip() == "[]", out
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
        sweeps_of = SweepGrids().claim_sweeps()
    assert set(sweeps_of) == set(paper.CLAIMS)
    assert sweeps_of["mlp-loses-more"] == ["mlp_replacement", "attention_replacement"]
    # the sweeps a claim reads are its entry's, in the order the files list it (its own sweep first)
    assert sweeps_of == {c.id: list(c.sweeps) for c in CLAIMS}


def test_entries_and_sweep_files_name_each_other():
    """A figure's or a claim's entry (cemlab/paper.py) names the sweeps that feed it; each project
    sweep file's ``figures:`` and ``claims:`` lists exactly the entries that name it, and every
    sweep an entry names has a file. (The one list kept in two places: this test keeps them in step.)"""
    from cemlab.sweeps import feeds
    files = {p.stem: yaml.safe_load(p.read_text()) for p in SWEEP_FILES}
    for key, registry in (("figures", feeds.FIGURES), ("claims", feeds.CLAIMS)):
        for name, d in files.items():
            assert sorted(d.get(key) or []) == sorted(feeds.sweeps_listing(registry, name)), (name, key)
        for fid, entry in registry.items():
            assert entry["sweeps"] and set(entry["sweeps"]) <= set(files), (fid, entry["sweeps"])
