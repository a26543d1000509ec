"""The carry stage of a ladder (``ladder.carry``): a rung above the first starts each family from the rates
around the optimum the rungs below found (``cemlab.sweeps.stages.carrying``), read as the bracketing stage
judges (``cemlab.report.looks.carry_look``), and each carried family brackets from its own start
(``cemlab.sweeps.sweepfile.family_policy``). The rungs below are crafted tables (a committed report
folder's ``trials.csv``), the store is empty: nothing trains here."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from cemlab.report.inputs.table import trial_row
from cemlab.sweeps.carry import Found
from cemlab.sweeps.stages import carrying
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.sweeps.sweepfile.tuning_section import family_extra, family_least, family_of
from cemlab.sweeps.tuning_policy import BRACKETED, HIGHEST, STEP, STOPPED, Tried, steps_taken
from sweep_support import RECURSION_VARIANTS, local_sweeps

CARRY = """\
figure: "test: carry"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0, 1]}
""" + RECURSION_VARIANTS + """\
    axes: {T: [1, 2], eta: [1]}
tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 1.6e-2]}
ladder:
  scale: smoke
  size: 86m
  rungs: [0.125, 0.5]
  carry: true
"""
LOW, TOP = "smoke-tpp0.125", "smoke-tpp0.5"


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, carry=CARRY)))
    return load_sweep("carry")


def _variant(t) -> str:
    return "llama" if t.group == "llama" else f"T{t.axes['T']}"


#: The crafted rung below: per variant, its validation perplexity per rate (seeds alike). llama best at
#: 4e-3 inside 2e-3..8e-3 (bracketed: it points at 4e-3); T1 best at its highest rate 4e-3 (points one
#: step beyond, 8e-3); T2 has no run (keeps the grid).
BELOW = {"llama": {0.002: 30.0, 0.004: 20.0, 0.008: 25.0}, "T1": {0.002: 40.0, 0.004: 30.0}}


def _below_table(spec) -> pd.DataFrame:
    rows = []
    for t in spec.expand(LOW, overrides=["lr=[0.002,0.004,0.008]"]):
        ppl = BELOW.get(_variant(t), {}).get(float(t.axes["lr"]))
        if ppl is None:
            continue
        row = trial_row(t, len(rows))
        rows.append({**row, "status": "finished", "value": ppl, "val": ppl, "chance": 320.0, "run_id": "r"})
    return pd.DataFrame(rows)


def _folder(spec, tmp_path):
    """A committed rung folder: ``trials.csv`` without the ``cell`` column (as the report writes it)."""
    d = tmp_path / "committed" / LOW
    d.mkdir(parents=True)
    _below_table(spec).drop(columns=["cell"]).to_csv(d / "trials.csv", index=False)
    return d


def test_the_field_defaults_off_and_the_committed_sweep_does_not_carry(spec):
    assert spec.ladder.carry and spec.ladder.carries(0.5) and not spec.ladder.carries(0.125)
    assert carrying.carries(spec, TOP) and not carrying.carries(spec, LOW) and not carrying.carries(spec, "smoke")
    from cemlab.sweeps.sweepfile.ladder_section import Ladder

    assert Ladder(scale="smoke", size="86m", rungs=[1, 2]).carry is False


def test_what_the_rung_below_found_is_the_bracketing_stages_judgement(spec, tmp_path):
    from cemlab.report.looks.carry_look import folder_trials, rung_found

    found = rung_found(_below_table(spec), [0, 1], 0.125)
    by_variant = {json.loads(f)["variant"]: v for f, v in found.items()}
    assert by_variant == {"llama": Found(0.125, 0.004, ""), "cem-attn T1 eta=1": Found(0.125, 0.004, HIGHEST)}
    # the committed folder's table, its cells rebuilt from the sweep file, is judged alike
    assert rung_found(folder_trials(spec, LOW, _folder(spec, tmp_path), None), [0, 1], 0.125) == found
    # a seed outside the selection seeds does not move the judgement
    t = _below_table(spec)
    extra = t[(t["seed"] == 0)].assign(seed=7, value=1.0, val=1.0)
    assert rung_found(pd.concat([t, extra]), [0, 1], 0.125) == found


def test_a_carried_rung_starts_each_family_at_its_predicted_rates(spec, tmp_path):
    from cemlab.report.looks.carry_look import sweep_found

    grid = spec.expand(TOP)
    below = sweep_found(spec, TOP, grid, None, f"sqlite:///{tmp_path}/none.db", _folder(spec, tmp_path))
    trials, record = carrying.start(spec, TOP, grid, below)
    rates: dict[str, set] = {}
    for t in trials:
        rates.setdefault(_variant(t), set()).add(float(t.axes["lr"]))
    assert rates == {"llama": {0.002, 0.004, 0.008}, "T1": {0.004, 0.008, 0.016}, "T2": {0.002, 0.004}}
    assert {int(t.axes["seed"]) for t in trials} == {0, 1} and len(trials) == 2 * (3 + 3 + 2)
    # ids and config hashes: what the file gives that rate
    for rate in (0.002, 0.004, 0.008, 0.016):
        wide = {(family_of(t), t.axes["seed"]): t for t in spec.expand(TOP, overrides=[f"lr=[{rate:g}]"])}
        for t in trials:
            if float(t.axes["lr"]) == rate:
                same = wide[(family_of(t), t.axes["seed"])]
                assert (t.trial_id, t.config_hash) == (same.trial_id, same.config_hash)
                assert t.config.train.lr == rate
    assert {_variant(t): t.carried for t in trials} == {"llama": 0.004, "T1": 0.008, "T2": None}
    assert [t for t in trials if _variant(t) == "T2"] == [t for t in grid if _variant(t) == "T2"]
    rec = {c["family"]["variant"]: c for c in record}
    assert rec["llama"]["carried"] == 0.004 and rec["llama"]["rates"] == [0.002, 0.004, 0.008]
    assert rec["cem-attn T1 eta=1"]["below"] == [{"tokens": 0.125, "best_lr": 0.004, "edge": HIGHEST}]
    assert rec["cem-attn T2 eta=1"]["carried"] is None and rec["cem-attn T2 eta=1"]["rates"] == [0.002, 0.004]


def test_a_rung_without_its_rung_below_is_refused_naming_the_fix(spec, tmp_path):
    from cemlab.report.looks.carry_look import sweep_found

    uri = f"sqlite:///{tmp_path}/none.db"
    for carry_from in (None, tmp_path / "empty"):
        with pytest.raises(SweepError) as e:
            sweep_found(spec, TOP, spec.expand(TOP), None, uri, carry_from)
        text = str(e.value)
        assert "ladder.carry" in text and "rung 0.125" in text and "--rung 0.125" in text and "--carry-from" in text
    # the ladder's folder (trials.csv with rung_scale, a folder per rung) is read per rung
    ladder = tmp_path / "ladder"
    (ladder / LOW).mkdir(parents=True)
    pd.DataFrame({"rung": [0.125], "rung_scale": [LOW]}).to_csv(ladder / "trials.csv", index=False)
    with pytest.raises(SweepError):
        sweep_found(spec, TOP, spec.expand(TOP), None, uri, ladder)
    _below_table(spec).drop(columns=["cell"]).to_csv(ladder / LOW / "trials.csv", index=False)
    assert len(sweep_found(spec, TOP, spec.expand(TOP), None, uri, ladder)) == 2


def test_an_lr_axis_from_the_command_line_is_refused_at_a_carried_rung(spec):
    with pytest.raises(SweepError, match="lr=\\[...\\]"):
        carrying.start(spec, TOP, spec.expand(TOP, overrides=["lr=[1.0e-3,2.0e-3]"]), {}, ["lr=[1.0e-3,2.0e-3]"])


def _carried(spec):
    below = {}
    for t in spec.expand(TOP):
        v = _variant(t)
        if v == "llama":
            below[family_of(t)] = [Found(0.125, 0.004, "")]
        elif v == "T1":
            below[family_of(t)] = [Found(0.125, 0.004, HIGHEST)]
    return carrying.start(spec, TOP, spec.expand(TOP), below)[0]


def _edges(trials, scores: dict[str, dict[float, float]]) -> pd.DataFrame:
    """A store's trials table for ``trials``: each variant's validation perplexity per rate."""
    rows = []
    for t in trials:
        ppl = scores[_variant(t)][float(t.axes["lr"])]
        rows.append({**trial_row(t, len(rows)), "status": "finished", "value": ppl, "val": ppl, "chance": 320.0,
                     "run_id": "r"})
    return pd.DataFrame(rows)


def test_a_right_guess_is_bracketed_without_a_step_and_a_wrong_one_steps_from_its_own_start(spec, monkeypatch):
    from cemlab.report.looks import interim_look_store

    trials = _carried(spec)
    scores = {"llama": {0.002: 30.0, 0.004: 25.0, 0.008: 20.0},   # wrong: best at the highest of its start
              "T1": {0.004: 40.0, 0.008: 30.0, 0.016: 35.0},      # right: best in the middle of its start
              "T2": {0.002: 40.0, 0.004: 30.0}}                    # the grid, best at its highest
    table = _edges(trials, scores)
    monkeypatch.setattr(interim_look_store, "sweep_context", lambda inv, ov: SimpleNamespace(trials=lambda: table))
    look, todo = interim_look_store.sweep_bracket(SimpleNamespace(spec=spec, scale=TOP), trials, None, 0)
    cells = {json.loads(c["cell"])["variant"]: c for c in look["cells"]}
    assert cells["cem-attn T1 eta=1"]["state"] == BRACKETED and cells["cem-attn T1 eta=1"]["added_lr"] is None
    # llama's start 2e-3..8e-3 is its own grid: no step spent yet, so it steps beyond 8e-3 (the scale's
    # grid policy would count 8e-3 as its one step, spent, and stop)
    assert cells["llama"]["state"] == STEP and cells["llama"]["added_lr"] == 0.016
    assert cells["cem-attn T2 eta=1"]["state"] == STEP and cells["cem-attn T2 eta=1"]["added_lr"] == 0.008
    assert {(_variant(t), float(t.axes["lr"]), int(t.axes["seed"])) for t in todo} == {
        ("llama", 0.016, 0), ("llama", 0.016, 1), ("T2", 0.008, 0), ("T2", 0.008, 1)}
    step = next(t for t in todo if _variant(t) == "llama")
    same = next(t for t in spec.expand(TOP, overrides=["lr=[0.016]"]) if family_of(t) == family_of(step)
                and t.axes["seed"] == step.axes["seed"])
    assert (step.trial_id, step.config_hash) == (same.trial_id, same.config_hash)

    # the policies themselves: the carried family's from its start, the grid's from the lr axis
    policies = spec.family_policies(TOP, trials)
    llama = next(f for f in policies if dict(f)["group"] == "llama")
    p = policies[llama]
    assert p.grid == (0.002, 0.004, 0.008) and steps_taken(p.grid, [0.002, 0.004, 0.008]) == 0
    nxt = p.judge(Tried((0.002, 0.004, 0.008), (3.0, 2.0, 1.0), 0))
    assert nxt.state == STEP and nxt.rates == (0.016,)
    grid_policy = spec.tuning_policy(TOP, spec.expand(TOP))
    assert grid_policy.judge(Tried((0.002, 0.004, 0.008), (3.0, 2.0, 1.0),
                                   steps_taken(grid_policy.grid, [0.002, 0.004, 0.008]))).state == STOPPED


def test_plan_counts_of_a_carried_rung_are_each_familys_own(spec):
    from cemlab.sweeps.plan import bracket_plan

    trials = _carried(spec)
    fam = {_variant(t): family_of(t) for t in trials}
    least, extra = family_least(spec, TOP, trials), family_extra(spec, TOP, trials)
    # three start rates: no step is certain; one step beyond an end inside the bounds at most
    assert least[fam["llama"]] == 0 and extra[fam["llama"]] == 1     # 1e-3 below (1.6e-2 above)
    assert least[fam["T1"]] == 0 and extra[fam["T1"]] == 1           # 2e-3 below; 1.6e-2 is the bound above
    assert least[fam["T2"]] == 1 and extra[fam["T2"]] == 1           # the grid's family: as at any scale
    plan = bracket_plan(spec, TOP, trials)
    assert plan["ratio"] == pytest.approx(2.0)
    assert plan["rates"] == [0.001, 0.002, 0.004, 0.008, 0.016]
    assert {c["cell"]: sorted(c["lr"]) for c in plan["cells"]}["86m llama"] == [0.002, 0.004, 0.008]
    # the grid's plan is unchanged by the carry machinery
    grid = spec.expand(TOP)
    assert set(family_least(spec, TOP, grid).values()) == {1} and set(family_extra(spec, TOP, grid).values()) == {1}
    assert spec.tuning_rates(TOP, grid) == [0.001, 0.002, 0.004, 0.008]
    assert not math.isnan(spec.rate_ratio(TOP, trials))


def test_the_report_of_a_carried_rung_reads_the_runs_at_every_lattice_rate_and_no_grid_rate_without_one(spec):
    from cemlab.report.inputs.seeded import full_grid, seeded_grid

    grid = spec.expand(TOP)
    assert sorted({float(t.axes["lr"]) for t in full_grid(spec, TOP, grid)}) == [0.0005, 0.001, 0.002, 0.004,
                                                                                 0.008, 0.016]
    trials = _carried(spec)
    ran = {t.config_hash for t in trials}

    class Store:
        def prefetch(self, hashes):
            list(hashes)

        def runs_for_hash(self, h):
            return ["run"] if h in ran else []

    grids = SimpleNamespace(trials=lambda sweep, scale: grid, spec=lambda sweep: spec, overrides=[])
    read = seeded_grid(grids, "carry", TOP, Store())
    assert sorted(t.config_hash for t in read) == sorted(ran)   # T1's start at 1.6e-2 too; no grid row without a run
    # the first rung (not carried) reads as any tuned scale: its grid, and the reachable rates with a run
    low = spec.expand(LOW)
    grids = SimpleNamespace(trials=lambda sweep, scale: low, spec=lambda sweep: spec, overrides=[])
    assert seeded_grid(grids, "carry", LOW, Store()) == low


def test_the_ladder_plan_says_it_counts_a_carried_rung_at_the_lr_axis(spec, runs_dir):
    from rich.console import Console

    from cemlab.sweeps.cli.plan import _print_ladder
    from cemlab.sweeps.ladder_plan import plan_ladder

    lp = plan_ladder(spec, corpus=False, read_store=False)
    assert lp.carry and lp.as_dict()["carry"] is True
    console = Console(record=True, width=200)
    _print_ladder(lp, console)
    assert "Carried rates (ladder.carry)" in console.export_text()
    lp.carry = False
    console = Console(record=True, width=200)
    _print_ladder(lp, console)
    assert "ladder.carry" not in console.export_text() and "carry" not in lp.as_dict()


@pytest.mark.parametrize("rule,guess", [(None, 4e-3), ("nearest", 4e-3), ("trend", 1e-3)])
def test_a_rung_starts_from_the_prediction_of_its_own_carry_rule(tmp_path, monkeypatch, rule, guess):
    """Two rungs below found 1.6e-2 (at 0.125) and 4e-3 (at 0.5): the top rung (2) starts at the nearest
    rung's optimum, 4e-3, by default or ``nearest``, at the power law's 1e-3 (two octaves down per
    quadrupling) by ``trend``; its record and each trial carry that guess."""
    text = CARRY.replace("rungs: [0.125, 0.5]", "rungs: [0.125, 0.5, 2]")
    text += f"  carry_rule: {{2: {rule}}}\n" if rule else ""
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, carry3=text)))
    spec = load_sweep("carry3")
    top = spec.ladder.rung_name(2.0)
    grid = spec.expand(top)
    below = {family_of(t): [Found(0.125, 1.6e-2, ""), Found(0.5, 4e-3, "")] for t in grid}
    trials, record = carrying.start(spec, top, grid, below)
    assert {t.carried for t in trials} == {guess} and {c["carried"] for c in record} == {guess}
    assert {float(t.axes["lr"]) for t in trials} == {guess / 2, guess, guess * 2}


def test_a_carry_rule_names_a_rung_and_a_known_rule(tmp_path, monkeypatch):
    for extra, words in (("  carry_rule: {3: trend}\n", ["ladder.carry_rule.3", "not a rung"]),
                         ("  carry_rule: {0.5: power}\n", ["carry_rule", "nearest", "trend"])):
        monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, bad=CARRY + extra)))
        with pytest.raises(SweepError) as e:
            load_sweep("bad")
        assert all(w in str(e.value) for w in words), str(e.value)
