"""A two-rung smoke ladder end to end, as ``cemlab sweep recursion_ablation --ladder`` runs it: real
Ray (local), the MLflow server the sweep starts, each rung a sweep of its own with its report, then
the across-the-ladder report; ``--rung X`` reruns one rung from the store; ``cemlab report --ladder``
rebuilds the same files.

A test-only ``recursion_ablation`` (the sweep the recursion claims read): Llama and CEM attention at
T=1 and T=2 (eta=1), 2 seeds, one learning rate, rungs of 0.125 and 0.5 tokens per parameter at the
smoke scale (16 and 65 optimizer steps).
"""

from __future__ import annotations

import csv

import pytest

from cemlab.tracking import schema
from sweep_support import RECURSION_VARIANTS, client_for, experiment_runs, local_sweeps

pytestmark = pytest.mark.slow

LADDER = """\
figure: "test: ladder"
claims: [t2-beats-t1, cem-attn-t2-beats-llama]
axes: {size: [86m], lr: [2.0e-3], seed: [0, 1]}
""" + RECURSION_VARIANTS + """\
    axes: {T: [1, 2], eta: [1]}
ladder:
  scale: smoke
  size: 86m
  rungs: [0.125, 0.5]
  set: {train.val_interval: 16}
"""


@pytest.fixture
def ladder_env(runs_dir, tmp_path, monkeypatch, ray_local):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, recursion_ablation=LADDER)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield tmp_path / "reports" / "ladder" / "recursion_ablation"
    stop_server()


def _rows(path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_a_smoke_ladder_runs_every_rung_and_reports_across_them(ladder_env, data_cache, capsys, tmp_path):
    from cemlab.cli import main
    from cemlab.tracking.store import tracking_uri

    assert main(["sweep", "recursion_ablation", "--ladder", "--plain", "--cache-dir", str(data_cache)]) == 0
    out = capsys.readouterr().out
    assert out.index("rung 0.125") < out.index("rung 0.5") and "Ladder report:" in out  # cheapest first

    trials = _rows(ladder_env / "trials.csv")
    assert sorted({(r["rung"], r["rung_scale"]) for r in trials}) == [("0.125", "smoke-tpp0.125"), ("0.5", "smoke-tpp0.5")]
    assert len(trials) == 2 * 3 * 2 and {r["status"] for r in trials} == {"finished"}
    assert len({r["config_hash"] for r in trials}) == len(trials)  # every rung's trials are trials of their own
    assert all(float(r["test_ppl"]) > 1 and float(r["val_ppl"]) > 1 for r in trials)

    ladder = _rows(ladder_env / "ladder.csv")
    comparisons = {(r["claim"], r["condition"], r["comparison"]) for r in ladder}
    assert comparisons and {r["rung"] for r in ladder} == {"0.125", "0.5"}
    for key in comparisons:  # every comparison at every rung, one ladder verdict
        mine = [r for r in ladder if (r["claim"], r["condition"], r["comparison"]) == key]
        assert sorted(r["rung"] for r in mine) == ["0.125", "0.5"] and len({r["ladder_verdict"] for r in mine}) == 1
        assert mine[0]["ladder"] in ("holds at every rung", "flips", "changes with training", "open")
        assert int(mine[0]["slope_seeds"]) == 2
    verdicts = _rows(ladder_env / "verdicts.csv")
    assert len(verdicts) == len(comparisons) and {"rung 0.125", "rung 0.5"} <= set(verdicts[0])
    acc = _rows(ladder_env / "accuracy.csv")
    pairs = next(r for r in acc if r["what"].startswith("pairs of cells at tuned rates"))
    assert pairs["rung"] == "0.125" and pairs["top"] == "0.5" and int(pairs["compared"]) == 3  # 3 cells, 3 pairs
    for name in ("index.md", "index.html", "claims.csv", "forest.png", "trend.png"):
        assert (ladder_env / name).is_file(), name
    for scale in ("smoke-tpp0.125", "smoke-tpp0.5"):  # each rung's own report beside the ladder page
        assert (ladder_env / scale / "index.html").is_file() and (ladder_env / scale / "comparisons.csv").is_file()
    page = (ladder_env / "index.md").read_text()
    assert "Ladder verdicts" in page and "How well a cheaper rung predicts the top one" in page

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri())
    runs = experiment_runs(client, "recursion_ablation")
    parents = [r for r in runs if r.data.tags.get(schema.ROLE) == "sweep"]
    assert sorted(r.data.tags[schema.RUNG] for r in parents) == ["0.125", "0.5"]
    by_id = {r.info.run_id: r for r in runs}
    for t in trials:
        run = by_id[t["run_id"]]
        assert run.data.tags[schema.RUNG] == t["rung"] and run.data.tags[schema.CONFIG_HASH] == t["config_hash"]
        parent = by_id[run.data.tags[schema.PARENT_RUN_ID]]
        assert parent.data.tags[schema.RUNG] == t["rung"]

    # one rung again: everything is in the store, nothing trains; the ladder page is rebuilt the same
    before = (ladder_env / "ladder.csv").read_bytes()
    assert main(["sweep", "recursion_ablation", "--rung", "0.5", "--plain", "--cache-dir", str(data_cache)]) == 0
    trained = lambda: sorted(r.info.run_id for r in experiment_runs(client, "recursion_ablation")   # noqa: E731
                             if r.data.tags.get(schema.ROLE) == "trial")
    assert trained() == sorted(t["run_id"] for t in trials)  # no trial trained again (the new parent links them)
    assert (ladder_env / "ladder.csv").read_bytes() == before
    assert main(["report", "recursion_ablation", "--ladder", "--no-log"]) == 0
    assert (ladder_env / "ladder.csv").read_bytes() == before

    # a store without the ladder's runs (another machine): the rungs' committed reports stand in
    empty = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert main(["report", "recursion_ablation", "--ladder", "--no-log", "--tracking-uri", empty]) == 0
    assert (ladder_env / "ladder.csv").read_bytes() == before
    assert (ladder_env / "index.md").read_text().count("as committed (no runs in this store)") == 2
