"""A two-rung smoke ladder with ``ladder.carry`` end to end: real Ray (local), the MLflow server the sweep
starts. The second rung is refused while the store has no runs of the first (naming the fix), then the
ladder runs cheapest first, and the second rung's families start at the rates around what the first
found (``cemlab.sweeps.stages.carrying``), recomputed here from the store with the same judge, and their
runs are ordinary trials of the file at those rates.

A test-only sweep: Llama and CEM attention T=1, one seed, lr 2e-3 and 4e-3, one bracketing step per end
within [5e-4, 1.6e-2], rungs of 0.125 and 0.5 tokens per parameter at the smoke scale.
"""

from __future__ import annotations

import json

import pytest

from cemlab.tracking import schema
from sweep_support import experiment_runs, local_sweeps

pytestmark = pytest.mark.slow

CARRY = """\
figure: "test: carry"
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0]}
variants:
  - {group: llama, label: llama}
  - group: cem-attn
    label: "cem-attn T{T}"
    set: {model.attention: cem, model.kq_diagonal: shared, model.attn_steps: "{T}", model.attn_precond: dplr}
    axes: {T: [1]}
tuning: {max_steps: {smoke: 1}, bounds: [5.0e-4, 1.6e-2]}
ladder:
  scale: smoke
  size: 86m
  rungs: [0.125, 0.5]
  set: {train.val_interval: 16}
  carry: true
"""


@pytest.fixture
def carry_env(runs_dir, tmp_path, monkeypatch, ray_local):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, carry=CARRY)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield runs_dir
    stop_server()


def test_the_second_rung_starts_at_the_rates_carried_from_the_first(carry_env, data_cache, capsys):
    from mlflow.tracking import MlflowClient

    from cemlab.cli import main
    from cemlab.report.looks.carry_look import sweep_found
    from cemlab.sweeps.carry import carried
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.sweeps.sweepfile.tuning_section import family_of
    from cemlab.tracking.store import tracking_uri

    common = ["--plain", "--no-report", "--cache-dir", str(data_cache)]
    assert main(["sweep", "carry", "--rung", "0.5", *common]) == 2   # the rung below has no runs yet
    err = capsys.readouterr().err
    assert "ladder.carry" in err and "--rung 0.125" in err and "--carry-from" in err

    assert main(["sweep", "carry", "--ladder", *common]) == 0
    spec, top = load_sweep("carry"), "smoke-tpp0.5"
    grid = spec.expand(top)
    uri = tracking_uri()
    below = sweep_found(spec, top, grid, None, uri)   # what the first rung found, read again from the store
    assert len(below) == 2
    policy = spec.tuning_policy(top, grid)
    expected = {}
    for fam, found in below.items():
        guess = carried(found, 0.5, policy.grid, 2.0, (5e-4, 1.6e-2))
        expected[fam] = (guess, policy.start(guess))

    summary = json.loads((carry_env / "logs" / f"carry-{top}" / "summary.json").read_text())
    recorded = {tuple(sorted((k, str(v)) for k, v in c["family"].items())): c for c in summary["carried"]}
    client = MlflowClient(uri)
    runs = [r for r in experiment_runs(client, "carry") if r.data.tags.get(schema.RUNG) == "0.5"]
    parent = next(r for r in runs if r.data.tags.get(schema.ROLE) == "sweep")
    assert json.loads(parent.data.tags["cemlab.carried"]) == summary["carried"]
    trial_runs = [r for r in runs if r.data.tags.get(schema.ROLE) == "trial"]
    from cemlab.report.looks.carry_look import store_trials

    read = store_trials(spec, top, uri, None)   # the report of the carried rung reads every run it made
    assert sorted(read["run_id"]) == sorted(r.info.run_id for r in trial_runs)
    added: dict[tuple, set] = {}   # the rates the bracketing steps added, per family
    for step in summary["brackets"]:
        for c in step["cells"]:
            if c["added_lr"] is not None:
                cell = {k: str(v) for k, v in json.loads(c["cell"]).items() if k != "sweep"}
                added.setdefault(tuple(sorted(cell.items())), set()).add(float(c["added_lr"]))
    for fam, (guess, start) in expected.items():
        rec = recorded[fam]
        assert (rec["carried"] is None if guess != guess else rec["carried"] == pytest.approx(guess))
        assert rec["rates"] == pytest.approx(list(start))
        mine = {}
        for r in trial_runs:
            axes = {k[len(schema.axis_tag("")):]: v for k, v in r.data.tags.items() if k.startswith(schema.axis_tag(""))}
            trial = next((t for t in spec.expand(top, overrides=[f"lr=[{float(axes['lr']):g}]"])
                          if t.trial_id == r.data.tags[schema.TRIAL_ID]), None)
            if trial is not None and family_of(trial) == fam:
                mine[float(axes["lr"])] = (trial.config_hash, r.data.tags[schema.CONFIG_HASH])
        assert set(start) <= set(mine), (start, sorted(mine))   # its start rates ran
        assert all(a == b for a, b in mine.values())              # each an ordinary trial of the file
        # nothing else ran: no grid rate outside its start, only the steps its bracketing added
        assert set(mine) == set(start) | added.get(fam, set())
