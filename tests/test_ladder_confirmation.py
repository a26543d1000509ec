"""A ladder whose rungs judge their tuned comparisons by the union rule: each rung's trial budget,
primary seeds and bracketing steps from the ladder section (``ladder_section.rung_entries``), the
refusals, and the rung's planned time with the confirmation stage filling its budget (recomputed here
from the plan's own trial seconds and a slot-by-slot packing written here)."""

from __future__ import annotations

import pytest

from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import SweepError
from sweep_support import RECURSION_VARIANTS, local_sweeps

BASE = """\
figure: "test: ladder confirmation"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0, 1]}
""" + RECURSION_VARIANTS + """\
    axes: {T: [1, 2], eta: [1]}
tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 6.4e-2]}
"""
CONF = "confirmation: {budget: {smoke: 30}, alpha: 0.045, primary: t2-beats-t1}\n"
LADDER = """\
ladder:
  scale: smoke
  size: 86m
  rungs: [0.125, 0.5]
  max_steps: {0.5: 3}
  budget: {0.125: 24, 0.5: 20}
  primary_seeds: {0.5: 3}
"""


def _sweep(tmp_path, monkeypatch, text: str, name: str = "ladc"):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, **{name: BASE + text})))
    return load_sweep(name)


def test_each_rung_takes_its_budget_primary_seeds_and_steps_from_the_ladder(tmp_path, monkeypatch):
    spec = _sweep(tmp_path, monkeypatch, CONF + LADDER)
    low, top = spec.rungs()
    tl, tt = spec.expand(low), spec.expand(top)
    assert spec.confirmation_budget(low, tl) == 24 and spec.confirmation_budget(top, tt) == 20
    assert spec.bracket_steps(low, tl) == 1 and spec.bracket_steps(top, tt) == 3   # the base's, the rung's own
    assert spec.primary_seeds(top) == 3 and spec.primary_seeds(low) is None
    assert spec.confirmation_budget("smoke", spec.expand("smoke")) == 30           # the base scale keeps its own
    # no fresh floor: the budget whatever the selection spent
    assert spec.confirmation_budget(top, tt, spent=19) == 20 and spec.fresh_trials(top) is None


def test_a_rungs_fresh_trials_raise_its_budget_only_where_the_selection_spent_past_it(tmp_path, monkeypatch):
    spec = _sweep(tmp_path, monkeypatch, CONF.replace("primary: t2-beats-t1", "primary: t2-beats-t1, fresh: {smoke: 4}")
                  + LADDER + "  fresh: {0.5: 6}\n")
    low, top = spec.rungs()
    tt = spec.expand(top)
    assert spec.fresh_trials(top) == 6 and spec.fresh_trials(low) is None      # the rung's own, never the base's
    assert spec.confirmation_budget(top, tt) == 20                               # the plan's: the budget itself
    assert [spec.confirmation_budget(top, tt, spent=n) for n in (8, 14, 15, 30)] == [20, 20, 21, 36]
    assert spec.confirmation_budget(low, spec.expand(low), spent=30) == 24
    assert spec.confirmation_budget("smoke", spec.expand("smoke"), spent=28) == 32   # the file's own fresh: 4


@pytest.mark.parametrize("ladder,words", [
    (LADDER.replace("  budget: {0.125: 24, 0.5: 20}\n", "  budget: {0.125: 24, 0.5: 20, 3: 9}\n"),
     ["ladder.budget.3", "not a rung"]),
    ("seeding: {max_seeds: {tiny: 3}, batch: 1}\n" + LADDER + "  max_seeds: {0.5: 4}\n",
     ["ladder.budget.0.5", "max_seeds", "not both"]),
    (LADDER.replace("primary_seeds: {0.5: 3}", "primary_seeds: {5: 3}").replace("rungs: [0.125, 0.5]",
                                                                                 "rungs: [0.125, 0.5, 5]"),
     ["ladder.primary_seeds.5", "no confirmation stage", "give it a budget"]),
    (LADDER.replace("primary_seeds: {0.5: 3}", "primary_seeds: {0.5: 1}"), ["primary_seeds", ">= 2"]),
    (LADDER.replace("rungs: [0.125, 0.5]", "rungs: [0.125, 0.5, 5]") + "  fresh: {5: 12}\n",
     ["ladder.fresh.5", "no confirmation stage", "remove its fresh trials"]),
    (LADDER + "  fresh: {0.5: 0}\n", ["fresh", ">= 1"]),
])
def test_a_bad_rung_budget_is_refused_naming_the_key_and_the_fix(tmp_path, monkeypatch, ladder, words):
    with pytest.raises(SweepError) as e:
        _sweep(tmp_path, monkeypatch, CONF + ladder)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("conf,words", [
    ("fresh: {big: 4}", ["confirmation.fresh.big", "unknown scale"]),
    ("fresh: {tiny: 4}", ["confirmation.fresh.tiny", "no confirmation stage", "give it a budget"]),
])
def test_a_bad_fresh_floor_is_refused_naming_the_key_and_the_fix(tmp_path, monkeypatch, conf, words):
    with pytest.raises(SweepError) as e:
        _sweep(tmp_path, monkeypatch, CONF.replace("primary: t2-beats-t1", f"primary: t2-beats-t1, {conf}"))
    for w in words:
        assert w in str(e.value)


def test_a_rung_budget_needs_the_files_confirmation_section(tmp_path, monkeypatch):
    with pytest.raises(SweepError, match=r"ladder.budget: .*confirmation: section, which is missing"):
        _sweep(tmp_path, monkeypatch, LADDER.replace("  primary_seeds: {0.5: 3}\n", ""))


def _packed(seconds: list[float], slots: int) -> float:
    """Wall time of trials started in order, each on the slot that frees first."""
    ends = [0.0] * slots
    for s in seconds:
        ends.sort()
        ends[0] += s
    return max(ends)


def test_a_rungs_time_is_its_selection_then_its_budget_filled_at_the_grids_mean_trial(tmp_path, monkeypatch):
    from cemlab.sweeps.ladder_plan import RUNG_DRIVER_S, plan_ladder, trial_seconds

    spec = _sweep(tmp_path, monkeypatch, CONF + LADDER)
    for r in plan_ladder(spec, read_store=False, corpus=False).rungs:
        grid = [trial_seconds(row.flops or 0.0, r.steps) for row in r.plan.rows]
        mean = sum(grid) / len(grid)
        by_cell = {}
        for row, s in zip(r.plan.rows, grid):
            by_cell.setdefault(str({k: v for k, v in row.trial.axes.items() if k not in ("lr", "seed")}), s)
        step = [s for s in by_cell.values() for _ in range(2)]   # the certain step: one rate, 2 seeds a cell
        fill = [mean] * (r.plan.budget - len(grid) - len(step))
        want = RUNG_DRIVER_S + _packed(grid, r.slots) + _packed(step, r.slots) + _packed(fill, r.slots)
        assert r.min_trials == r.plan.budget and r.seconds() == pytest.approx(want, rel=1e-9)


def test_a_rungs_fresh_trials_extend_its_plan_past_a_budget_its_selection_fills(tmp_path, monkeypatch):
    """A rung whose selection alone reaches its budget still plans its ``fresh`` trials after it, at the
    grid's mean trial; at most, every step and then the fresh trials."""
    from cemlab.sweeps.ladder_plan import RUNG_DRIVER_S, plan_ladder, trial_seconds

    spec = _sweep(tmp_path, monkeypatch, CONF + LADDER.replace("0.5: 20}", "0.5: 9}") + "  fresh: {0.5: 5}\n")
    r = plan_ladder(spec, read_store=False, corpus=False).rungs[1]
    grid = [trial_seconds(row.flops or 0.0, r.steps) for row in r.plan.rows]
    mean = sum(grid) / len(grid)
    least = sum(len(k) for k in r.plan.family_looks())   # the grid and the certain step: past the budget of 9
    assert least == r.plan.min_trials > 9 and r.min_trials == least + 5
    assert r.max_trials == r.plan.max_trials == sum(len(k) for k in r.plan.family_looks(most=True)) + 5
    looks = r.look_seconds()
    assert looks[-1] == pytest.approx([mean] * 5) and sum(len(k) for k in looks) == least + 5
    assert r.seconds() == pytest.approx(RUNG_DRIVER_S + sum(_packed(k, r.slots) for k in looks), rel=1e-12)


def test_the_main_jobs_ladder_carries_and_judges_every_rung_by_the_union_rule(monkeypatch):
    """sweeps/recursion_ablation.yaml: every rung chooses on seeds 0-1 and confirms within its budget,
    the rungs above the first carry their rates up, 3 steps each; the ladder's plan is the rungs'
    budgets filled, within the 3 h 30 min the ladder is held to (docs/ladder.md: 3 h 28 min, fixed
    before rungs 5 and 20 were rerun), the top rung with the paper's claims' cells only."""
    from cemlab.sweeps.ladder_plan import plan_ladder

    monkeypatch.delenv("CEMLAB_SWEEPS_DIR", raising=False)
    spec = load_sweep("recursion_ablation")
    assert spec.ladder.carry is True
    rungs = plan_ladder(spec, read_store=False, corpus=False).rungs
    for r in rungs:
        assert r.plan.looks[0] == [0, 1] and r.plan.budget and spec.primary_seeds(r.scale) == 3
        assert spec.bracket_steps(r.scale) == 3
    assert all(r.min_trials == r.plan.budget for r in rungs)
    assert sum(r.seconds() for r in rungs) <= 3.5 * 3600
    assert [r.plan.fresh for r in rungs] == [36, 36, 36, 24] and [r.cells for r in rungs] == [9, 9, 9, 5]
