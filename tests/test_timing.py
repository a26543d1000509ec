"""The stage table (``cemlab.timing``): spans written by several processes add up to the slot-time,
checked on hand-made sweeps whose every number is worked out below (driver stages that overlap
count each second once), and the spans a process keeps reach the file named in
``$CEMLAB_STAGES_FILE`` (nothing is written without it)."""

from __future__ import annotations

import json

import pytest

from cemlab import timing


def span(stage, start, end, trial=None):
    return {"stage": stage, "start": start, "end": end, "trial": trial, "pid": 1}


def test_summary_adds_up_to_the_slot_time_of_a_hand_made_sweep():
    # wall 0..100 s, 2 slots = 200 s of slot-time. Driver: 10 s before the trials, trials 10..90,
    # 10 s after. Trial a: Tune span 10..90, its process 12..90 (worker start 5..12 counted once),
    # fit 20..80 with 10 s validation and 2 s checkpoint inside and 3 s of step logging.
    # Trial b: Tune span 10..50, process 10..50, fit 15..45.
    spans = [span("driver start", 0, 4), span("ray start", 4, 10), span("trials", 10, 90), span("report", 90, 100),
             span("trial", 10, 90, "a"), span("trial process", 12, 90, "a"), span("worker start", 5, 12, "a"),
             span("imports", 12, 20, "a"), span("fit", 20, 80, "a"), span("validation", 30, 40, "a"),
             span("checkpoint", 60, 62, "a"), {"stage": "step logging", "seconds": 3.0, "trial": "a", "pid": 1},
             span("test", 80, 90, "a"),
             span("trial", 10, 50, "b"), span("trial process", 10, 50, "b"), span("fit", 15, 45, "b")]
    s = timing.summarize(spans)
    assert (s["wall"], s["slots"], s["slot_time"], s["trials"]) == (100, 2, 200, 2)
    sec = s["seconds"]
    assert sec["training"] == pytest.approx((60 - 10 - 2 - 3) + 30)
    assert sec["validation"] == 10 and sec["checkpoint"] == 2 and sec["step logging"] == 3
    assert sec["around the trial"] == pytest.approx((80 + 40) - (78 + 40))
    # the trials' phase holds 2 x 80 s of slots; the trials held 120 s of them, worker start 7 s
    assert sec["slots idle"] == pytest.approx(160 - 120 - 7)
    assert s["training_share"] == pytest.approx(75 / 200)
    rows = [r for r in timing.ROWS]
    assert sum(s["share"][r] for r in rows) == pytest.approx(1.0)   # every second of slot-time in one row


def test_overlapping_driver_stages_count_each_second_once():
    # wall 0..100 s, 2 slots. Ray starts (4..8) while the store's server starts (2..10); Ray shuts
    # down (90..93) while the report is built (91..100). A second two stages share is split between
    # them, so the driver's rows add up to the wall time it covers.
    spans = [span("driver start", 0, 2), span("sweep file and store", 2, 10), span("ray start", 4, 8),
             span("trials", 10, 90), span("ray shutdown", 90, 93), span("report", 91, 100)]
    for t in ("a", "b"):
        spans += [span("trial", 10, 90, t), span("trial process", 10, 90, t), span("fit", 10, 90, t)]
    s = timing.summarize(spans)
    sec = s["seconds"]
    assert sec["sweep file and store"] == pytest.approx(2 + 2 + 4 / 2) and sec["ray start"] == pytest.approx(4 / 2)
    assert sec["ray shutdown"] == pytest.approx(1 + 2 / 2) and sec["report"] == pytest.approx(7 + 2 / 2)
    assert sec["driver, other"] == pytest.approx(0) and sec["slots idle"] == pytest.approx(0)
    assert s["driver_overlap"] == pytest.approx(4 + 2)   # what running them at once saved
    assert sum(s["share"][r] for r in timing.ROWS) == pytest.approx(1.0)
    assert "| **driver stages at once (seconds shared)** | 6.0 s |" in timing.format_table({"x": s})


def test_spans_reach_the_stages_file_only_when_it_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(timing.STAGES_ENV, raising=False)
    with timing.stage("data load"):
        pass
    timing.flush()
    path = tmp_path / "stages.jsonl"
    monkeypatch.setenv(timing.STAGES_ENV, str(path))
    timing.set_trial("t1")
    try:
        with timing.stage("model build"):
            pass
        timing.add("step logging", 0.5)
        timing.add("step logging", 0.25)
        timing.flush()
    finally:
        timing.set_trial(None)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["stage"], x["trial"]) for x in lines] == [("model build", "t1"), ("step logging", "t1")]
    assert lines[0]["end"] >= lines[0]["start"] and lines[1]["seconds"] == 0.75


def test_measure_timings_refuses_a_typo_before_measuring_and_reads_a_finished_sweep(tmp_path):
    """``scripts/measure-timings.py``: an unknown row beside ``stages`` is refused before the stages
    sweep runs (in well under a second, naming the rows and, for a stages file, ``--read``), and
    ``--read`` prints the stage table of a sweep that already ran: the hand-made sweep above, its
    wall time and training seconds as worked out there."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "measure-timings.py"
    t0 = time.perf_counter()
    bad = subprocess.run([sys.executable, str(script), "stages", "runs/logs/x/stages.jsonl"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and time.perf_counter() - t0 < 30
    assert "unknown row(s) runs/logs/x/stages.jsonl" in bad.stderr and "--read" in bad.stderr
    assert "cemlab sweep" not in bad.stderr   # nothing was started

    folder = tmp_path / "logs" / "recursion_ablation-tiny"
    folder.mkdir(parents=True)
    spans = [span("driver start", 0, 4), span("trials", 4, 100),
             span("trial", 4, 100, "a"), span("trial process", 4, 100, "a"), span("fit", 10, 70, "a"),
             span("test", 70, 100, "a")]
    (folder / timing.STAGES_NAME).write_text("".join(json.dumps(s) + "\n" for s in spans))
    out = subprocess.run([sys.executable, str(script), "--read", str(folder / timing.STAGES_NAME)],
                         capture_output=True, text=True, check=True).stdout
    assert "| **wall time** | 100.0 s |" in out and "| per trial: training | 60.0 |" in out
    assert "| per trial: test | 30.0 |" in out and "recursion_ablation-tiny: read from" in out
    missing = subprocess.run([sys.executable, str(script), "--read", str(tmp_path / "none.jsonl")],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "no such file" in missing.stderr
