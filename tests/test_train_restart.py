"""``cemlab train`` never deletes a checkpoint or a finished run's files unless told to.

Running the same config again continues an interrupted run from its checkpoint in the same MLflow
run, or reports the finished one without training; ``--restart`` trains anew in a new MLflow run
and keeps the old checkpoint and state, moved aside. Real training (a nano model, 8 steps), a real
sqlite MLflow store, the command's own ``main``.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from train_support import DEFAULT_YAML, env  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_rerun_resumes_or_reports_finished_and_restart_keeps_the_old_files(env, runs_dir, tmp_path, capsys,
                                                                          monkeypatch):
    from cemlab.cli import main
    from cemlab.train import callbacks

    ck = tmp_path / "ck"
    args = ["train", str(DEFAULT_YAML), f"data.cache_dir={env['cache']}", "train.num_threads=1",
            "train.tokens=32768", "train.val_interval=4", "train.checkpoint_every=4", "train.val_batches=2",
            "train.test_batches=2", f"train.checkpoint_dir={ck}", "--tracking-uri", env["uri"], "--json"]
    client = env["client"]
    exp = client.get_experiment_by_name("cemlab").experiment_id

    # 1. Interrupted after the checkpoint of step 4 of 8 (Ctrl-C in the middle of the run).
    original = callbacks.RunCallback.checkpoint

    def checkpoint_then_interrupt(self, trainer, step):
        original(self, trainer, step)
        raise KeyboardInterrupt

    monkeypatch.setattr(callbacks.RunCallback, "checkpoint", checkpoint_then_interrupt)
    assert main(args) == 130
    monkeypatch.setattr(callbacks.RunCallback, "checkpoint", original)
    capsys.readouterr()
    state = json.loads((ck / "state.json").read_text())
    assert state["step"] == 4 and "result" not in state
    first_run = state["run_id"]

    # 2. The same command again, no flag: continues from step 4 in the same MLflow run.
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["resumed"] is True and result["run_id"] == first_run and result["steps"] == 8
    assert result["outcome"] == "trained"
    assert client.get_run(first_run).data.tags["cemlab.status"] == "finished"
    finished_ckpt = digest(ck / "last.ckpt")
    finished_state = (ck / "state.json").read_text()
    n_runs = len(client.search_runs([exp]))

    # 3. Again: finished, so nothing is trained, nothing is deleted, no new MLflow run.
    assert main(args) == 0
    out = capsys.readouterr()
    again = json.loads(out.out)
    assert again["run_id"] == first_run and again["metrics"] == result["metrics"]
    assert again["outcome"] == "reused" and "already has a result" in out.err and "--restart" in out.err
    assert digest(ck / "last.ckpt") == finished_ckpt and (ck / "state.json").read_text() == finished_state
    assert len(client.search_runs([exp])) == n_runs

    # 4. --restart: a new MLflow run; the old checkpoint and state are kept, moved aside.
    assert main([*args, "--restart"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["run_id"] != first_run and fresh["resumed"] is False and fresh["steps"] == 8
    (aside,) = [p for p in ck.iterdir() if p.is_dir() and p.name.startswith("replaced-")]
    assert digest(aside / "last.ckpt") == finished_ckpt
    assert (aside / "state.json").read_text() == finished_state
    assert json.loads((ck / "state.json").read_text())["run_id"] == fresh["run_id"]
    assert client.get_run(first_run).info.lifecycle_stage == "active"   # the old run is still there
    # Training the same config from scratch twice computes the same thing.
    assert fresh["metrics"]["test/ppl"] == pytest.approx(result["metrics"]["test/ppl"], rel=1e-5)

    # --resume and --restart together contradict each other.
    assert main([*args, "--resume", "--restart"]) == 2
    assert "--restart" in capsys.readouterr().err


def _args(env, ck, seed: int, *extra: str) -> list[str]:
    """The command of a nano run (8 steps, a checkpoint every 4); each test its own seed, so its own
    config hash in the module's shared store."""
    return ["train", str(DEFAULT_YAML), f"data.cache_dir={env['cache']}", "train.num_threads=1", f"train.seed={seed}",
            "train.tokens=32768", "train.val_interval=4", "train.checkpoint_every=4", "train.val_batches=2",
            "train.test_batches=2", f"train.checkpoint_dir={ck}", "--tracking-uri", env["uri"], "--json", *extra]


def _interrupt_after_first_checkpoint(monkeypatch):
    """Ctrl-C right after the checkpoint of step 4 of 8; returns the undo."""
    from cemlab.train import callbacks

    original = callbacks.RunCallback.checkpoint

    def checkpoint_then_interrupt(self, trainer, step):
        original(self, trainer, step)
        raise KeyboardInterrupt

    monkeypatch.setattr(callbacks.RunCallback, "checkpoint", checkpoint_then_interrupt)
    return lambda: monkeypatch.setattr(callbacks.RunCallback, "checkpoint", original)


def test_a_truncated_checkpoint_is_named_with_the_ways_on_and_nothing_is_deleted(env, runs_dir, tmp_path, capsys,
                                                                                  monkeypatch):
    from cemlab.cli import main

    ck = tmp_path / "ck"
    undo = _interrupt_after_first_checkpoint(monkeypatch)
    assert main(_args(env, ck, 11)) == 130
    undo()
    whole = (ck / "last.ckpt").read_bytes()
    # an earlier checkpoint of the config, kept aside by a --restart, is offered as the second way on
    (ck / "replaced-20260101T000000Z").mkdir()
    (ck / "replaced-20260101T000000Z" / "last.ckpt").write_bytes(whole)
    (ck / "last.ckpt").write_bytes(whole[: len(whole) // 2])
    state = (ck / "state.json").read_text()
    capsys.readouterr()

    assert main(_args(env, ck, 11)) == 2
    err = capsys.readouterr().err
    assert f"{ck / 'last.ckpt'} ({len(whole) // 2:,} bytes) cannot be read" in err, err
    assert "--restart" in err and str(ck / "replaced-20260101T000000Z" / "last.ckpt") in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    # nothing deleted, nothing changed
    assert (ck / "last.ckpt").read_bytes() == whole[: len(whole) // 2] and (ck / "state.json").read_text() == state
    assert sorted(p.name for p in ck.iterdir()) == ["last.ckpt", "metrics.jsonl", "replaced-20260101T000000Z",
                                                    "state.json"]
    # one line: a sweep trial's outcome (the last line of its error) says all of it
    from cemlab.train.checkpoint import CheckpointError, resumable_checkpoint

    with pytest.raises(CheckpointError) as info:
        resumable_checkpoint(ck)
    assert "\n" not in str(info.value) and "--restart" in str(info.value)
    # a flipped byte inside the archive is caught too (the CRC of its member)
    corrupt = bytearray(whole)
    corrupt[len(whole) // 3] ^= 0xFF
    (ck / "last.ckpt").write_bytes(bytes(corrupt))
    assert main(_args(env, ck, 11)) == 2
    assert "cannot be read" in capsys.readouterr().err


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs mounted at a fresh folder (root only), unmounted after the test."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()

    def mount(size: int, remount: bool = False) -> None:
        opts = f"{'remount,' if remount else ''}size={size}"
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], check=True)

    yield mnt, mount
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_disk_removes_the_partial_checkpoint_exits_5_and_the_rerun_resumes(env, runs_dir, tmp_path, capsys,
                                                                                small_tmpfs, monkeypatch):
    """A tmpfs with room for one checkpoint but not for its replacement beside it: the save of step
    8 fails for lack of space."""
    from cemlab.cli import main
    from cemlab.train.checkpoint import resumable_checkpoint

    mnt, mount = small_tmpfs
    probe = tmp_path / "probe"  # the size of this config's checkpoint, measured on a normal disk
    undo = _interrupt_after_first_checkpoint(monkeypatch)
    assert main(_args(env, probe, 12, "--restart")) == 130
    undo()
    size = (probe / "last.ckpt").stat().st_size
    mount(int(size * 1.5))
    ck = mnt / "ck"
    capsys.readouterr()

    assert main(_args(env, ck, 12)) == 5
    err = capsys.readouterr().err
    assert f"no space left in {ck} to write last.ckpt: it needs about {size / 2**20:.1f} MiB" in err, err
    assert "Traceback" not in err and "resumes from the last checkpoint" in err, err
    assert sorted(p.name for p in ck.iterdir()) == ["last.ckpt", "metrics.jsonl", "state.json"]  # no partial file
    assert json.loads((ck / "state.json").read_text())["step"] == 4
    assert resumable_checkpoint(ck) == ck / "last.ckpt"  # the previous checkpoint is whole

    mount(size * 4, remount=True)  # space freed: the same command resumes from step 4
    assert main(_args(env, ck, 12)) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["resumed"] is True and result["steps"] == 8 and result["status"] == "finished"
