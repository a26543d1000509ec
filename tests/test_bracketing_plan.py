"""Learning rates added beyond a cell's best edge (bracketing), on the sweep's side: the ``tuning``
key of a sweep file, the rates a scale can reach, the trials a step adds (the file's own, hashed
alike), what ``cemlab plan`` counts and prints, and the stage that makes the steps in order.

The judging of a step is the report's (``cemlab.report.looks.interim_look_store.sweep_bracket``);
here a stand-in judge drives the stage.
"""

from __future__ import annotations

import json
import logging
import shutil
from types import SimpleNamespace

import pytest

from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import SweepError, Tuning, lr_ratio, round_lr
from cemlab.sweeps.tuning_policy import Bracketing
from cemlab.sweeps.sweepfile.tuning_section import family_extra, family_of

from sweep_support import AS_MEASURED, REPO_SWEEPS, assert_refused, write_sweep

HEAD = """\
figure: "Fig X"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0, 1, 2]}
variants:
  - {group: cem-attn, label: "cem-attn T{T}", set: {model.attention: cem, model.attn_steps: "{T}"}, axes: {T: [1, 2]}}
"""


@pytest.fixture
def repo_sweeps(monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))




# ---------------------------------------------------------------------------------------------
# The key: every mistake named with its field and its fix, when the file is read
# ---------------------------------------------------------------------------------------------

TUNING = "tuning: {max_steps: {tiny: 1}, bounds: [5.0e-4, 1.6e-2]}\n"
BAD = {
    "negative_steps": (HEAD + "tuning: {max_steps: {tiny: -1}, bounds: [5.0e-4, 1.6e-2]}\n",
                       ["tuning.max_steps", ">= 0", "max_steps: {tiny: 1}"]),
    "empty_steps": (HEAD + "tuning: {max_steps: {}, bounds: [5.0e-4, 1.6e-2]}\n", ["tuning.max_steps", "remove"]),
    "reversed_bounds": (HEAD + "tuning: {max_steps: {tiny: 1}, bounds: [1.6e-2, 5.0e-4]}\n",
                        ["tuning.bounds", "0 < low < high", "[5.0e-4, 1.6e-2]"]),
    "no_bounds": (HEAD + "tuning: {max_steps: {tiny: 1}}\n", ["tuning.bounds", "required key is missing"]),
    "unknown_key": (HEAD + "tuning: {max_step: {tiny: 1}, bounds: [5.0e-4, 1.6e-2]}\n", ["tuning", "max_step"]),
    "unknown_scale": (HEAD + "tuning: {max_steps: {tiyn: 1}, bounds: [5.0e-4, 1.6e-2]}\n",
                      ["tuning.max_steps.tiyn", "unknown scale", "tiny"]),
    "uneven": (HEAD.replace("lr: [2.0e-3, 4.0e-3]", "lr: [1.0e-3, 2.0e-3, 8.0e-3]") + TUNING,
               ["tuning.max_steps.tiny", "axes.lr", "not evenly spaced on the log scale", "set tuning.max_steps.tiny: 0"]),
    "one_rate": (HEAD.replace("lr: [2.0e-3, 4.0e-3]", "lr: [2.0e-3]") + TUNING,
                 ["tuning.max_steps.tiny", "axes.lr", "1 rate(s)", "2 or more rates"]),
    "scale_axis": (HEAD + "scales: {tiny: {lr: [2.0e-3, 3.0e-3, 8.0e-3]}}\n" + TUNING,
                   ["tuning.max_steps.tiny", "scales.tiny.lr", "not evenly spaced"]),
    "outside_bounds": (HEAD + "tuning: {max_steps: {tiny: 1}, bounds: [3.0e-3, 1.6e-2]}\n",
                       ["tuning.max_steps.tiny", "[0.002]", "outside tuning.bounds", "widen the bounds"]),
    "optuna": ("figure: x\naxes: {size: [86m]}\nvariants: [{group: llama, label: llama}]\n"
               "search: optuna\noptuna: {lr: [1.0e-3, 4.0e-3], samples: 2}\n" + TUNING,
               ["tuning", "search: optuna", "remove tuning"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_tuning_key_fails_naming_the_field_and_the_fix(sweep_dir, case):
    assert_refused(sweep_dir, case, *BAD[case])


def test_an_lr_axis_is_checked_only_where_the_scale_brackets(sweep_dir):
    """smoke is not named (nor like a named scale): one rate there is fine; tiny-prose is like tiny."""
    spec = load_sweep(write_sweep(sweep_dir, "ok", HEAD + "scales: {smoke: {lr: [2.0e-3]}}\n" + TUNING))
    assert spec.bracket_steps("smoke") == 0 and spec.bracket_steps("tiny") == 1
    assert spec.bracket_steps("tiny-prose") == 1                           # like: tiny
    assert spec.tuning_rates("smoke", spec.expand("smoke")) == [0.002]     # no bracketing: the grid's rates
    assert load_sweep(write_sweep(sweep_dir, "plain", HEAD)).bracket_steps("tiny") == 0


# ---------------------------------------------------------------------------------------------
# The rates a scale can reach
# ---------------------------------------------------------------------------------------------


def test_rates_are_rounded_to_three_digits_and_spacing_is_checked():
    assert round_lr(2e-3 / 2) == 0.001 and round_lr(4e-3 * 2) == 0.008 and round_lr(1e-3) == 1e-3
    assert lr_ratio([2e-3, 4e-3]) == pytest.approx(2.0) and lr_ratio([1e-3, 2e-3, 4e-3]) == pytest.approx(2.0)
    assert lr_ratio([2e-3]) is None and lr_ratio([1e-3, 2e-3, 8e-3]) is None
    t = Tuning(max_steps={"tiny": 2}, bounds=(5e-4, 1.6e-2))
    assert Bracketing((2e-3, 4e-3), 2.0, t.bounds, 2).reachable() == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016]   # bounds inclusive
    assert Bracketing((2e-3, 4e-3), 2.0, t.bounds, 3).reachable() == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016]   # none beyond them
    assert t.steps("tiny") == 2 and t.steps("smoke") == 0 and t.steps("tiny-prose", "tiny") == 2


def test_the_main_jobs_rates_at_tiny(repo_sweeps):
    spec = load_sweep("recursion_ablation")
    grid = spec.expand("tiny")
    assert spec.bracket_steps("tiny") == 1 and spec.rate_ratio("tiny", grid) == pytest.approx(2.0)
    assert spec.tuning_rates("tiny", grid) == [0.001, 0.002, 0.004, 0.008]
    assert spec.next_rate("tiny", grid, [0.002, 0.004], "lowest") == 0.001
    assert spec.next_rate("tiny", grid, [0.002, 0.004], "highest") == 0.008
    assert spec.next_rate("tiny", grid, [0.001, 0.002, 0.004], "lowest") is None      # max_steps spent
    assert spec.next_rate("tiny", grid, [0.002, 0.004, 0.008], "highest") is None
    with pytest.raises(ValueError, match="lowest, highest"):
        spec.next_rate("tiny", grid, [0.002, 0.004], "low")
    # the ladder's rungs take their own steps (ladder.max_steps), the workstation scale its one
    assert all(spec.bracket_steps(rung) == 3 for rung in spec.rungs()) and spec.bracket_steps("workstation") == 1
    assert spec.bracket_steps("smoke") == 0 and spec.tuning_rates("smoke", spec.expand("smoke")) == [0.002]
    # tiny has a confirmation stage: steps are shared by compared cells, so a family may get the rate
    # beyond either end (its own step, or a compared cell's), 2 at most; the workstation rungs step alone
    assert set(family_extra(spec, "tiny", grid).values()) == {2} and len(family_extra(spec, "tiny", grid)) == 9
    ws = spec.expand("workstation")
    assert set(family_extra(spec, "workstation", ws).values()) == {1}


def test_a_command_line_lr_axis_that_cannot_be_bracketed_brackets_nothing_and_says_so(repo_sweeps, capsys):
    """One rate, uneven rates or rates outside the bounds from the command line: no step (as a seed
    axis from the command line adds no seeds), the plan says why; an even axis is bracketed."""
    from cemlab.cli import main
    from cemlab.sweeps.plan import plan_sweep

    spec = load_sweep("recursion_ablation")
    for lrs, why in (("[2.0e-3]", "fewer than 2 or not evenly spaced"), ("[1.0e-3,2.0e-3,8.0e-3]", "not evenly"),
                     ("[6.4e-2,1.28e-1]", "not all inside tuning.bounds [0.0005, 0.064]")):
        grid = spec.expand("tiny", overrides=[f"lr={lrs}"])
        assert spec.bracket_steps("tiny") == 1 and spec.bracket_steps("tiny", grid) == 0
        assert spec.tuning_rates("tiny", grid) == sorted({t.axes["lr"] for t in grid})
        assert spec.next_rate("tiny", grid, [max(t.axes["lr"] for t in grid)], "highest") is None
        plan = plan_sweep(spec, "tiny", read_store=False, overrides=[f"lr={lrs}"])
        assert plan.bracketing() == {} and why in plan.bracketing_note
    with pytest.raises(SweepError, match="not evenly spaced"):
        spec.rate_ratio("tiny", spec.expand("tiny", overrides=["lr=[1.0e-3,2.0e-3,8.0e-3]"]))
    assert main(["plan", "recursion_ablation", "--no-store", "lr=[2.0e-3]"]) == 0
    assert "Bracketing: the grid's rates [0.002] are fewer than 2" in " ".join(capsys.readouterr().out.split())
    even = spec.expand("tiny", overrides=["lr=[1.0e-3,2.0e-3]"])
    assert spec.tuning_rates("tiny", even) == [0.0005, 0.001, 0.002, 0.004]


def test_a_rate_added_by_override_is_the_trial_of_a_file_listing_it(sweep_dir):
    """What a step adds (the grid expanded with ``lr=[RATE]``, filtered to the family and the grid's
    seeds) has the id and config hash the trial has in a file that lists the rate."""
    two = load_sweep(write_sweep(sweep_dir, "two", HEAD + TUNING))
    three = load_sweep(write_sweep(sweep_dir, "three", HEAD.replace("lr: [2.0e-3, 4.0e-3]", "lr: [1.0e-3, 2.0e-3, 4.0e-3]")))
    grid = two.expand("tiny")
    rate = two.next_rate("tiny", grid, [0.002, 0.004], "lowest")
    family = family_of(grid[0])
    added = [t for t in two.expand("tiny", overrides=[f"lr=[{rate!r}]"]) if family_of(t) == family]
    assert rate == 0.001 and len(added) == 3 and {t.axes["seed"] for t in added} == {0, 1, 2}
    listed = {t.trial_id: t.config_hash for t in three.expand("tiny")}
    assert {t.trial_id: t.config_hash for t in added}.items() <= listed.items()
    assert all(t.trial_id.startswith("86m__cem-attn_T1__lr1e-3__s") for t in added)
    assert not any(t.seeds_given for t in added)


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def test_the_main_jobs_plan_counts_the_shared_step_then_the_confirmation_budget(repo_sweeps, capsys):
    from cemlab.cli import main
    from cemlab.sweeps.cli.plan import _plan_json
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep("recursion_ablation", "tiny", read_store=False)
    b = plan.bracketing()
    # selection: 9 cells x 2 rates x seeds 0-1; the shared step may give a cell a rate beyond each end
    assert len(plan.rows) == 36 and plan.max_trials == 165 == plan.confirmation()["budget"]
    # the better of two rates is an end: every cell's own first step is certain, so 36 + 18 at least
    # (all that `cemlab sweep --no-seeding` runs); the confirmation stage fills the budget, never past it
    assert b["min_trials"] == 36 + 18 == plan.min_trials and b["max_trials"] == 165
    assert b["rates"] == [0.001, 0.002, 0.004, 0.008] and b["shared"]
    assert b["steps"] == [{"step": 0, "cells": 18, "max_trials": 36}] and b["seeds"] == 2
    assert len(b["cells"]) == 9 and all(c["extra"] == 2 and c["least"] == 1 and c["lr"] == [0.002, 0.004]
                                        for c in b["cells"])
    assert plan.seeding() == {} and plan.confirmation()["alpha"] == 0.045
    assert plan.confirmation()["selection_seeds"] == [0, 1]
    j = _plan_json(plan)
    assert j["bracketing"] == json.loads(json.dumps(b)) and (j["min_trials"], j["max_trials"]) == (54, 165)
    assert main(["plan", "recursion_ablation", "--scale", "tiny", "--no-store"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = ("Bracketing: up to 1 step per end (lr x2 or /2 within [0.0005, 0.064]), before the later stages, for the "
            "cells whose best rate is an end of theirs, each rate also to every cell compared with it: step 0 adds up "
            "to 36 trials (18 cell rates x 2 seeds); 54 trials at least, 165 at most")
    assert line in out and out.index("Bracketing:") < out.index("Confirmation:")
    assert "a budget of 165 trials" in out and "one-sided 0.0225" in out
    assert "at scale tiny: 36 trials (54-165 trials with the added rates and seeds)" in out
    # a scale that brackets nothing: the plan as before
    smoke = plan_sweep("recursion_ablation", "smoke", read_store=False)
    assert smoke.bracketing() == {} and smoke.max_trials == smoke.min_trials == len(smoke.rows)


def test_a_family_extends_one_end_and_the_bounds_cap_the_steps(sweep_dir):
    """max_steps 3 within [1e-3, 1.6e-2] from [2e-3, 4e-3]: one rate below (1e-3), two above (8e-3,
    1.6e-2): each family may add 2 at most (its worse side), in two steps; with command-line seeds
    the step adds those seeds."""
    from cemlab.sweeps.plan import plan_sweep

    path = write_sweep(sweep_dir, "capped", HEAD + "tuning: {max_steps: {tiny: 3}, bounds: [1.0e-3, 1.6e-2]}\n")
    plan = plan_sweep(path.as_posix(), "tiny", read_store=False)
    b = plan.bracketing()
    assert b["rates"] == [0.001, 0.002, 0.004, 0.008, 0.016]
    assert [s["max_trials"] for s in b["steps"]] == [6, 6] and plan.max_trials == 12 + 2 * 2 * 3
    # two rates, a rate beyond each end: the first step is certain (the best of two is an end)
    assert [c["least"] for c in b["cells"]] == [1, 1] and plan.min_trials == 12 + 2 * 3
    one = plan_sweep(path.as_posix(), "tiny", read_store=False, overrides=["seed=[0]"])
    assert one.max_trials == 4 + 2 * 2 * 1 and [s["max_trials"] for s in one.bracketing()["steps"]] == [2, 2]
    # no step is certain where the best may have no rate beyond it (an end at the bound) or be interior
    low = plan_sweep(write_sweep(sweep_dir, "low", HEAD + "tuning: {max_steps: {tiny: 3}, bounds: [2.0e-3, 1.6e-2]}\n")
                     .as_posix(), "tiny", read_store=False)
    assert [c["least"] for c in low.bracketing()["cells"]] == [0, 0] and low.min_trials == 12 < low.max_trials
    three = plan_sweep(path.as_posix(), "tiny", read_store=False, overrides=["lr=[2.0e-3,4.0e-3,8.0e-3]"])
    assert [c["least"] for c in three.bracketing()["cells"]] == [0, 0] and three.min_trials == len(three.rows) == 18


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


class _Client:
    def __init__(self):
        self.tags = {}

    def set_tag(self, run_id, key, value):
        self.tags[(run_id, key)] = value


def _inv(spec, scale="tiny"):
    return SimpleNamespace(spec=spec, scale=scale, client=_Client(), parent_run_id="p", brackets=[])


@pytest.fixture
def ran(monkeypatch):
    """The trials each ``run_grid`` call was handed (``decide_grid`` passes its trials through)."""
    from cemlab.sweeps.stages import bracketing

    calls: list[list[str]] = []
    monkeypatch.setattr(bracketing.trial_actions, "decide_grid", lambda inv, todo: list(todo))
    monkeypatch.setattr(bracketing.execute, "run_grid", lambda inv, decided: calls.append([t.trial_id for t in decided]))
    return calls


def test_add_rates_makes_the_steps_in_order_and_stops_when_nothing_is_added(sweep_dir, ran):
    from cemlab.sweeps.stages.bracketing import BRACKETS_TAG, add_rates

    spec = load_sweep(write_sweep(sweep_dir, "three_steps", HEAD + "tuning: {max_steps: {tiny: 3}, bounds: [1.0e-4, 1.6e-2]}\n"))
    grid = spec.expand("tiny")
    asked = []

    def judge(inv, trials, overrides, step):
        asked.append((step, overrides))
        rate = spec.next_rate("tiny", trials, [0.002 / 2 ** step, 0.004], "lowest")
        todo = [t for t in spec.expand("tiny", overrides=[*(overrides or []), f"lr=[{rate!r}]"])
                if family_of(t) == family_of(trials[0])] if step == 0 else []
        return {"step": step, "lr": rate, "families": [list(family_of(trials[0]))] if todo else []}, todo

    inv = _inv(spec)
    add_rates(inv, grid, ["train.val_interval=10"], judge)
    assert asked == [(0, ["train.val_interval=10"]), (1, ["train.val_interval=10"])]   # step 2 never judged
    assert [b["step"] for b in inv.brackets] == [0, 1] and [b["lr"] for b in inv.brackets] == [0.001, 0.0005]
    assert ran == [[f"86m__cem-attn_T1__lr1e-3__s{s}" for s in (0, 1, 2)]]
    assert json.loads(inv.client.tags[("p", BRACKETS_TAG)]) == json.loads(json.dumps(inv.brackets))


def test_add_rates_stops_at_a_step_with_nothing_to_judge_and_at_max_steps(sweep_dir, ran):
    from cemlab.sweeps.stages.bracketing import add_rates

    spec = load_sweep(write_sweep(sweep_dir, "two_steps", HEAD + "tuning: {max_steps: {tiny: 2}, bounds: [1.0e-4, 1.6e-2]}\n"))
    grid = spec.expand("tiny")
    steps = []

    def nothing(inv, trials, overrides, step):
        steps.append(step)
        return None, []

    inv = _inv(spec)
    add_rates(inv, grid, None, nothing)
    assert steps == [0] and inv.brackets == [] and ran == [] and inv.client.tags == {}

    def always(inv, trials, overrides, step):
        steps.append(step)
        return {"step": step}, grid[:1]

    steps.clear()
    add_rates(inv, grid, None, always)
    assert steps == [0, 1] and len(ran) == 2       # max_steps: 2


def test_add_rates_does_nothing_without_steps_and_warns_without_a_judge(sweep_dir, ran, caplog):
    from cemlab.sweeps.stages.bracketing import add_rates

    def judge(*args):
        raise AssertionError(f"a step was judged: {args[3]}")

    plain = load_sweep(write_sweep(sweep_dir, "plain", HEAD))
    add_rates(_inv(plain), plain.expand("tiny"), None, judge)            # no tuning
    tuned = load_sweep(write_sweep(sweep_dir, "tuned", HEAD + TUNING))
    add_rates(_inv(tuned, "smoke"), tuned.expand("smoke"), None, judge)  # no steps at smoke
    with caplog.at_level(logging.WARNING, logger="cemlab.sweeps"):
        add_rates(_inv(tuned), tuned.expand("tiny"), None, None)
        add_rates(_inv(tuned), tuned.expand("tiny", overrides=["lr=[2.0e-3]"]), ["lr=[2.0e-3]"], judge)
    assert "no judge was handed in (cemlab sweep --no-bracketing)" in caplog.text and ran == []
    assert "declares tuning at tiny, but the grid's rates [0.002] are fewer than 2" in caplog.text


def test_no_bracketing_hands_the_runner_no_judge_and_its_resume_command_keeps_the_flag(monkeypatch, repo_sweeps):
    import cemlab.sweeps.runner as runner
    from cemlab.cli import main

    got = []

    def fake_run_sweep(*args, **kwargs):
        got.append(kwargs)
        raise KeyboardInterrupt   # stop before anything runs

    monkeypatch.setattr(runner, "run_sweep", fake_run_sweep)
    assert main(["sweep", "recursion_ablation", "--no-bracketing", "--no-report"]) == 130
    assert main(["sweep", "recursion_ablation", "--no-report"]) == 130
    assert got[0]["bracketer"] is None and callable(got[1]["bracketer"]) and callable(got[0]["looker"])
    assert "--no-bracketing" in got[0]["command"].split() and "--no-bracketing" not in got[1]["command"].split()


def test_the_runner_brackets_after_the_grid_and_before_the_seed_looks(monkeypatch, repo_sweeps):
    """``_run_trials``: grid -> bracketing steps -> seed looks -> confirmation, each handed its judge and
    the overrides (the guards and the live table stood in for: nothing runs)."""
    import contextlib

    import cemlab.sweeps.runner as runner

    order = []

    class Watch(contextlib.nullcontext):
        lost = None

        def __init__(self, uri):
            super().__init__()

    monkeypatch.setattr(runner, "StoreWatch", Watch)
    monkeypatch.setattr(runner, "SigtermAsInterrupt", contextlib.nullcontext)
    monkeypatch.setattr(runner.pg, "ProgressDisplay", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(runner.trial_actions, "decide_grid", lambda inv, trials: trials)
    monkeypatch.setattr(runner.execute, "run_grid", lambda inv, decided: order.append(("grid", len(decided))))
    monkeypatch.setattr(runner.bracketing, "add_rates",
                        lambda inv, trials, overrides, judge: order.append(("brackets", overrides, judge)))
    monkeypatch.setattr(runner.seeding, "add_seeds",
                        lambda inv, trials, overrides, judge: order.append(("seeds", overrides, judge)))
    monkeypatch.setattr(runner.confirmation, "add_seeds",
                        lambda inv, trials, overrides, judge: order.append(("confirmation", overrides, judge)))
    spec = load_sweep("recursion_ablation")
    inv = SimpleNamespace(spec=spec, uri="sqlite:///x.db", progress=None, overrides=["train.val_interval=10"])
    bracketer, looker, confirmer = object(), object(), object()
    assert runner._run_trials(inv, spec.expand("tiny"), None, False, 30.0, looker, bracketer,
                              confirmer) == (False, None)
    assert order == [("grid", 36), ("brackets", ["train.val_interval=10"], bracketer),
                     ("seeds", ["train.val_interval=10"], looker),
                     ("confirmation", ["train.val_interval=10"], confirmer)]


def test_each_ladder_rung_names_its_bracketing_step_then_its_seed_looks(repo_sweeps, tmp_path, monkeypatch):
    """`cemlab plan recursion_ablation --ladder` prints one line per rung with its looks in the order
    they run: a rung's plan is its scale's (plan_sweep), bracketing as the ladder's base scale does."""
    from cemlab.sweeps.cli.plan import _rung_looks
    from cemlab.sweeps.plan import plan_sweep

    top = plan_sweep("recursion_ablation", "workstation-tpp20", read_store=False)
    # 5 cells x 2 rates x seeds 0-1; 3 steps shared by compared cells, up to the bound 6.4e-2: each cell
    # may add 1e-3 and 5e-4 below, 8e-3, 1.6e-2 and 3.2e-2 above (5 rates x 2 seeds); its budget 64,
    # raised by as much as the steps spend beyond it to keep 24 fresh trials
    assert len(top.rows) == 20 and top.budget == 64 and top.fresh == 24
    assert top.max_trials == 20 + 5 * 5 * 2 + 24
    assert _rung_looks(top) == ("bracketing (lr x2 or /2 within [0.0005, 0.064]: step 0 up to 20 trials, step 1 up "
                                "to 20 trials, step 2 up to 10 trials): 30-94 trials")
    cheap = _rung_looks(plan_sweep("recursion_ablation", "workstation-tpp0.3125", read_store=False))
    assert "seed looks" not in cheap and cheap.endswith(": 54-162 trials")
    # a rung that adds seeds (the ladder as it ran until 2026-11-29, 3 seeds a cell) names its bracketing
    # step before its seed looks, as they run
    text = AS_MEASURED.read_text().replace(
        "  exclude: {20:", "  max_seeds: {0.3125: 8}\n  exclude: {20:") + "seeding: {max_seeds: {workstation: 3}, batch: 3}\n"
    shutil.copy(REPO_SWEEPS / "scales.yaml", tmp_path / "scales.yaml")
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(write_sweep(tmp_path, "recursion_ablation", text).parent))
    seeded = _rung_looks(plan_sweep("recursion_ablation", "workstation-tpp0.3125", read_store=False))
    assert seeded.index("bracketing") < seeded.index("seed looks (look 0: 3 seeds; look 1: 6 seeds; look 2: 8 seeds)")
    assert seeded.endswith("81-216 trials")
