"""What the store holds of a trial after faults around its run: one run per config after a failed
run creation, a stray ``RUNNING`` run named by the sweep's store check, and a trial that finished
while the sweep was being stopped recorded as finished. Real MLflow sqlite store, no Ray."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cemlab.sweeps.stages import progress as pg
from cemlab.tracking import mlflow_run as mr, schema

REPO = Path(__file__).resolve().parents[1]
SMALL = ["model.vocab_size=320", "model.context_length=32", "model.d_model=32", "model.n_layers=1",
         "model.n_heads=2", "model.d_mlp=86", "data.max_chars=300000", "train.tokens=4096", "train.batch_size=8",
         "train.micro_batch_size=8", "train.val_interval=8", "train.checkpoint_every=8", "train.num_threads=1"]


@pytest.fixture(scope="module")
def module_store(tmp_path_factory):
    """One sqlite store for the module (creating one costs seconds)."""
    from cemlab.tracking.store import ensure_experiment, get_client

    folder = tmp_path_factory.mktemp("records")
    uri = f"sqlite:///{folder}/mlflow.db"
    client = get_client(uri)
    # its artifacts in the module's folder (ensure_experiment would pick the runs folder of the moment)
    client.create_experiment("cemlab/test", artifact_location=(folder / "artifacts").as_uri())
    return {"uri": uri, "client": client, "exp": ensure_experiment("cemlab/test", client)}


@pytest.fixture
def store(module_store, runs_dir, monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO / "sweeps"))
    return module_store


def _invocation(store, runs_dir: Path, trials):
    from cemlab.sweeps.stages.invocation import Invocation
    from cemlab.sweeps.sweepfile.load import load_sweep

    spec = load_sweep("attention_replacement")
    parent = mr.create_run(store["client"], store["exp"], "parent", {schema.ROLE: "sweep"})
    progress = pg.SweepProgress("test")
    for t in trials:
        progress.add(t)
    log_dir = runs_dir / "logs" / "t"
    log_dir.mkdir(parents=True)
    return Invocation(spec, "smoke", store["client"], store["uri"], store["exp"], parent, False, runs_dir, log_dir,
                      1, None, {}, progress)


def _trial_run(store, inv, trial, status: str | None) -> str:
    run_id = mr.create_run(store["client"], store["exp"], trial.trial_id,
                           {schema.CONFIG_HASH: trial.config_hash, schema.ROLE: "trial",
                            schema.STATUS: schema.STATUS_RUNNING}, parent_run_id=inv.parent_run_id)
    if status:
        store["client"].log_metric(run_id, schema.TEST_PPL, 123.5)
        mr.finish_run(store["client"], run_id, status)
    return run_id


def test_a_trial_that_finishes_while_the_sweep_stops_is_finished(store, runs_dir):
    """The driver marks the trials of an interrupted sweep only once their processes are gone: a
    trial that says "finished" a second after Ctrl-C is finished, one that never does is interrupted."""
    from cemlab.sweeps.stages.record import mark_interrupted
    from cemlab.sweeps.sweepfile.load import load_sweep

    trials = load_sweep("attention_replacement").expand("smoke")[:2]
    inv = _invocation(store, runs_dir, trials)
    late, cut = (_trial_run(store, inv, t, None) for t in trials)
    for t, run_id in zip(trials, (late, cut)):
        inv.progress.set_status(t.trial_id, pg.RUNNING, run_id=run_id)
    # The trial's process: it lives 3 s more, and says "finished" 1 s after the driver was stopped.
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    finisher = threading.Timer(1.0, lambda: (store["client"].log_metric(late, schema.TEST_PPL, 150.25),
                                             mr.finish_run(store["client"], late, "finished")))
    (inv.log_dir / f"{trials[0].trial_id}.log").write_text(
        f"--- 2026-01-01 00:00:00 trial {trials[0].trial_id} (config {trials[0].config_hash}) "
        f"pid {process.pid} node abc\n")
    finisher.start()
    try:
        mark_interrupted(inv)
    finally:
        finisher.join()
        process.wait(timeout=60)
    done, stopped = inv.outcomes[trials[0].trial_id], inv.outcomes[trials[1].trial_id]
    assert (done.status, done.run_id, done.metrics.get(schema.TEST_PPL)) == ("finished", late, 150.25)
    assert inv.progress.rows[trials[0].trial_id].status == "finished"
    assert stopped.status == schema.STATUS_INTERRUPTED
    assert store["client"].get_run(cut).info.status == "KILLED"
    assert store["client"].get_run(late).data.tags[schema.STATUS] == "finished"


def test_the_store_check_counts_a_stray_running_run_of_a_config_as_a_defect(store, runs_dir):
    from cemlab.sweeps.stages.invocation import TrialOutcome
    from cemlab.sweeps.stages.record import _check_against_store
    from cemlab.sweeps.sweepfile.load import load_sweep

    trials = load_sweep("attention_replacement").expand("smoke")[:2]
    inv = _invocation(store, runs_dir, trials)
    orphan = _trial_run(store, inv, trials[0], None)           # an earlier attempt's run, never finished
    good = [_trial_run(store, inv, t, "finished") for t in trials]
    outcomes = [TrialOutcome(t, "finished", r) for t, r in zip(trials, good)]
    _check_against_store(inv, outcomes)
    assert outcomes[0].status == pg.MISSING and orphan in outcomes[0].error
    assert outcomes[1].status == "finished" and outcomes[1].error is None


@pytest.mark.slow
def test_a_run_creation_that_fails_leaves_one_run_per_config(store, runs_dir, monkeypatch, tmp_path):
    """The first attempt fails inside run creation (after MLflow made the run, as the environment
    race of MLflow's telemetry thread did); the retried attempt finishes, and the store holds
    exactly one active run of the config."""
    from cemlab.config import load_run_config
    from cemlab.tracking.store import find_runs_by_hash
    from cemlab.train import train

    cfg = load_run_config(REPO / "configs" / "default.yaml", [f"data.cache_dir={tmp_path / 'cache'}",
                                                              "tracking.experiment=cemlab/test", *SMALL])
    real = mr.log_config

    def broken(client, run_id, c):
        raise KeyError("_MLFLOW_TELEMETRY_SESSION_ID")

    monkeypatch.setattr(mr, "log_config", broken)
    with pytest.raises(KeyError):
        train(cfg, tracking_uri=store["uri"], resume=True)
    monkeypatch.setattr(mr, "log_config", real)
    result = train(cfg, tracking_uri=store["uri"], resume=True)
    assert result.status == "finished"
    runs = next(iter(find_runs_by_hash([result.config_hash], store["client"]).values()))
    assert [r.info.run_id for r in runs] == [result.run_id], [(r.info.run_id, r.info.status) for r in runs]


def test_the_resume_command_is_the_command_line_with_its_overrides_and_flags(monkeypatch):
    """Parsed the way ``cemlab`` parses it (flags and overrides in any order), the printed command
    gives back the same arguments; the Ctrl-C line prints it unmangled by rich's markup."""
    import io
    import shlex

    from rich.console import Console

    from cemlab.cli import build_parser, parse
    from cemlab.sweeps.cli.sweep import resume_command
    from cemlab.sweeps.stages.invocation import SweepResult

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO / "sweeps"))
    argv = ["sweep", "attention_replacement", "--plain", "train.tokens=65536", "--scale", "smoke", "--cpus", "2",
            "model.attention=[cem]", "seed=[0,1]", "--interval", "2.5", "--cache-dir", "/tmp/a b"]
    args = parse(build_parser(), argv)
    command = resume_command(args)
    again = parse(build_parser(), shlex.split(command)[1:])
    assert {k: v for k, v in vars(again).items()} == {k: v for k, v in vars(args).items()}
    assert command.startswith("cemlab sweep attention_replacement --scale smoke train.tokens=65536 ")
    out = io.StringIO()
    result = SweepResult("attention_replacement", "smoke", "sqlite:///x.db", "1", "p", False, [], interrupted=True,
                         command=command)
    pg.print_end(result, Console(file=out, width=400, highlight=False))
    assert f"to resume, run: {command}\n" in out.getvalue()   # the command whole, on the line's end


def _hold_lock(path: Path) -> subprocess.Popen:
    """Another process that holds ``path``'s flock until it is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; fh = open(sys.argv[1], 'a'); "
                               "fcntl.flock(fh, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_the_runs_a_dead_driver_left_running_are_marked_interrupted_on_request(store, runs_dir, monkeypatch, capsys):
    """``cemlab sweep NAME --mark-interrupted`` after a driver died without marking its runs (under
    SLURM, Ray ends a driver whose raylet got the job's SIGTERM first): its parent and the trial runs
    under it that no process trains any more become interrupted; a run whose trial lock a live
    process holds, a finished run and another parent's run are left as they are; while a driver
    of the sweep runs, it is refused and marks nothing."""
    import json

    from cemlab.cli import main
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.train.checkpoint import checkpoint_folder

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    client = store["client"]
    trials = load_sweep("attention_replacement").expand("smoke")[:2]
    inv = _invocation(store, runs_dir, trials)
    cut, training, done = (_trial_run(store, inv, t, s) for t, s in zip(trials * 2, (None, None, "finished")))
    other = _invocation(store, runs_dir / "other", trials[:1])
    elsewhere = _trial_run(store, other, trials[0], None)
    log_dir = runs_dir / "logs" / "attention_replacement-smoke"
    log_dir.mkdir(parents=True)
    (log_dir / "driver.json").write_text(json.dumps({"pid": 4194305, "parent_run_id": inv.parent_run_id}))
    status = lambda run_id: (client.get_run(run_id).info.status, client.get_run(run_id).data.tags.get(schema.STATUS))
    before = {r: status(r) for r in (inv.parent_run_id, cut, training, done, elsewhere)}
    command = ["sweep", "attention_replacement", "--scale", "smoke", "--mark-interrupted"]

    driver = _hold_lock(log_dir / "driver.lock")  # a driver of this sweep runs: refused
    try:
        assert main(command) == 2
    finally:
        driver.kill(), driver.wait()
    assert "is running" in capsys.readouterr().err
    assert {r: status(r) for r in before} == before

    trainer = _hold_lock(checkpoint_folder(runs_dir, trials[1].config_hash) / "sweep.lock")
    try:
        assert main(command) == 0
    finally:
        trainer.kill(), trainer.wait()
    out = capsys.readouterr().out
    assert "2 run(s) left running marked interrupted" in out and cut in out and inv.parent_run_id in out
    interrupted = ("KILLED", schema.STATUS_INTERRUPTED)
    assert status(cut) == status(inv.parent_run_id) == interrupted
    assert status(training) == ("RUNNING", schema.STATUS_RUNNING)
    assert status(done) == before[done] and status(elsewhere) == before[elsewhere]
    assert not (log_dir / "driver.json").exists()  # settled: no driver named any more
    assert main(command) == 0 and "0 run(s)" in capsys.readouterr().out
