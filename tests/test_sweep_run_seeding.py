"""A seeded sweep end to end at smoke scale: real Ray (local), the MLflow server the sweep starts.

A test-only ``recursion_ablation`` (the sweep ``t2-beats-t1`` reads) runs one seed of Llama and
CEM attention at T=1 and T=2 (eta=1), and plans three looks (``seeding: max_seeds 3, batch 1``).
One seed never decides, so look 0 opens the two CEM cells the claim compares, and only they get
seed 1; look 1 decides on two seeds or opens them again for seed 2. Checked: each look's added
trials are exactly its open cells with the next seed (Llama, which the claim does not read,
never gets one), they are ordinary child runs of the parent, the looks are in summary.json and on
the parent run, the report lists the added trials and judges at alpha/3; a rerun makes the same
decisions from the store and trains nothing.
"""

from __future__ import annotations

import csv
import json

import pytest

from cemlab.tracking import schema
from sweep_support import RECURSION_VARIANTS, REPO_SWEEPS, client_for, experiment_runs, local_sweeps, run

pytestmark = pytest.mark.slow

SEEDED = """\
figure: "test: seeding"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3], seed: [0]}
""" + RECURSION_VARIANTS + """\
    axes: {T: [1, 2], eta: [1]}
seeding: {max_seeds: {smoke: 3}, batch: 1}
"""


@pytest.fixture
def sweep_env(runs_dir, tmp_path, monkeypatch, ray_local):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, recursion_ablation=SEEDED)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield runs_dir
    stop_server()


def _trial_runs(client) -> dict[str, str]:
    return {r.data.tags[schema.TRIAL_ID]: r.info.run_id for r in experiment_runs(client, "recursion_ablation")
            if r.data.tags.get(schema.ROLE) == "trial"}


def test_seeds_are_added_only_to_open_cells_and_a_rerun_decides_the_same_from_the_store(sweep_env, data_cache):
    first = run("recursion_ablation", data_cache)
    assert first.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in first.outcomes]
    summary = json.loads((sweep_env / "logs" / "recursion_ablation-smoke" / "summary.json").read_text())
    looks = summary["looks"]
    assert looks == first.looks and [lk["seeds"] for lk in looks][:2] == [[0], [0, 1]]
    assert all(lk["alpha"] == pytest.approx(0.05 / 3) for lk in looks)

    # look 0: one seed decides nothing; the claim's two cells are open, Llama's is not read
    variants = lambda lk: sorted(json.loads(c)["variant"] for c in lk["open_cells"])   # noqa: E731
    assert variants(looks[0]) == ["cem-attn T1 eta=1", "cem-attn T2 eta=1"]
    assert looks[0]["open_claims"] == ["t2-beats-t1 [same per-step eta=1]"] and looks[0]["added"] == 2

    client = client_for(first)
    runs = _trial_runs(client)
    # every look's added trials are its open cells with the next seed, nothing else
    expected = {"86m__llama__lr2e-3__s0", "86m__cem-attn_T1_eta-1__lr2e-3__s0", "86m__cem-attn_T2_eta-1__lr2e-3__s0"}
    for j, lk in enumerate(looks[:-1]):
        for name in variants(lk):
            expected.add(f"86m__{name.replace(' ', '_').replace('=', '-')}__lr2e-3__s{j + 1}")
        assert lk["added"] == len(lk["open_cells"])
    if len(looks) == 2:    # look 1 decided: nothing open, or it is the last look
        assert not looks[1]["open_cells"] or looks[1]["seeds"] == [0, 1, 2]
    assert set(runs) == expected, sorted(runs)
    assert not any("llama" in t and not t.endswith("s0") for t in runs)
    parent = client.get_run(first.parent_run_id)
    assert json.loads(parent.data.tags["cemlab.looks"]) == looks
    for run_id in runs.values():   # ordinary trials: children of the sweep's parent, finished
        r = client.get_run(run_id)
        assert r.data.tags[schema.PARENT_RUN_ID] == first.parent_run_id and r.data.tags[schema.STATUS] == "finished"

    # the report reads the added seeds (and lists no seed that was not added) and judges at alpha/3
    out = first.report.parent
    with open(out / "trials.csv") as fh:
        listed = {row["trial_id"]: row["status"] for row in csv.DictReader(fh)}
    assert listed == {t: "finished" for t in runs}
    with open(out / "comparisons.csv") as fh:
        levels = [float(row["level"]) for row in csv.DictReader(fh)]
    assert levels and levels == pytest.approx([1 - 0.05 / 3] * len(levels))
    assert "alpha 0.05/3" in (out / "index.md").read_text()

    # a rerun: the same looks from the store, no trial trained again
    second = run("recursion_ablation", data_cache, report=False)
    assert second.exit_code == 0
    assert second.looks == looks
    assert {o.status for o in second.outcomes} <= {"done", "reused"}, [(o.trial.trial_id, o.status) for o in second.outcomes]
    assert _trial_runs(client) == runs
