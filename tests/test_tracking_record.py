"""The tracking store is the record: real MLflow servers on 127.0.0.1, real sweeps, real files.

- Moving a runs folder to another server, and deleting a finished run in the store: the next
  sweep records the result kept locally (params, tags, config, metric history) into the store in
  use, without training, and says "recorded", never "finished"; ``cemlab report`` against the
  new server then finds every trial.
- A server killed mid-sweep: the sweep names it, stops (no retry, no queued trial started),
  writes ``summary.json`` and exits with code 4 within 30 s, printing the exact command that
  resumes it (overrides and flags included); once the server is back on the same store, that
  command finishes every trial once. All along, the sweep's processes listen on loopback only.
- Two identical sweeps at once: one parent holds the runs; the other says it waited and names it.
- Four ``cemlab train`` at once on a fresh embedded sqlite store: all succeed, four runs.
- A run's name describes the resolved model; ``cemlab report`` names the scales that have runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cemlab.tracking import schema
from mlflow_support import sqlite_server
from ray_support import listeners, non_loopback, private_ray_tmpdir, stale_ray_cluster_file
from sweep_support import local_sweeps, run, trial_state

REPO = Path(__file__).resolve().parents[1]


def _children(client, parent_run_id: str) -> list:
    ids = [e.experiment_id for e in client.search_experiments()]
    return [r for r in client.search_runs(ids, f"tags.`{schema.PARENT_RUN_ID}` = '{parent_run_id}'", max_results=1000)]


def _trial_runs(client) -> list:
    ids = [e.experiment_id for e in client.search_experiments()]
    return [r for r in client.search_runs(ids, max_results=1000) if r.data.tags.get(schema.ROLE) == "trial"]


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.fixture
def record_env(runs_dir, tmp_path, monkeypatch, ray_local):  # noqa: F811
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO / "sweeps"))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    return runs_dir


# ---------------------------------------------------------------------------------------------
# Finding 3: the server dies mid-sweep
# ---------------------------------------------------------------------------------------------

# A short trial and two long ones, two at a time: the server dies while the long ones train.
KILLED = """\
figure: "test: store killed"
axes: {size: [86m], lr: [2.0e-3]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: cem-attn long, set: {model.attention: cem, train.tokens: 262144}}
  - {group: cem-mlp, label: cem-mlp long, set: {model.mlp: cem, train.tokens: 262144}}
  - {group: llama, label: llama queued, set: {train.tokens: 8192}}
"""
SHORT = "86m__llama__lr2e-3__s0"
QUEUED = "86m__llama_queued__lr2e-3__s0"
#: Overrides and flags the printed resume command must carry (no-ops here, but they must be there).
OVERRIDES = ["lr=[2.0e-3]", "seed=[0]"]


def _attempts(log_dir: Path) -> dict[str, int]:
    """Trial id -> attempts started (each attempt begins its log with a ``--- <time> trial`` line)."""
    return {log.stem: len(re.findall(r"^--- \S+ \S+ trial ", log.read_text(errors="replace"), re.M))
            for log in log_dir.glob("*.log")}


def _sweep_cmd(name: str, cache: Path, cpus: int = 2) -> list[str]:
    return [sys.executable, "-m", "cemlab.cli", "sweep", name, "--scale", "smoke", "--cpus", str(cpus),
            "--cache-dir", str(cache), "--no-report", "--plain", "--interval", "5"]


@pytest.mark.slow
def test_a_store_killed_mid_sweep_is_named_fast_and_a_rerun_finishes(runs_dir, tmp_path, data_cache):  # noqa: F811
    from mlflow.tracking import MlflowClient

    sweeps = local_sweeps(tmp_path, killed=KILLED)
    env = {**os.environ, "CEMLAB_RUNS_DIR": str(runs_dir), "CEMLAB_SWEEPS_DIR": str(sweeps),
           "CEMLAB_REPORTS_DIR": str(tmp_path / "reports")}
    env.pop("RAY_ADDRESS", None)
    log_dir = runs_dir / "logs" / "killed-smoke"
    cmd = _sweep_cmd("killed", data_cache)
    cmd[7:7] = OVERRIDES   # after the scale
    with sqlite_server(tmp_path / "store") as server, private_ray_tmpdir() as ray_tmp:
        env["MLFLOW_TRACKING_URI"], env["RAY_TMPDIR"] = server.url, str(ray_tmp)
        stale_ray_cluster_file(ray_tmp)   # a dead `ray start` head: the sweep must start its own Ray
        driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen: list = []   # listening sockets of the sweep's process tree (Ray, trials)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and driver.poll() is None:
                seen += listeners(driver.pid)
                if trial_state(runs_dir, log_dir, SHORT).get("status") == "finished":
                    break
                time.sleep(0.2)
            else:
                driver.kill()
                pytest.fail(f"the first trial never finished:\n{driver.communicate()[0]}")
            for _ in range(10):
                seen += listeners(driver.pid)
                time.sleep(0.2)
            dead_url = server.url
            started = {trial for trial, n in _attempts(log_dir).items() if n}
            server.kill()
            killed_at = time.monotonic()
            out, _ = driver.communicate(timeout=180)
            took = time.monotonic() - killed_at
        finally:
            if driver.poll() is None:
                driver.kill()
        print(f"server killed -> sweep exited in {took:.1f}s (exit code {driver.returncode})")
        assert len({port for _, port, _ in seen}) >= 3, "too few listeners seen: the check would measure nothing"
        assert not non_loopback(seen), f"the sweep listens beyond loopback: {sorted(set(non_loopback(seen)))}"
        assert driver.returncode == 4, out
        assert took < 30, out
        assert f"the MLflow store at {dead_url} stopped answering" in out, out
        # Nothing new started once the store was lost: no retry, not the queued trial (its slot comes
        # only when a long trial ends, which here is the stop after the loss). The third trial may take the short
        # one's slot in the seconds between the kill and its detection (seen in CI: its log file
        # appears with no attempt begun), so it is not held to the set seen at the kill.
        attempts = _attempts(log_dir)
        assert QUEUED not in attempts and started <= set(attempts) and SHORT in started, (attempts, started, out)
        assert all(n <= 1 for n in attempts.values()), (attempts, out)
        resume = re.search(r"to resume, run:\s+(\S.*)$", out, re.M)
        assert resume and shlex.split(resume.group(1)) == ["cemlab", *cmd[3:]], out
        assert "Traceback" not in out, out
        summary = json.loads((log_dir / "summary.json").read_text())
        assert dead_url in summary["store_error"] and summary["exit_code"] == 4
        statuses = {t["trial_id"]: t["status"] for t in summary["trials"]}
        assert statuses[SHORT] == "finished"
        assert "interrupted" in statuses.values()

        # The server comes back on the same store (another port); the same command resumes.
        url = server.start()
        env["MLFLOW_TRACKING_URI"] = url
        rerun = subprocess.run([*cmd[:3], *shlex.split(resume.group(1))[1:]], env=env, capture_output=True,
                               text=True, timeout=500)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        client = MlflowClient(url)
        trials = _trial_runs(client)
        by_hash: dict[str, list] = {}
        for r in trials:
            by_hash.setdefault(r.data.tags[schema.CONFIG_HASH], []).append(r)
        assert len(by_hash) == 4 and all(len(v) == 1 for v in by_hash.values()), by_hash
        assert all(r.data.tags[schema.STATUS] == "finished" and r.info.status == "FINISHED" for r in trials)
        again = json.loads((log_dir / "summary.json").read_text())
        assert again["exit_code"] == 0
        assert {t["trial_id"]: t["status"] for t in again["trials"]}[SHORT] == "done"


# ---------------------------------------------------------------------------------------------
# Finding 4: two identical sweeps at once
# ---------------------------------------------------------------------------------------------

#: Trials long enough that the second sweep (a new process: imports, Ray, preflight) reaches them
#: while they train even on a loaded machine; shorter ones may finish first, and it reuses them.
TWICE = """\
figure: "test: twice"
axes: {size: [86m], lr: [1.0e-3, 2.0e-3]}
variants:
  - {group: llama, label: llama}
"""
#: The first sweep's trials stay running at their first report (the fault hook ``hold_s``: asleep, so
#: they cost no CPU) long enough for the second sweep to start and find them running.
HOLD = json.dumps({"*": {"hold_s": 40, "at_report": 1}})


@pytest.mark.slow
def test_two_identical_sweeps_at_once_one_trains_the_other_says_it_waited(runs_dir, tmp_path,
                                                                           data_cache):  # noqa: F811
    from mlflow.tracking import MlflowClient

    sweeps = local_sweeps(tmp_path, twice=TWICE)
    env = {**os.environ, "CEMLAB_RUNS_DIR": str(runs_dir), "CEMLAB_SWEEPS_DIR": str(sweeps),
           "CEMLAB_REPORTS_DIR": str(tmp_path / "reports")}
    log_dir = runs_dir / "logs" / "twice-smoke"
    ids = ["86m__llama__lr1e-3__s0", "86m__llama__lr2e-3__s0"]
    with sqlite_server(tmp_path / "store") as server:
        env["MLFLOW_TRACKING_URI"] = server.url
        first = subprocess.Popen(_sweep_cmd("twice", data_cache), env={**env, "CEMLAB_SWEEP_FAULTS": HOLD},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        second = None
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and first.poll() is None:   # both trials of the first train
                if all(trial_state(runs_dir, log_dir, t).get("status") == "running" for t in ids):
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"the first sweep's trials never both ran:\n{first.communicate()[0]}")
            second = subprocess.Popen(_sweep_cmd("twice", data_cache, cpus=2), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
            out1, _ = first.communicate(timeout=500)
            out2, _ = second.communicate(timeout=500)
        finally:
            for p in (first, second):
                if p is not None and p.poll() is None:
                    p.kill()
        assert first.returncode == 0 and second.returncode == 0, out1 + out2
        client = MlflowClient(server.url)
        exp = client.get_experiment_by_name("cemlab/twice")
        parents = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(schema.ROLE) == "sweep"]
        assert len(parents) == 2
        holders = {p.info.run_id: len(_children(client, p.info.run_id)) for p in parents}
        assert sorted(holders.values()) == [0, 2], holders
        first_parent = next(pid for pid, n in holders.items() if n == 2)
        other_parent = next(pid for pid, n in holders.items() if n == 0)
        s1 = json.loads((log_dir / f"summary-{first_parent}.json").read_text())
        s2 = json.loads((log_dir / f"summary-{other_parent}.json").read_text())
        assert s1["parent_run_id"] == first_parent and s1["counts"] == {"finished": 2}
        assert s2["parent_run_id"] == other_parent
        assert set(s2["counts"]) <= {"waited", "reused"} and s2["counts"].get("waited"), s2["counts"]
        assert s2["waited_on_parent_runs"] == [first_parent]
        assert first_parent in out2
        other = client.get_run(other_parent)
        assert json.loads(other.data.tags["cemlab.trial_counts"]) == s2["counts"]
        assert other.data.tags[schema.CONCURRENT_WITH] == first_parent


# ---------------------------------------------------------------------------------------------
# Finding 5: four runs at once on a fresh embedded store
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_four_trains_at_once_on_a_fresh_embedded_store(tmp_path):
    from mlflow.tracking import MlflowClient

    from cemlab.config import load_run_config
    from cemlab.models.model import build_model

    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["CEMLAB_RUNS_DIR"] = str(runs)
    cache = tmp_path / "cache"
    overrides = ["train.tokens=4096", "model.d_model=96", "model.n_layers=3", "data.max_chars=300000",
                 "model.vocab_size=320", f"data.cache_dir={cache}", "train.num_threads=1"]
    procs = [subprocess.Popen([sys.executable, "-m", "cemlab.cli", "train", str(REPO / "configs" / "default.yaml"),
                               *overrides, f"train.seed={i}", "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out) for out, _ in outs]
    client = MlflowClient(f"sqlite:///{runs / 'mlflow' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("cemlab")
    found = client.search_runs([exp.experiment_id])
    assert sorted(r.info.run_id for r in found) == sorted(r["run_id"] for r in results)
    assert all(r.info.status == "FINISHED" for r in found)

    # 6: the name says the model is not the nano preset any more; the parameter count is shown
    cfg = load_run_config(str(REPO / "configs" / "default.yaml"), overrides)
    n_params = sum(p.numel() for p in build_model(cfg.model).parameters())
    for r, (_, err) in zip(results, outs):
        assert r["params"] == n_params
        assert r["run_name"].startswith("llama d96 L3 lr") and "nano" not in r["run_name"]
        assert f"{n_params:,} parameters" in err          # first line and closing line
        assert re.search(rf"cemlab train: llama d96 L3 \S+ s?\d* ?\({n_params:,} parameters\): finished", err), err


# ---------------------------------------------------------------------------------------------
# Findings 1 and 2: a deleted run, then another server
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_deleted_run_and_new_server_get_the_local_results_recorded_not_retrained(record_env, data_cache, tmp_path,
                                                                                monkeypatch, capsys):  # noqa: F811
    from mlflow.tracking import MlflowClient

    from cemlab.cli import main

    runs = record_env
    with sqlite_server(tmp_path / "store-a") as a:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", a.url)
        first = run("attention_replacement", data_cache, report=False)
        assert first.exit_code == 0 and sorted(first.counts()) == ["finished"], first.counts()
        ca = MlflowClient(a.url)
        trained = {r.data.tags[schema.CONFIG_HASH]: r for r in _children(ca, first.parent_run_id)}
        assert len(trained) == 2
        ckpts = {h: (runs / "checkpoints" / h / "last.ckpt").stat().st_mtime_ns for h in trained}
        losses = {h: _history(ca, r.info.run_id, schema.TRAIN_LOSS) for h, r in trained.items()}
        assert all(len(v) > 1 for v in losses.values())

        # 2: delete one finished child in the store (as the MLflow UI does); the sweep again.
        gone_hash, gone = next(iter(trained.items()))
        ca.delete_run(gone.info.run_id)
        second = run("attention_replacement", data_cache, report=False)
        assert second.exit_code == 0
        status = {o.trial.config_hash: o.status for o in second.outcomes}
        assert status == {gone_hash: "recorded", **{h: "reused" for h in trained if h != gone_hash}}
        active = {}
        for r in _trial_runs(ca):
            active.setdefault(r.data.tags[schema.CONFIG_HASH], []).append(r)
        assert sorted(active) == sorted(trained) and all(len(v) == 1 for v in active.values())
        again = active[gone_hash][0]
        assert again.info.run_id != gone.info.run_id and again.info.status == "FINISHED"
        assert again.data.tags[schema.STATUS] == "finished"
        assert again.data.tags[schema.PARENT_RUN_ID] == second.parent_run_id
        assert again.data.tags[schema.RECORDED_FROM_RUN] == gone.info.run_id
        assert again.data.tags[schema.RECORDED_FROM_URI] == a.url
        assert _system_tags(again) == _system_tags(gone)   # user, source, git, description as the original
        summary = json.loads((runs / "logs" / "attention_replacement-smoke" / "summary.json").read_text())
        assert summary["parent_run_id"] == second.parent_run_id
        assert gone.info.run_id not in json.dumps(summary["trials"])
        log_text = (runs / "logs" / "attention_replacement-smoke" / f"{second.outcomes[0].trial.trial_id}.log")
        assert any("recorded from local state" in p.read_text()
                   for p in (runs / "logs" / "attention_replacement-smoke").glob("*.log")), log_text

    # 1: the same runs folder against a fresh server B: both trials are recorded, none trained.
    with sqlite_server(tmp_path / "store-b") as b:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", b.url)
        third = run("attention_replacement", data_cache, report=False)
        assert third.exit_code == 0
        assert sorted(o.status for o in third.outcomes) == ["recorded", "recorded"]
        assert third.counts() == {"recorded": 2} and third.counts_checked
        cb = MlflowClient(b.url)
        moved = {r.data.tags[schema.CONFIG_HASH]: r for r in _children(cb, third.parent_run_id)}
        assert sorted(moved) == sorted(trained)
        for h, r in moved.items():
            assert r.info.status == "FINISHED" and r.data.tags[schema.STATUS] == "finished"
            original = trained[h]
            # the same test metrics and the same training history, step by step, as on A
            assert r.data.metrics[schema.TEST_PPL] == original.data.metrics[schema.TEST_PPL]
            assert _history(cb, r.info.run_id, schema.TRAIN_LOSS) == losses[h]
            assert r.data.params["model.d_model"] == original.data.params["model.d_model"]
            assert r.data.tags[schema.TRIAL_ID] == original.data.tags[schema.TRIAL_ID]
            assert _system_tags(r) == _system_tags(original)
            assert schema.CONFIG_ARTIFACT in [f.path for f in cb.list_artifacts(r.info.run_id)]
            # no training step ran: the checkpoints are the ones the first sweep wrote
            assert (runs / "checkpoints" / h / "last.ckpt").stat().st_mtime_ns == ckpts[h]

        capsys.readouterr()
        code = main(["report", "attention_replacement", "--scale", "smoke", "--no-log",
                     "--out", str(tmp_path / "reports-b")])
        out = capsys.readouterr().out
        assert code == 0 and "2/2 trials finished" in out, out
        # 7: no runs at the asked scale: the scale that has them is named
        code = main(["report", "attention_replacement", "--scale", "tiny", "--no-log",
                     "--out", str(tmp_path / "reports-b")])
        out = capsys.readouterr().out
        assert code != 0 and "add --scale smoke" in out, out


def _system_tags(run) -> dict[str, str]:
    """A run's MLflow system tags and description (``mlflow.source.*``, ``mlflow.user``,
    ``mlflow.note.content``); the original runs carry all of them."""
    tags = {k: v for k, v in run.data.tags.items()
            if k.startswith("mlflow.source.") or k in ("mlflow.user", "mlflow.note.content")}
    assert {"mlflow.user", "mlflow.source.name", "mlflow.source.type", "mlflow.note.content"} <= set(tags), tags
    return tags


# ---------------------------------------------------------------------------------------------
# Fast checks
# ---------------------------------------------------------------------------------------------


def test_run_name_names_a_preset_only_while_its_dimensions_are_unchanged():
    from cemlab.config import RunConfig
    from cemlab.tracking.mlflow_run import run_name

    def name(**model):
        return run_name(RunConfig(model={"preset": "nano", **model}, train={"lr": 2e-3}))

    assert name() == "llama nano lr2e-3"
    assert name(vocab_size=2048) == "llama nano lr2e-3"          # data settings are not the size
    assert name(d_model=128, n_layers=3) == "llama d128 L3 lr2e-3"
    assert name(d_mlp=200) == "llama mlp200 lr2e-3"
    assert run_name(RunConfig(model={"d_model": 96, "n_layers": 2, "n_heads": 2, "d_mlp": 256})).split()[1:5] == \
        ["d96", "L2", "h2", "mlp256"]


def test_make_report_passes_the_scale():
    out = subprocess.run(["make", "-n", "report", "SWEEP=recursion_ablation", "SCALE=smoke"], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0 and "No rule" in out.stderr:
        pytest.skip("make has no report target here")
    assert re.search(r"report recursion_ablation --scale smoke", out.stdout), out.stdout + out.stderr


def test_short_http_retry_settings_are_set_and_a_users_value_wins(monkeypatch):
    from cemlab.tracking.store import HTTP_SETTINGS, configure_http

    for k in HTTP_SETTINGS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    got = configure_http()
    assert got["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"
    retries, backoff = int(got["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]), int(got["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"])
    # urllib3 sleeps 0, then backoff * 2**(n-1) between tries: a refused connection gives up in seconds
    waits = sum(backoff * 2 ** (n - 1) for n in range(2, retries + 1)) + retries * 0.5
    assert waits < 10
