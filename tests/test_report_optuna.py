"""Reports of ``search: optuna`` sweeps and of runs that did not finish (stopped by ASHA,
interrupted, failed), from crafted runs in a real MLflow sqlite store.

An Optuna sweep's grid (``expand``) has one trial per cell at the centre of the learning-rate range,
while its runs sample learning rates inside each cell and carry the tag ``cemlab.search_cell``. The
report must take every sampled rate of a cell as a point of its learning-rate curve (the Akima
optimum is checked against ``akima_optimum`` on the values written), list a run ASHA stopped
early without comparing it, and call a cell missing only when it has no run at all.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_support as rs  # noqa: E402

from cemlab.report.stats.akima import akima_optimum  # noqa: E402
from cemlab.tracking import schema  # noqa: E402

OPTUNA_LR_SWEEP = """\
figure: "Fig 3a"
figures: [fig3a]
claims: [full-cem-matches-llama, full-cem-higher-lr]
axes: {size: [s1, s2], seed: [0]}
variants:
  - {group: llama, label: llama}
  - group: cem
    label: cem T2 dplr
    set: {model.attention: cem, model.mlp: cem, model.attn_steps: 2, model.mlp_steps: 2,
          model.attn_precond: dplr, model.mlp_precond: dplr}
search: optuna
optuna:
  lr: [5.0e-4, 8.0e-3]
  samples: 6
"""
# The same figure as a grid sweep (lr_search beside lr_sweep in the project): its Akima optima are
# what the searched ones are compared with.
GRID_SWEEP = """\
figure: "Fig 3a"
figures: [fig3a]
axes: {size: [s1], lr: [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3], seed: [0]}
variants:
  - {group: llama, label: llama}
  - group: cem
    label: cem T2 dplr
    set: {model.attention: cem, model.mlp: cem, model.attn_steps: 2, model.mlp_steps: 2,
          model.attn_precond: dplr, model.mlp_precond: dplr}
"""
GRID_LRS = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)
CENTRE = 2e-3  # round_lr(sqrt(5e-4 * 8e-3))
TRUE_OPT = {"llama": (30.0, 1.5e-3), "cem": (29.6, 3.5e-3)}
# s1: the learning rates Optuna "sampled", with the outcome of each run
S1 = {
    "llama": {lr: "finished" for lr in (6.5e-4, 1.1e-3, 2e-3, 3.3e-3, 5.2e-3, 7.4e-3)},
    "cem": {1e-3: "finished", 2e-3: "finished", 4e-3: "finished", 6e-3: "finished",
            6e-4: "stopped", 7e-3: "stopped", 2.5e-3: "interrupted"},
}
STOPPED_VAL_PPL = 50.0
FAILED_LR = 9e-4      # s2's llama cell has only this run, which failed
ERROR = "RuntimeError: CUDA out of memory (simulated)"


def curve(group: str, lr: float) -> float:
    """Test perplexity with a known minimum in log10(lr), asymmetric."""
    base, opt = TRUE_OPT[group]
    d = math.log10(lr) - math.log10(opt)
    return base + 8 * d**2 + 2 * d**3


@pytest.fixture(scope="module")
def template_db(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mlflow-template") / "template.db"


@pytest.fixture(scope="module")
def optuna_report(tmp_path_factory, template_db):
    """The Optuna lr sweep with crafted samples, plus runs that must not be matched: one of
    another sweep with the same cell id, one of an older config of the cell (another hash)."""
    from cemlab.report.pages.build import SweepGrids, build, count_runs
    from cemlab.tracking.runs import RunStore
    from cemlab.sweeps.sweepfile.expand import trial_with_lr
    from cemlab.sweeps.sweepfile.load import load_sweep

    root = tmp_path_factory.mktemp("optuna-report")
    sweeps = root / "sweeps"
    sweeps.mkdir()
    (sweeps / "scales.yaml").write_text(rs.SCALES_YAML)
    (sweeps / "lr_sweep.yaml").write_text(OPTUNA_LR_SWEEP)
    (sweeps / "lr_grid.yaml").write_text(GRID_SWEEP)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_SWEEPS_DIR", str(sweeps))
        mp.setenv("CEMLAB_RUNS_DIR", str(root / "runs"))
        uri = rs.migrated_store(template_db, root / "mlflow.db")
        w = rs.RunWriter(uri, root / "artifacts")
        parent = w.parent("lr_sweep")
        cells = {(c.size, c.group): c for c in load_sweep("lr_sweep").expand("smoke")}
        assert len(cells) == 4 and {c.axes["lr"] for c in cells.values()} == {CENTRE}
        ids = {}
        for group, samples in S1.items():
            cell = cells[("s1", group)]
            for lr, status in samples.items():
                t = trial_with_lr(cell, lr)
                metrics = rs.lm_metrics(curve(group, lr)) if status == "finished" else {}
                tags, hist = {}, {}
                if status == "stopped":
                    hist = {schema.TRAIN_LOSS: [(s, 5.0 - 0.1 * s) for s in range(1, 5)]}
                    metrics = {schema.VAL_PPL: STOPPED_VAL_PPL, schema.VAL_LOSS: math.log(STOPPED_VAL_PPL)}
                    if lr == 7e-3:  # even a test metric on a stopped run is no final result
                        metrics[schema.TEST_PPL] = 10.0
                    tags = {schema.STOPPED_STEP: "4"}
                ids[(group, lr)] = w.trial(t, status=status, metrics=metrics, histories=hist, parent_id=parent,
                                           tags=tags)
        failed = trial_with_lr(cells[("s2", "llama")], FAILED_LR)
        ids[("s2 llama", FAILED_LR)] = w.trial(failed, status="failed", parent_id=parent, tags={schema.ERROR: ERROR})

        # Not this sweep's: the same cell id in another sweep, and a stale config of the cell.
        s1_llama = cells[("s1", "llama")]
        other = trial_with_lr(s1_llama, 1.5e-3)
        w.trial(other, metrics=rs.lm_metrics(5.0), tags={schema.SWEEP: "another_sweep"})
        stale = trial_with_lr(s1_llama, 1.4e-3)
        w.trial(stale, metrics=rs.lm_metrics(5.0), tags={schema.CONFIG_HASH: "0" * 16}, parent_id=parent)

        # The grid sweep of the same figure; a rate a sample already ran is that run (same config hash).
        grid_parent = w.parent("lr_grid")
        for t in load_sweep("lr_grid").expand("smoke"):
            if S1[t.group].get(t.axes["lr"]) != "finished":
                w.trial(t, metrics=rs.lm_metrics(curve(t.group, t.axes["lr"])), parent_id=grid_parent)

        store, grids = RunStore(uri), SweepGrids()
        n_with_runs = count_runs("lr_sweep", "smoke", store, grids)
        result = build("lr_sweep", None, root / "reports", store=store, grids=grids)
        yield dict(result=result, out=result.out_dir, cells=cells, ids=ids, n_with_runs=n_with_runs)


def test_every_sampled_lr_is_a_trial_and_a_cell_without_runs_is_missing(optuna_report):
    r = optuna_report
    trials = pd.read_csv(r["out"] / "trials.csv")
    by_cell = {cid: g.sort_values("lr") for cid, g in trials.groupby("search_cell")}
    cells = r["cells"]
    assert set(by_cell) == {c.trial_id for c in cells.values()}
    for group, samples in S1.items():
        g = by_cell[cells[("s1", group)].trial_id]
        assert list(g["lr"]) == sorted(samples)
        assert list(g["status"]) == [samples[lr] for lr in sorted(samples)]
        assert list(g["run_id"]) == [r["ids"][(group, lr)] for lr in sorted(samples)]
        assert g["trial_id"].str.contains("__lr").all() and g["trial_id"].nunique() == len(samples)
    # s2 llama has one run (failed, off the centre): not missing, listed with its error
    (failed,) = by_cell[cells[("s2", "llama")].trial_id].itertuples()
    assert (failed.lr, failed.status, failed.detail) == (FAILED_LR, "failed", ERROR)
    # s2 cem has no run at all: one missing row at the centre
    (missing,) = by_cell[cells[("s2", "cem")].trial_id].itertuples()
    assert (missing.lr, missing.status, missing.trial_id) == (CENTRE, "missing", cells[("s2", "cem")].trial_id)
    # neither the other sweep's run nor the stale config's run is taken
    assert not set(trials["lr"]) & {1.5e-3, 1.4e-3}
    assert r["n_with_runs"] == 3 and r["result"].scale == "smoke"
    counts = r["result"].counts
    assert {k: counts[k] for k in ("trials", "runs", "finished", "stopped", "interrupted", "failed", "missing",
                                   "diverged", "running")} == {
        "trials": 15, "runs": 14, "finished": 10, "stopped": 2, "interrupted": 1, "failed": 1, "missing": 1,
        "diverged": 0, "running": 0}


def test_sampled_lrs_feed_the_akima_optimum_and_stopped_runs_are_left_out(optuna_report):
    out = optuna_report["out"]
    optima = pd.read_csv(out / "akima_optima.csv")
    for group, samples in S1.items():
        done = sorted(lr for lr, s in samples.items() if s == "finished")
        expect = akima_optimum(done, [curve(group, lr) for lr in done])
        row = optima[(optima["group"] == group) & (optima["size"] == "s1")].iloc[0]
        assert row["n_points"] == len(done) and bool(row["bracketed"])
        assert row["optimum_lr"] == pytest.approx(expect.lr) and row["optimum_ppl"] == pytest.approx(expect.value)
        assert abs(row["optimum_log10_lr"] - math.log10(TRUE_OPT[group][1])) < 0.05
    # the s2 cells have no finished run: no optimum, and said so
    s2 = optima[optima["size"] == "s2"]
    assert len(s2) == 2 and s2["optimum_lr"].isna().all() and set(s2["note"]) == {"no finished runs"}

    points = pd.read_csv(out / "fig3a.csv")
    cem = points[(points["group"] == "cem") & (points["size"] == "s1")].set_index("lr")
    assert list(cem.index) == sorted(S1["cem"])
    for lr, status in S1["cem"].items():
        if status == "finished":
            assert cem.loc[lr, "mean"] == pytest.approx(curve("cem", lr)) and cem.loc[lr, "n"] == 1
        else:
            assert math.isnan(cem.loc[lr, "mean"]) and cem.loc[lr, "n"] == 0 and f"1 {status}" in cem.loc[lr, "note"]
    cells = pd.read_csv(out / "cells.csv")
    assert cells["n_stopped"].sum() == 2 and cells["n_interrupted"].sum() == 1 and cells["n_missing"].sum() == 1

    # the claims compare the optima of the finished samples only (the stopped run's test/ppl 10 is ignored)
    verdicts = {v.id: v for v in optuna_report["result"].verdicts}
    llama = akima_optimum(sorted(S1["llama"]), [curve("llama", lr) for lr in sorted(S1["llama"])])
    done = sorted(lr for lr, s in S1["cem"].items() if s == "finished")
    cem_opt = akima_optimum(done, [curve("cem", lr) for lr in done])
    v = verdicts["full-cem-matches-llama"]
    # one seed: the numbers are shown, the verdict is never a yes or no
    assert v.verdict == "inconclusive" and v.n_seeds == 1 and math.isnan(v.ci_low)
    assert v.effect == pytest.approx(cem_opt.value / llama.value - 1)
    assert f"Llama {llama.value:.4g}, CEM {cem_opt.value:.4g}" in v.numbers
    lr = verdicts["full-cem-higher-lr"]
    assert lr.verdict == "inconclusive" and lr.effect == pytest.approx(math.log2(cem_opt.lr / llama.lr))
    assert f"Llama {llama.lr:.3g}; CEM {cem_opt.lr:.3g}" in lr.numbers


def test_searched_optima_are_set_beside_the_grid_sweeps_akima_optima(optuna_report):
    """The searched sweep's report compares each searched optimum with the Akima optimum of the
    same cell in the grid sweep of its figure, both recomputed here from the values written."""
    compared = pd.read_csv(optuna_report["out"] / "search_vs_grid.csv")
    assert set(zip(compared["group"], compared["size"])) == {("llama", "s1"), ("cem", "s1")}  # s2: no optimum
    for group, samples in S1.items():
        done = sorted(lr for lr, s in samples.items() if s == "finished")
        searched = akima_optimum(done, [curve(group, lr) for lr in done])
        grid = akima_optimum(list(GRID_LRS), [curve(group, lr) for lr in GRID_LRS])
        row = compared[compared["group"] == group].iloc[0]
        assert row["grid_sweep"] == "lr_grid" and row["grid_points"] == len(GRID_LRS)
        assert row["searched_optimum_lr"] == pytest.approx(searched.lr)
        assert row["grid_optimum_lr"] == pytest.approx(grid.lr)
        assert row["delta_log10_lr"] == pytest.approx(math.log10(searched.lr) - math.log10(grid.lr))
        assert row["grid_step_log10"] == pytest.approx(math.log10(2))
    assert "search_vs_grid" in (optuna_report["out"] / "index.html").read_text()


def test_stopped_interrupted_and_failed_runs_are_listed_with_what_happened(optuna_report):
    out = optuna_report["out"]
    not_done = pd.read_csv(out / "missing.csv", keep_default_na=False)
    got = {(row.status, float(row.lr)): row.detail for row in not_done.itertuples()}
    stopped_detail = f"stopped early by ASHA at step 4; last val/ppl {STOPPED_VAL_PPL:.4g} (not a final result)"
    assert got == {("stopped", 6e-4): stopped_detail, ("stopped", 7e-3): stopped_detail,
                   ("interrupted", 2.5e-3): "", ("failed", FAILED_LR): ERROR, ("missing", CENTRE): ""}
    html = (out / "index.html").read_text()
    assert html.count("stopped early by ASHA at step 4") == 2 and ERROR in html
    assert "searched by Optuna in each of 4 grid cell(s) (6 samples each, ASHA early stopping); 3 cell(s) with " \
           "runs, 14 sampled run(s) in all, 2 stopped early" in html
    assert "10 finished, 0 diverged, 2 stopped, 1 failed, 1 interrupted, 0 running, 1 missing" in html
    # the training curves show the stopped runs up to where ASHA stopped them
    curves = pd.read_csv(out / "training.csv")
    stopped = curves[curves["status"] == "stopped"]
    ids = optuna_report["ids"]
    assert set(stopped["run_id"]) == {ids[("cem", 6e-4)], ids[("cem", 7e-3)]}
    assert (stopped.groupby("run_id")["step"].max() == 4).all()


def test_a_grid_sweep_lists_and_counts_interrupted_runs(tmp_path, monkeypatch, template_db):
    """A grid trial whose run was interrupted (Ctrl-C, MLflow KILLED) is counted, noted in its
    cell and listed; it is neither finished nor missing."""
    from cemlab.report.pages.build import build
    from cemlab.sweeps.sweepfile.load import load_sweep

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(rs.write_sweeps(tmp_path / "sweeps", ["kq_diagonal"])))
    uri = rs.migrated_store(template_db, tmp_path / "m.db")
    w = rs.RunWriter(uri, tmp_path / "art")
    status = {"none": "finished", "shared": "interrupted", "per_head": "finished"}
    ids = {}
    for t in load_sweep("kq_diagonal").expand("smoke"):  # three seeds
        kq = t.axes["kq"]
        metrics = rs.lm_metrics(rs.KQ[kq]) if status[kq] == "finished" else {schema.VAL_PPL: 33.0}
        ids.setdefault(kq, []).append(w.trial(t, status=status[kq], metrics=metrics))
    from mlflow.tracking import MlflowClient

    assert MlflowClient(uri).get_run(ids["shared"][0]).info.status == "KILLED"
    r = build("kq_diagonal", "smoke", tmp_path / "out", uri)
    assert (r.counts["finished"], r.counts["interrupted"], r.counts["missing"]) == (6, 3, 0)
    cells = pd.read_csv(r.out_dir / "cells.csv").set_index("kq_diagonal")
    assert cells.loc["shared", "n_interrupted"] == 3 and cells.loc["shared", "n"] == 0
    assert "3 interrupted" in cells.loc["shared", "note"] and np.isnan(cells.loc["shared", "mean"])
    listed = pd.read_csv(r.out_dir / "missing.csv")
    assert list(zip(listed["status"], listed["run_id"])) == [("interrupted", i) for i in ids["shared"]]
    assert all(i in r.index_html.read_text() for i in ids["shared"])
