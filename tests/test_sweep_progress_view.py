"""The live sweep table fitted to a terminal (``cemlab.sweeps.stages.progress_view``), the count from the
first line, the smoothed time left, and the plain lines of a run without a terminal: rendered
through ``rich`` consoles of 80x24 and 160x60 and a non-terminal stream, asserted on the text."""

from __future__ import annotations

import io
import math
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.trial import tune_report as tr
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tracking import schema

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


@pytest.fixture(scope="module")
def trials():
    mp = pytest.MonkeyPatch()
    mp.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    try:
        yield load_sweep("recursion_ablation").expand("tiny")
    finally:
        mp.undo()


def _midway(trials) -> pg.SweepProgress:
    """The main job a third of the way: 14 finished (test perplexities 195.31...), 2 running, the rest queued."""
    progress = pg.SweepProgress("recursion_ablation (fig2) at scale tiny")
    progress.add_many(trials, [1e12] * len(trials))
    now = time.time()
    for i, t in enumerate(trials[:14]):
        progress.set_status(t.trial_id, pg.RUNNING)
        progress.update(t.trial_id, {tr.STEP_KEY: 160, tr.TOTAL_KEY: 160, schema.TRAIN_LOSS: 5.2 + i / 100,
                                     schema.VAL_PPL: 190 + 1.7 * i, schema.TEST_PPL: 195.31 + i})
        progress.set_status(t.trial_id, schema.STATUS_FINISHED)
        progress.rows[t.trial_id].started, progress.rows[t.trial_id].ended = now - 900 + 60 * i, now - 840 + 60 * i
    for t in trials[14:16]:
        progress.set_status(t.trial_id, pg.RUNNING)
        progress.update(t.trial_id, {tr.STEP_KEY: 80, tr.TOTAL_KEY: 160, schema.TRAIN_LOSS: 5.61, schema.VAL_PPL: 260.12})
    return progress


def _live_render(progress, width: int, height: int) -> list[str]:
    """What the live display draws on a terminal of width x height (colours off)."""
    out = io.StringIO()
    console = Console(file=out, width=width, height=height, force_terminal=True, color_system=None)
    console.print(pg.ProgressDisplay(progress, console)._renderable())
    return out.getvalue().splitlines()


def _row_line(lines: list[str], label: str) -> str | None:
    return next((ln for ln in lines if ln.startswith(label + " ")), None)


def test_80x24_shows_labels_status_step_and_whole_numbers_with_the_progress_line_last(trials):
    progress = _midway(trials)
    lines = _live_render(progress, 80, 24)
    assert len(lines) <= 24 and max(map(len, lines)) <= 80
    labels = {t.trial_id: progress.rows[t.trial_id].label for t in trials}
    assert len(set(labels.values())) == len(trials)                                         # every trial told apart
    for eta in ("1", "0.5"):                                                        # eta and lr in the label
        assert any(v.startswith(f"cem-attn T2 dplr eta={eta} lr=4e-3 s0") for v in labels.values()), labels
    assert any(v.startswith("cem-mlp T2 dplr eta=0.5 lr=4e-3 s1") for v in labels.values())  # eta and preconditioner
    shown = [t for t in trials if _row_line(lines, labels[t.trial_id])]
    for t in trials[14:16]:                                                         # the running ones
        assert re.search(r"running\s+80/160\s.*260\.12", _row_line(lines, labels[t.trial_id]))
    for i, t in enumerate(trials[:14]):
        line = _row_line(lines, labels[t.trial_id])
        if line is not None:                                                        # numbers in full
            assert f"{195.31 + i:.2f}" in line and f"{190 + 1.7 * i:.2f}" in line and "finished" in line
    recent = [labels[t.trial_id] for t in trials[:14]][-5:]                         # most recently ended
    assert all(_row_line(lines, label) for label in recent)
    more = [ln for ln in lines if ln.startswith("... ")]
    assert more == [f"... {len(trials) - len(shown)} more: " + ", ".join(
        f"{n} {s}" for s, n in (("finished", 14 - sum(t in shown for t in trials[:14])),
                                ("queued", len(trials) - 16 - sum(t in shown for t in trials[16:]))) if n)]
    tail = " ".join(ln.strip() for ln in lines[-2:])
    assert f"14/{len(trials)} trials done (2 running, {len(trials) - 16} queued, 14 finished)" in tail and "left" in tail
    assert len(shown) >= 12                                                         # the height is used


def test_160x60_shows_every_row_with_its_trial_id_and_loss(trials):
    progress = _midway(trials)
    lines = _live_render(progress, 160, 60)
    assert len(lines) <= 60 and max(map(len, lines)) <= 160
    for t in trials:
        line = _row_line(lines, progress.rows[t.trial_id].label)
        assert line is not None and t.trial_id in line
    assert "loss" in lines[1] and "5.210" in _row_line(lines, progress.rows[trials[1].trial_id].label)
    assert not any(ln.startswith("... ") for ln in lines)
    assert lines[-1].startswith(f"recursion_ablation (fig2) at scale tiny: 14/{len(trials)} trials done")


def test_rows_beyond_the_height_are_counted_and_the_progress_line_stays(trials):
    progress = _midway(trials)
    lines = _live_render(progress, 160, 20)
    assert len(lines) <= 20 and lines[-1].startswith(f"recursion_ablation (fig2) at scale tiny: 14/{len(trials)}")
    shown = sum(_row_line(lines, r.label) is not None for r in progress.rows.values())
    assert any(ln.startswith(f"... {len(trials) - shown} more: ") for ln in lines) and shown >= 14


def test_the_count_is_whole_from_the_first_line(trials, monkeypatch):
    """Trials are added at once: while their FLOPs are counted nobody sees a part of them."""
    progress = pg.SweepProgress("s")
    seen = []
    monkeypatch.setattr(progress, "_flops", lambda t: seen.append(progress.summary()) or 1e9)
    progress.add_many(trials[:5])
    assert seen and all(s == "s: deciding which trials to run" for s in seen)
    assert "0/5 trials done (5 queued)" in progress.summary()


def test_time_left_is_smoothed(monkeypatch):
    """A new estimate moves the shown time left by 1 - exp(-dt/30) of the difference (once the
    estimate is a minute old); between estimates it counts down with the clock."""
    progress = pg.SweepProgress("s")
    raw = {"value": 600.0}
    monkeypatch.setattr(progress, "time_left", lambda now=None: raw["value"])
    assert progress.eta(1000.0) == 600.0
    raw["value"] = 500.0
    assert progress.eta(1100.0) == pytest.approx(500.0)    # counted down 100 s, as estimated
    raw["value"] = 250.0                                   # a trial ended: the estimate halves
    shown = progress.eta(1101.0)
    assert shown == pytest.approx(499.0 + (1 - math.exp(-1 / 30)) * (250.0 - 499.0), rel=1e-12)
    assert 485 < shown < 495                                # seconds, not minutes
    assert progress.eta(1101.0 + 600) == pytest.approx(250.0, abs=0.01)   # a lasting change shows


def test_without_a_terminal_one_line_per_validation_report(trials):
    progress = pg.SweepProgress("recursion_ablation at scale tiny")
    progress.add_many(trials[:3], [1e12] * 3)
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    a = trials[0].trial_id
    with pg.ProgressDisplay(progress, console, interval=3600):
        progress.set_status(a, pg.RUNNING)
        for step, ppl in ((40, 400.5), (80, 250.25)):
            progress.update(a, {tr.STEP_KEY: step, tr.TOTAL_KEY: 160, schema.TRAIN_LOSS: 5.5, schema.VAL_PPL: ppl})
        progress.update(a, {tr.STEP_KEY: 80, tr.TOTAL_KEY: 160, schema.VAL_PPL: 250.25})  # no new step: no line
    lines = [ln for ln in out.getvalue().splitlines() if "validated" in ln]
    assert len(lines) == 2 and "\x1b[" not in out.getvalue()
    assert "llama lr=2e-3 s0  step 40/160  loss 5.500  val ppl 400.50  [0/3 done" in lines[0]
    assert "step 80/160" in lines[1] and "val ppl 250.25" in lines[1]


def test_labels_add_the_axes_that_vary_and_the_name_does_not_say():
    """A learning-rate axis per cell and an eta axis the variant name leaves out join the label;
    what the name already says (dplr, eta=1/T) does not repeat; sizes show when they vary."""
    from types import SimpleNamespace

    from cemlab.sweeps.stages.progress_view import trial_labels

    def trial(size, variant, seed, lr, **axes):
        return SimpleNamespace(trial_id=f"{size}-{variant}-{seed}-{lr}-{axes}", size=size, variant=variant,
                               group=variant.split()[0],
                               axes={"size": size, "group": "g", "variant": variant, "lr": lr, "seed": seed, **axes})

    trials = [trial(size, v, seed, lr, precond="dplr", eta=eta)
              for size in ("86m", "108m") for v, eta in (("cem-attn T1 dplr", 0.5), ("cem-attn T1 dplr", 1.0),
                                                          ("cem-attn T2 dplr eta=1/T", "1/T"))
              for lr in (2e-3, 4e-3, 1.5e-3) for seed in (0, 1)]
    labels = trial_labels(trials)
    assert len(set(labels.values())) == len(trials)
    assert labels[trials[0].trial_id] == "86m cem-attn T1 dplr lr=2e-3 s0 eta=0.5"
    assert labels[trials[-1].trial_id] == "108m cem-attn T2 dplr eta=1/T lr=1.5e-3 s1"


def test_the_end_names_each_bracketing_step_and_seed_look_in_order():
    from types import SimpleNamespace

    from cemlab.sweeps.stages.progress_view import looks_made

    result = SimpleNamespace(
        brackets=[{"step": 0, "cells": [{"added_lr": 1e-3}, {"added_lr": None}, {"added_lr": 8e-3}], "added": 6}],
        looks=[{"index": 0, "seeds": [0, 1, 2], "open_claims": ["t2-beats-t1 [eta=1]"], "open_cells": ["a", "b"],
                "added": 30},
               {"index": 1, "seeds": list(range(8)), "open_claims": [], "open_cells": 0, "added": 0}])
    assert looks_made(result) == [
        "bracketing step 0: 2 of 3 cells best at an edge got the rate beyond it (6 trials)",
        "look 0 on seeds 0,1,2: 1 claim condition(s) open, 2 cell(s) got 30 trials",
        "look 1 on seeds 0,1,2,3,4,5,6,7: 0 claim condition(s) open, 0 cell(s) got 0 trials"]
    assert looks_made(SimpleNamespace(brackets=[], looks=[])) == []
    stage = {"pairs": 16, "seeds": 7, "extra_seeds": [9, 10], "primary": "t2-beats-t1", "added": 128, "spent": 52,
             "budget": 180}
    assert looks_made(SimpleNamespace(brackets=[], looks=[], confirmation=stage)) == [
        "confirmation: 16 (cell, rate) pairs x 7 fresh seeds, 2 extra for t2-beats-t1 (128 trials; 52 on the "
        "selection seeds, budget 180)"]
