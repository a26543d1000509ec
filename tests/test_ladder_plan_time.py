"""How ``cemlab plan --ladder`` times a rung (``cemlab.sweeps.ladder_plan``): a look's trials packed
onto the slots, against cases counted by hand; the plan's constants recomputed from the measured
stage table ``docs/ladder-stages.csv`` (one idle run of each rung, read from its ``stages.jsonl``
by ``scripts/measure-timings.py --read ... --csv``); and each rung's plan against its measured wall
time there, the 10% the ladder's time budget allows."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from cemlab import timing
from cemlab.sweeps import ladder_plan
from cemlab.sweeps.ladder_plan import makespan, plan_ladder
from sweep_support import AS_MEASURED

STAGES = Path(__file__).resolve().parents[1] / "docs" / "ladder-stages.csv"
#: A trial's stages besides training (the table's per-trial rows), and the driver's.
OUTSIDE_TRAINING = ["around the trial", *(s for s in timing.TRIAL_STAGES if s != "training"),
                    "other in the trial process"]
DRIVER = [*timing.DRIVER_STAGES, "driver, other"]


def test_a_looks_trials_take_the_first_slot_that_frees():
    assert makespan([3, 1, 1, 1], 2) == 3      # 3 | 1 1 1
    assert makespan([1, 1, 1, 3], 2) == 4      # 1 1 | 1 3: the long one last waits for nothing but ends late
    assert makespan([2] * 5, 2) == 6           # an odd look's last trial runs alone
    assert makespan([2] * 5, 1) == 10
    assert makespan([2] * 4, 3) == 4
    assert makespan([], 2) == 0


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Each row of the stage table with its rung's plan (the sweep file the runs ran, with the project's
    scales; nothing read from a store)."""
    from cemlab.sweeps.sweepfile.load import load_sweep
    from sweep_support import local_sweeps

    d = local_sweeps(tmp_path_factory.mktemp("as-measured"), recursion_ablation=AS_MEASURED.read_text())
    lp = plan_ladder(load_sweep(d / "recursion_ablation.yaml"), read_store=False, corpus=False)
    rungs = {f"{lp.sweep}-{r.scale}": r for r in lp.rungs}
    rows = list(csv.DictReader(STAGES.open()))
    assert {row["label"] for row in rows} == set(rungs), "one measured run per rung"
    return [(row, rungs[row["label"]]) for row in rows]


def test_each_measured_run_is_its_rung_as_planned(measured):
    for row, rung in measured:
        assert int(row["trials"]) == rung.min_trials == rung.max_trials
        assert int(row["slots"]) == rung.slots
        assert sum(len(look) for look in rung.look_seconds()) == rung.min_trials


def test_the_time_besides_training_is_the_stage_tables_line(measured):
    """``TRIAL_FIXED_S`` and ``STEP_OVERHEAD_S``: the least-squares line of each run's seconds per trial
    outside training against the rung's optimizer steps; ``RUNG_DRIVER_S``: the driver's seconds,
    within the runs' range."""
    steps = [rung.steps for _, rung in measured]
    per_trial = [sum(float(row[s]) for s in OUTSIDE_TRAINING) / int(row["trials"]) for row, _ in measured]
    slope, intercept = np.polyfit(steps, per_trial, 1)
    assert ladder_plan.TRIAL_FIXED_S == pytest.approx(intercept, abs=0.05)
    assert ladder_plan.STEP_OVERHEAD_S == pytest.approx(slope, abs=0.00005)
    driver = [sum(float(row[s]) for s in DRIVER) for row, _ in measured]
    assert min(driver) - 2 <= ladder_plan.RUNG_DRIVER_S <= max(driver)


def test_the_training_rate_is_the_runs_pooled_rate(measured):
    """``CPU_FLOPS_PER_S``: the rungs' training FLOPs over their training slot-seconds, to two digits."""
    flops = sum(rung.min_flops for _, rung in measured)
    seconds = sum(float(row["training"]) for row, _ in measured)
    assert ladder_plan.CPU_FLOPS_PER_S == pytest.approx(flops / seconds, rel=0.025)


def test_each_rung_as_measured_is_within_ten_percent_of_its_plan(measured):
    for row, rung in measured:
        assert float(row["wall"]) == pytest.approx(rung.seconds(), rel=0.10), row["label"]


def test_a_rung_with_seed_looks_times_every_look_it_may_run(tmp_path, monkeypatch):
    """The least case runs the grid and the certain bracketing step; the most, every step and then each
    seed look's new seeds at every rate, one look after another: as many trials as the plan counts."""
    import shutil

    from sweep_support import REPO_SWEEPS

    text = AS_MEASURED.read_text().replace(
        "  exclude: {20:", "  max_seeds: {0.3125: 8}\n  exclude: {20:") + "seeding: {max_seeds: {workstation: 3}}\n"
    (tmp_path / "recursion_ablation.yaml").write_text(text)
    shutil.copy(REPO_SWEEPS / "scales.yaml", tmp_path / "scales.yaml")
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(tmp_path))
    rung = plan_ladder("recursion_ablation", rung="0.3125", read_store=False, corpus=False).rungs[0]
    # 9 cells x 2 rates x 3 seeds; the step: 9 x 3; look 1: seeds 3-5 at 3 rates; look 2: seeds 6-7
    assert [len(look) for look in rung.look_seconds()] == [54, 27]
    assert [len(look) for look in rung.look_seconds(most=True)] == [54, 27, 81, 54]
    assert (rung.min_trials, rung.max_trials) == (81, 216)
    least, most = rung.seconds(), rung.seconds(most=True)
    assert least == pytest.approx(ladder_plan.RUNG_DRIVER_S + sum(makespan(look, 2) for look in rung.look_seconds()))
    assert most > 2.5 * (least - ladder_plan.RUNG_DRIVER_S)
