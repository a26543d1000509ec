"""The sweep's progress table and plain lines, fed the way the runner feeds them (no Ray needed:
Tune's callback is driven with stand-in trial objects carrying a config and results)."""

from __future__ import annotations

import io
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.trial import tune_report as tr
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.trial.files import TrialFiles
from cemlab.tracking import schema

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


@pytest.fixture
def trials(monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    return load_sweep("recursion_ablation").expand("smoke")


def _fed(trials) -> tuple[pg.SweepProgress, pg.TuneCallback]:
    progress = pg.SweepProgress("recursion_ablation at scale smoke")
    for t in trials:
        progress.add(t)
    by_id = {t.trial_id: t for t in trials}
    cb = pg.TuneCallback(progress, lambda config: by_id[config["trial_id"]], TrialFiles(Path("/runs"), Path("/runs/logs/x")).log)
    progress.set_status(trials[0].trial_id, pg.REUSED, note="run abc of attention_replacement")
    tune_trial = SimpleNamespace(trial_id="t1", config={"trial_id": trials[1].trial_id}, last_result={})
    cb.on_trial_start(0, [], tune_trial)
    cb.on_trial_result(0, [], tune_trial, {tr.STEP_KEY: 8, tr.TOTAL_KEY: 16, schema.TRAIN_LOSS: 5.25,
                                           schema.VAL_PPL: 190.5, tr.RUN_ID_KEY: "r1"})
    failing = SimpleNamespace(trial_id="t2", config={"trial_id": trials[2].trial_id}, last_result={}, error_file="")
    cb.on_trial_start(0, [], failing)
    cb.on_trial_recover(0, [], failing)
    cb.on_trial_start(0, [], failing)
    cb.on_trial_error(0, [], failing)
    done = SimpleNamespace(trial_id="t3", config={"trial_id": trials[3].trial_id},
                           last_result={tr.STATUS_KEY: "finished", schema.TEST_PPL: 150.25})
    cb.on_trial_start(0, [], done)
    cb.on_trial_result(0, [], done, done.last_result)
    cb.on_trial_complete(0, [], done)
    stopped = SimpleNamespace(trial_id="t4", config={"trial_id": trials[4].trial_id}, last_result={tr.STEP_KEY: 4})
    cb.on_trial_start(0, [], stopped)
    cb.on_trial_complete(0, [], stopped)   # ended without a final report: the scheduler stopped it
    return progress, cb


def test_tune_events_become_rows(trials):
    progress, _ = _fed(trials)
    rows = progress.rows
    assert rows[trials[0].trial_id].status == pg.REUSED
    r1 = rows[trials[1].trial_id]
    assert (r1.status, r1.step, r1.total, r1.loss, r1.val, r1.run_id) == ("running", 8, 16, 5.25, 190.5, "r1")
    r2 = rows[trials[2].trial_id]
    assert r2.status == "failed" and r2.attempts == 2 and r2.note == f"log /runs/logs/x/{trials[2].trial_id}.log"
    assert rows[trials[3].trial_id].status == "finished" and rows[trials[3].trial_id].test == 150.25
    assert rows[trials[4].trial_id].status == "stopped"
    assert all(r.status == pg.QUEUED for r in list(rows.values())[5:])
    assert progress.counts() == {"reused": 1, "running": 1, "failed": 1, "finished": 1, "stopped": 1,
                                 "queued": len(trials) - 5}


def test_table_shows_every_trial_or_the_active_ones(trials):
    progress, _ = _fed(trials)
    text = _render(progress.view(250))
    for t in trials:
        assert t.trial_id in text
    assert "8/16" in text and "5.250" in text and "190.50" in text and "150.25" in text
    assert "failed +1" in text                                            # one retry
    assert f"{len(trials) - 5} queued" in text and f"4/{len(trials)} trials done" in text  # reused, finished, stopped, failed
    short = _render(progress.view(250, height=10))
    assert trials[1].trial_id in short and trials[2].trial_id in short   # running and failed first
    assert trials[8].trial_id not in short                               # queued ones are summarised


def test_plain_mode_prints_status_changes_and_summaries(trials):
    progress = pg.SweepProgress("s at scale smoke")
    for t in trials[:2]:
        progress.add(t)
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with pg.ProgressDisplay(progress, console, live=None, interval=0.5):
        progress.set_status(trials[0].trial_id, pg.RUNNING)
        progress.update(trials[0].trial_id, {tr.STEP_KEY: 3, tr.TOTAL_KEY: 16, schema.TRAIN_LOSS: 5.0})
        time.sleep(1.6)
        progress.update(trials[0].trial_id, {schema.TEST_PPL: 99.5})
        progress.set_status(trials[0].trial_id, schema.STATUS_FINISHED)
    lines = out.getvalue().splitlines()
    assert any(trials[0].trial_id in line and "running" in line for line in lines)
    assert any("step 3/16 loss 5.000" in line for line in lines)            # the periodic summary
    assert any("s at scale smoke: 0/2 trials done (1 running, 1 queued)" in line for line in lines)
    assert any("finished" in line and "test ppl 99.50" in line for line in lines)
    assert "\x1b[" not in out.getvalue()                                    # no live redraws in a log


def test_live_mode_redraws_one_table_in_a_terminal(trials):
    progress, _ = _fed(trials)
    out = io.StringIO()
    console = Console(file=out, width=200, height=40, force_terminal=True)
    with pg.ProgressDisplay(progress, console):
        time.sleep(0.6)
    text = out.getvalue()
    assert "\x1b[" in text                                                 # cursor moves: redrawn in place
    assert text.count("recursion_ablation at scale smoke") >= 2            # drawn more than once
    assert trials[1].trial_id in text


def _render(table) -> str:
    out = io.StringIO()
    Console(file=out, width=250).print(table)
    return out.getvalue()


def test_gp_sweeps_show_rmse(monkeypatch):
    """The GP study reports RMSE, not perplexity: the table and the lines say so and show it."""
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    gp_trials = load_sweep("gp_recursion").expand("smoke")
    progress = pg.SweepProgress("gp_recursion at scale smoke")
    for t in gp_trials:
        progress.add(t)
    first = gp_trials[0].trial_id
    progress.set_status(first, "running")
    progress.update(first, {tr.STEP_KEY: 3, tr.TOTAL_KEY: 20, schema.TRAIN_LOSS: 0.5,
                            schema.VAL_RMSE: 0.4321, schema.VAL_PPL: 999.0})
    assert progress.rows[first].val == pytest.approx(0.4321)
    assert "val rmse 0.4321" in progress.running_lines()[0]
    out = io.StringIO()
    Console(file=out, width=200).print(progress.view(200))
    assert "val rmse" in out.getvalue() and "val ppl" not in out.getvalue()


def test_time_left_is_the_flops_left_at_the_sweeps_flop_rate(trials):
    """Elapsed time and the time left: FLOPs still to train (queued trials, the rest of running
    ones, samples a search cell has yet to draw) over the FLOPs this invocation trained per second
    of wall time. Each trial's FLOPs are cemlab plan's, computed here independently."""
    from cemlab.sweeps.plan import plan_sweep

    flops = {r.trial.trial_id: r.flops for r in plan_sweep("recursion_ablation", "smoke", read_store=False).rows}
    progress = pg.SweepProgress("recursion_ablation at scale smoke")
    for t in trials[:4]:
        progress.add(t)
    assert all(progress.rows[t.trial_id].flops == pytest.approx(flops[t.trial_id]) for t in trials[:4])
    assert progress.time_left() is None and "time left: estimating" in progress.summary()
    a, b, c, d = (t.trial_id for t in trials[:4])
    progress.set_status(a, pg.REUSED)                         # not trained here: neither rate nor work left
    progress.set_status(b, pg.RUNNING)
    progress.set_status(c, pg.RUNNING)
    now = time.time()
    progress.rows[b].started, progress.rows[c].started = now - 100, now - 40
    progress.update(b, {tr.STEP_KEY: 16, tr.TOTAL_KEY: 16})
    progress.set_status(b, schema.STATUS_FINISHED)
    progress.update(c, {tr.STEP_KEY: 4, tr.TOTAL_KEY: 16})
    rate = (flops[b] + flops[c] / 4) / 100                    # FLOPs trained since the first start
    left = flops[c] * 3 / 4 + flops[d]
    assert progress.time_left(now) == pytest.approx(left / rate, rel=1e-6)

    # A search cell that will draw 3 more samples adds their FLOPs.
    cell = trials[5]
    progress.expect(cell, 3)
    assert progress.time_left(now) == pytest.approx((left + 3 * flops[cell.trial_id]) / rate, rel=1e-6)
    text = progress.summary()
    assert "2/7 trials done" in text and "elapsed 0s" in text and f"about {pg._duration(progress.time_left())} left" in text
