"""A sweep with bracketing looks end to end at smoke scale: real Ray (local), the MLflow server the
sweep starts.

A test-only sweep trains Llama at two learning rates (2e-3, 4e-3) on one seed; its file allows one
bracketing step per end within [5e-4, 1.6e-2]. Two rates always leave the best at an edge, so the
bracketing look gives the cell the rate beyond it: 1e-3 where 2e-3 is better, 8e-3 where 4e-3 is.
Checked against what MLflow holds (each rate's logged validation metric read back independently of
the report): the rate added is the one beyond the better rate; it is an ordinary child run whose
config hash is that of a sweep file listing the rate; the step is in summary.json and on the parent
run; the report's cells.csv lists the three rates with the bracketing the runs show; a rerun makes
the same decision from the store and trains nothing.
"""

from __future__ import annotations

import csv
import json
import math

import pytest

from cemlab.tracking import schema
from sweep_support import client_for, experiment_runs, local_sweeps, run

pytestmark = pytest.mark.slow

BRACKETED = """\
figure: "test: bracketing"
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0]}
variants:
  - {group: llama, label: llama}
tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 1.6e-2]}
"""


@pytest.fixture
def sweep_env(runs_dir, tmp_path, monkeypatch, ray_local):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, bracketed=BRACKETED,
                                                              listed=BRACKETED.replace("[2.0e-3, 4.0e-3]",
                                                                                       "[1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3]"))))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield runs_dir
    stop_server()


def _trial_runs(client) -> dict[str, object]:
    return {r.data.tags[schema.TRIAL_ID]: r for r in experiment_runs(client, "bracketed")
            if r.data.tags.get(schema.ROLE) == "trial"}


def test_the_rate_beyond_the_better_edge_is_added_as_an_ordinary_trial(sweep_env, data_cache):
    from cemlab.sweeps.sweepfile.load import load_sweep

    first = run("bracketed", data_cache)
    assert first.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in first.outcomes]
    client = client_for(first)
    runs = _trial_runs(client)
    val = {float(r.data.params["train.lr"]): r.data.metrics[schema.VAL_PPL] for r in runs.values()}
    grid = {lr: v for lr, v in val.items() if lr in (2e-3, 4e-3)}
    assert len(grid) == 2, val
    better = min(grid, key=grid.get)
    beyond = 1e-3 if better == 2e-3 else 8e-3
    assert sorted(val) == sorted([2e-3, 4e-3, beyond]), val   # the rate beyond the better edge, nothing else

    summary = json.loads((sweep_env / "logs" / "bracketed-smoke" / "summary.json").read_text())
    (step,) = summary["brackets"][:1]
    (cell,) = step["cells"]
    assert step["step"] == 0 and cell["added_lr"] == pytest.approx(beyond) and step["added"] == 1
    assert cell["edge"] == ("lowest" if better == 2e-3 else "highest")
    parent = client.get_run(first.parent_run_id)
    assert json.loads(parent.data.tags["cemlab.brackets"])[0]["cells"][0]["added_lr"] == pytest.approx(beyond)

    # the added trial: an ordinary child run, hashed as a file that lists the rate hashes it
    listed = {round(t.config.train.lr, 9): t.config_hash for t in load_sweep("listed").expand("smoke")}
    added = next(r for r in runs.values() if math.isclose(float(r.data.params["train.lr"]), beyond))
    assert added.data.tags[schema.PARENT_RUN_ID] == first.parent_run_id
    assert added.data.tags[schema.CONFIG_HASH] == listed[round(beyond, 9)]

    # the report: three rates; bracketed exactly where the added rate is worse than the better one
    with open(first.report.parent / "cells.csv") as fh:
        cells = list(csv.DictReader(fh))
    assert sorted(float(c["lr"]) for c in cells) == sorted(val)
    inside = val[beyond] > val[better]
    assert {c["bracketed"] for c in cells} == {str(inside)}

    # a rerun: the same step from the store, nothing trained again
    second = run("bracketed", data_cache, report=False)
    assert second.exit_code == 0
    assert {o.status for o in second.outcomes} <= {"done", "reused"}, [(o.trial.trial_id, o.status) for o in second.outcomes]
    assert set(_trial_runs(client)) == set(runs)


SWAPPED = BRACKETED.replace("bounds: [5.0e-4, 1.6e-2]}", "bounds: [5.0e-4, 1.6e-2], policy: both-ends}")


def test_a_second_tuning_policy_drives_the_sweep_and_the_plan_alike(runs_dir, tmp_path, monkeypatch, ray_local,
                                                                     data_cache):
    """A second policy swapped in by name (``tuning.policy``, registered as a plugin would): at an edge
    it adds the rate beyond each end of the grid at once. ``cemlab plan``'s least and most trials come
    from the policy (``Policy.least`` / ``Policy.most``) and equal the trials the sweep then runs; the
    default policy's plan for the same grid says 3, this one 4."""
    from dataclasses import dataclass

    from cemlab.models.registry import plugins_scope
    from cemlab.sweeps.plan import plan_sweep
    from cemlab.sweeps.tuning_policy import POLICIES, STEP, Bracketing, Next, Tried, edge_of
    from cemlab.tracking.server import stop_server

    @dataclass(frozen=True)
    class BothEnds(Bracketing):
        def judge(self, tried: Tried) -> Next:
            best, edge = edge_of(tried.rates, tried.scores)
            if edge not in ("lowest", "highest") or tried.steps:
                return Next("bracketed" if edge == "" else "stopped", best=best, edge=edge, reason="one step")
            both = tuple(r for e in ("lowest", "highest") for r in self.beyond(tried.rates, e)[:1])
            return Next(STEP, both, best=best, edge=edge)

        def least(self, grid):
            return sum(1 for e in ("lowest", "highest") if self.beyond(grid, e))

        def most(self, grid):
            return self.least(grid)

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, bracketed=BRACKETED, swapped=SWAPPED)))
    with plugins_scope():
        POLICIES.register("both-ends", BothEnds)
        try:
            result = run("swapped", data_cache, report=False)
            assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
            runs = _trial_runs_of(client_for(result), "swapped")
        finally:
            stop_server()
        default, swapped = (plan_sweep(n, "smoke", read_store=False) for n in ("bracketed", "swapped"))
    assert (default.min_trials, default.max_trials) == (3, 3)
    assert (swapped.min_trials, swapped.max_trials) == (4, 4) and swapped.bracketing()["policy"] == "both-ends"
    lrs = sorted(float(r.data.params["train.lr"]) for r in runs.values())
    assert len(runs) == swapped.max_trials and lrs == pytest.approx([1e-3, 2e-3, 4e-3, 8e-3])


def _trial_runs_of(client, sweep: str) -> dict[str, object]:
    return {r.data.tags[schema.TRIAL_ID]: r for r in experiment_runs(client, sweep)
            if r.data.tags.get(schema.ROLE) == "trial"}
