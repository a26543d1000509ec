"""The SLURM launcher: the sbatch text ``cemlab slurm`` writes, and its Ray part run for real.

The Ray part is run as the job would run it, minus SLURM: the generated script is sourced (which
only defines its functions), ``ray_node 0`` and ``ray_node 1`` start two Ray nodes on 127.0.0.1
(two ``ray start --block`` processes on free ports: the head and a worker that joins it), then
``wait_for_nodes`` and ``run_sweep`` run a one-trial smoke sweep against a real MLflow server;
running ``run_sweep`` again, as a requeued job does, finds the trial's result and trains nothing.

The whole script also runs under a real one-node SLURM (``slurm_support.slurm``, one controller for
the module): ``sbatch`` on a runs folder that does not exist yet, beside another Ray, from a shell
exporting other settings; and ``scontrol requeue`` mid-trial: the driver stops cleanly although
SLURM's SIGTERM ends the job's Ray with it (runs marked interrupted), and the requeued job resumes
the trial in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cemlab.sweeps.slurm import SlurmJob, render
from mlflow_support import mlflow_server, sqlite_server
from pg_support import free_port
from ray_support import NO_DRAIN
from slurm_support import slurm  # noqa: F401  (pytest fixture)

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


def job(**kw) -> SlurmJob:
    base = dict(sweep="recursion_ablation", scale="paper", nodes=4, gpus_per_node=8, cpus_per_node=32,
                mlflow="http://mlflow.internal:5000", runs_dir="/shared/cemlab/runs")
    return SlurmJob(**{**base, **kw})


def sbatch_options(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --"):].partition("=")
            out[key] = value
    return out


def test_the_sbatch_text(tmp_path):
    text = render(job(apptainer="/shared/cemlab.sif", partition="gpu"))
    opts = sbatch_options(text)
    assert opts["nodes"] == "4" and opts["gpus-per-node"] == "8" and opts["cpus-per-task"] == "32"
    assert opts["ntasks-per-node"] == "1" and opts["partition"] == "gpu" and opts["signal"] == "B:USR1@300"
    assert "requeue" in opts and opts["output"] == "/shared/cemlab/runs/slurm/%x-%j.out"
    # what `cemlab slurm` was told wins over the submitting shell's environment
    assert "export MLFLOW_TRACKING_URI=http://mlflow.internal:5000\n" in text
    assert "export CEMLAB_RUNS_DIR=/shared/cemlab/runs\n" in text
    assert "PASSWORD=" not in text  # credentials come from the submitting environment only
    assert 'CEMLAB_RUN="${CEMLAB_RUN-apptainer exec --nv --bind /shared/cemlab/runs /shared/cemlab.sif}"' in text
    assert "SWEEP_ARGS=(recursion_ablation --scale paper --plain)" in text
    assert "cemlab data prepare recursion_ablation --scale paper" in text
    # the job's own Ray: its folder per job id, its ports, no `ray symmetric-run` (refuses beside another
    # Ray) and no bare `ray stop` (ends every Ray of the user on the node)
    assert 'CEMLAB_RAY_TMP="${CEMLAB_RAY_TMP:-/tmp/cemlab-ray-${SLURM_JOB_ID:-$$}}"' in text
    assert '--temp-dir="$CEMLAB_RAY_TMP/"' in text and "symmetric-run" not in text and "ray stop" not in text
    assert "ray start --head" in text and "--dashboard-host=127.0.0.1" in text
    assert 'RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"' in text and "RAY_AUTH_TOKEN=$(head -c 32 /dev/urandom" in text
    assert text.index("cemlab data prepare") < text.index("ray_node); ray_node")  # data before Ray holds the GPUs
    enroot = render(job(enroot="registry#cemlab:latest"))
    assert "--container-image=registry#cemlab:latest --container-mounts=/shared/cemlab/runs:/shared/cemlab/runs" in enroot
    assert "gpus-per-node" not in sbatch_options(render(job(gpus_per_node=0)))
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    checker = shutil.which("shellcheck")
    if checker:
        r = subprocess.run([checker, "-S", "warning", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout
    # bad settings are refused before the queue
    for bad, match in [(dict(mlflow="http://127.0.0.1:5000"), "loopback"), (dict(mlflow="http://localhost"), "loopback"),
                       (dict(mlflow="runs/mlflow"), "URL"), (dict(runs_dir="runs"), "absolute"),
                       (dict(runs_dir="/a b"), "spaces"), (dict(apptainer="a.sif", enroot="b"), "one container")]:
        with pytest.raises(ValueError, match=match):
            render(job(**bad))
    # one node: a loopback server is fine, with a note; a name that merely contains "localhost" is no loopback
    one = job(nodes=1, gpus_per_node=0, mlflow="http://127.0.0.2:5000")
    assert "export MLFLOW_TRACKING_URI=http://127.0.0.2:5000" in render(one) and "one-node" in one.notes()[0]
    assert job(mlflow="http://localhost-proxy.cluster:5000").notes() == []


@pytest.mark.parametrize("hangs", [True, False])
def test_a_driver_stuck_in_its_stop_is_killed_so_that_the_script_can_still_mark_its_runs(tmp_path, hangs):
    """After SLURM's SIGTERM the script's run_sweep waits CEMLAB_DRIVER_STOP_S for the driver's clean
    stop; a driver still there then (its Ray shutdown waiting on a head that is gone) is killed, so that
    main marks what it left running before SLURM's SIGKILL. A driver that stops in time keeps its code."""
    script = tmp_path / "job.sbatch"
    script.write_text(render(job(nodes=1, gpus_per_node=0, mlflow="http://127.0.0.2:5000")))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cemlab").write_text(f'#!/bin/bash\ntrap \'{"" if hangs else "exit 3"}\' TERM\n'
                                 f'echo $$ > {tmp_path}/driver.pid\nwhile :; do sleep 0.1; done\n')
    (fake / "cemlab").chmod(0o755)
    body = (f"source {script}; STOPPED_BY=''; STOP_AT=0; CEMLAB_DRIVER_STOP_S=2; HEAD_IP=127.0.0.1; "
            f"trap 'stop_sweep TERM' TERM; run_sweep; echo rc=$?")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "CEMLAB_RUN": ""}
    proc = subprocess.Popen(["bash", "-c", body], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "driver.pid").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)   # as SLURM signals every process of the job
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:   # the script and the fake driver, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    pid = int((tmp_path / "driver.pid").read_text())
    assert not Path(f"/proc/{pid}").exists()
    if hangs:
        assert "the driver did not end within 2 s of the TERM; killing it" in err and "rc=137" in out, (out, err)
        assert 2 <= took < 10, took
    else:
        assert "did not end" not in err and "rc=3" in out and took < 2, (out, err, took)


def test_cli_checks_the_sweep_and_the_gpus(tmp_path, capsys):
    from cemlab.cli import main

    common = ["--mlflow", "http://mlflow.internal:5000", "--runs-dir", "/shared/runs"]
    assert main(["slurm", "recursion_ablation", "--nodes", "1", "--gpus-per-node", "4", *common]) == 2
    assert "needs 8 GPUs" in capsys.readouterr().err
    assert main(["slurm", "no_such_sweep", *common]) == 2
    out = tmp_path / "j.sbatch"
    runs = tmp_path / "fresh" / "runs"
    common = ["--mlflow", "http://mlflow.internal:5000", "--runs-dir", str(runs)]
    assert main(["slurm", "recursion_ablation", "--nodes", "2", *common, "-o", str(out)]) == 0
    assert sbatch_options(out.read_text())["nodes"] == "2" and os.access(out, os.X_OK)
    assert (runs / "slurm").is_dir()  # SLURM opens the job's log there before the script runs
    capsys.readouterr()
    local = ["--mlflow", "http://127.0.0.1:5000", "--runs-dir", str(runs), "--gpus-per-node", "0", "-o", str(out)]
    assert main(["slurm", "recursion_ablation", "--scale", "smoke", "--nodes", "1", *local]) == 0
    assert "loopback address: valid for a one-node job only" in capsys.readouterr().err
    assert main(["slurm", "recursion_ablation", "--scale", "smoke", "--nodes", "2", *local]) == 2
    assert "--nodes 1 only" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["slurm", "recursion_ablation", "--nodes", "2", "--mlflow", "http://m:5000",
                 "--runs-dir", str(tmp_path / "file" / "runs")]) == 2
    assert "cannot create the job's log folder" in capsys.readouterr().err


ONE_TRIAL = """\
figure: "test: slurm"
axes: {size: [86m], lr: [1.0e-3]}
variants:
  - {group: llama, label: llama}
"""


@contextlib.contextmanager
def started(cmd: str, env: dict, log: Path):
    with open(log, "ab") as fh:
        proc = subprocess.Popen(["bash", "-c", cmd], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


#: A raylet that ended itself: a failed check or a fatal signal, as Ray writes them in its logs.
RAYLET_CRASH = re.compile(r"Check failed|\*\*\* SIG[A-Z]+ received|StackTrace Information|\[[^\]]* C \d+ \d+\]")


def raylet_crash(ray_tmps: list[str]) -> str:
    """The first line of a raylet log under these Ray folders that says the raylet crashed, or ""."""
    for d in ray_tmps:
        for log in sorted(Path(d).glob("session_*/logs/raylet*")):
            for line in log.read_text(errors="replace").splitlines():
                if RAYLET_CRASH.search(line):
                    return f"{log.relative_to(d)}: {line.strip()[:300]}"
    return ""


@pytest.mark.slow
def test_the_scripts_ray_part_runs_a_sweep_on_two_local_nodes_and_a_requeue_resumes(tmp_path):
    """Known, not yet diagnosed: once (2026-11-23), after the script's nodes got their own folders and
    ports, a node's raylet crashed while starting (NodeManager) with both nodes on one machine; it
    passed 4 runs of 4 since (3 beside other sweep tests). A failure with a raylet crash in the nodes'
    Ray logs is reported as that known failure (xfail, with the line); any other fails."""
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    shutil.copy(REPO_SWEEPS / "scales.yaml", sweeps / "scales.yaml")
    (sweeps / "one.yaml").write_text(ONE_TRIAL)
    runs = tmp_path / "runs"
    script = tmp_path / "job.sbatch"
    (tmp_path / "mlflow").mkdir()
    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}", tmp_path / "mlflow",
                       tmp_path / "mlflow" / "server.log") as url:
        # one node for `cemlab slurm` (the server is on loopback); the test runs two as CEMLAB_NODES
        script.write_text(render(SlurmJob(sweep="one", scale="smoke", nodes=1, gpus_per_node=0, cpus_per_node=1,
                                          mlflow=url, runs_dir=str(runs))))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "CEMLAB_"))}
        env.update({"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "HEAD_IP": "127.0.0.1",
                    "RAY_PORT": str(port), "CEMLAB_RUN": "", "CEMLAB_NODE_RUN": "", "CEMLAB_DASHBOARD": "false",
                    "CEMLAB_SWEEPS_DIR": str(sweeps), "CEMLAB_REPORTS_DIR": str(tmp_path / "reports"),
                    "RAY_USAGE_STATS_ENABLED": "0", "CEMLAB_CPUS": "1", "CEMLAB_NODES": "2",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})  # as main() exports them

        # Each "node" has its own Ray folder, as each host has its own /tmp (short: Ray's socket paths
        # have a length limit); the script picks the nodes' other ports itself.
        ray_tmps = [tempfile.mkdtemp(prefix="ray", dir="/tmp") for _ in range(2)]

        def node_env(rank: int) -> dict:
            return {**env, "NODE_IP": "127.0.0.1", "CEMLAB_RAY_TMP": ray_tmps[rank]}

        src = f"source {script}"
        try:
            with started(f"{src}; ray_node 0", node_env(0), tmp_path / "head.log"), \
                    started(f"{src}; ray_node 1", node_env(1), tmp_path / "worker.log"):
                first = subprocess.run(["bash", "-c", f"{src}; wait_for_nodes 180 && run_sweep"], env=env,
                                       capture_output=True, text=True, timeout=600)
                logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
                assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:] + logs[-3000:]
                assert "ray: 2 node(s) up" in first.stdout
                summary = json.loads((runs / "logs" / "one-smoke" / "summary.json").read_text())
                assert summary["counts"] == {"finished": 1}
                # the requeued job runs the same script: the sweep finds its trial's result in MLflow and
                # does not train it again ("reused": the first invocation had finished; an interrupted one
                # is reopened and its trials are "done" or resumed from their checkpoints, test_sweep_run_resume)
                again = subprocess.run(["bash", "-c", f"{src}; wait_for_nodes 60 && run_sweep"], env=env,
                                       capture_output=True, text=True, timeout=600)
                assert again.returncode == 0, again.stderr[-3000:]
                summary = json.loads((runs / "logs" / "one-smoke" / "summary.json").read_text())
                assert summary["counts"] == {"reused": 1}
        except AssertionError:
            crash = raylet_crash(ray_tmps)
            if crash:
                pytest.xfail(f"known, not yet diagnosed: a raylet crashed with two local nodes ({crash})")
            raise
        finally:
            for d in ray_tmps:
                shutil.rmtree(d, ignore_errors=True)


# --- on a real SLURM controller (tests/slurm_support.py): sbatch, scontrol requeue -----------------

SLOW_TRIAL = """\
figure: "test: slurm requeue"
axes: {size: [86m], lr: [1.0e-3]}
base: {train: {tokens: 131072}}
variants:
  - {group: llama, label: llama}
"""


@pytest.fixture(scope="module")
def slurm_site(slurm, tmp_path_factory):
    """The controller, one MLflow server and a sweeps folder for the module's jobs."""
    root = tmp_path_factory.mktemp("slurm-site")
    sweeps = root / "sweeps"
    sweeps.mkdir()
    shutil.copy(REPO_SWEEPS / "scales.yaml", sweeps / "scales.yaml")
    (sweeps / "one.yaml").write_text(ONE_TRIAL)
    (sweeps / "slow.yaml").write_text(SLOW_TRIAL)
    with sqlite_server(root / "mlflow") as server:
        yield slurm, server.url, sweeps, root


def submit(site, sweep: str, runs: Path, shell_env: dict[str, str]) -> tuple[int, Path]:
    """``cemlab slurm`` for ``sweep`` (one node, 2 CPUs, the site's server on loopback), then
    ``sbatch`` from a shell whose environment is ``shell_env`` on top of the test's."""
    from cemlab.cli import main

    cluster, url, sweeps, root = site
    script = root / f"{sweep}.sbatch"
    os.environ["CEMLAB_SWEEPS_DIR"] = str(sweeps)
    try:
        assert main(["slurm", sweep, "--scale", "smoke", "--nodes", "1", "--gpus-per-node", "0",
                     "--cpus-per-node", "2", "--mlflow", url, "--runs-dir", str(runs), "-o", str(script)]) == 0
    finally:
        del os.environ["CEMLAB_SWEEPS_DIR"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "CEMLAB_"))}
    env.update({"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "CEMLAB_SWEEPS_DIR": str(sweeps),
                "CEMLAB_REPORTS_DIR": str(root / "reports"), "RAY_USAGE_STATS_ENABLED": "0", **NO_DRAIN, **shell_env})
    return cluster.sbatch(script, env), script


def job_log(runs: Path, sweep: str, job_id: int) -> str:
    path = runs / "slurm" / f"cemlab-{sweep}-smoke-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else "(no job log)"


def one_finished_run_per_trial(url: str, sweep: str, n_trials: int):
    from mlflow.tracking import MlflowClient

    from cemlab.tracking import schema

    client = MlflowClient(url)
    exp = client.get_experiment_by_name(f"cemlab/{sweep}")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get(schema.ROLE) == "sweep"]
    trials = [r for r in runs if r.data.tags.get(schema.ROLE) == "trial"]
    assert len(parents) == 1, [p.info.status for p in parents]
    assert len(trials) == n_trials and len({r.data.tags[schema.TRIAL_ID] for r in trials}) == n_trials
    for r in trials:
        assert r.info.status == "FINISHED" and r.data.tags[schema.STATUS] == schema.STATUS_FINISHED
        assert r.data.tags[schema.PARENT_RUN_ID] == parents[0].info.run_id
        steps = [m.step for m in client.get_metric_history(r.info.run_id, schema.TRAIN_LOSS)]
        assert steps and len(steps) == len(set(steps)), "a step was logged twice"
    return client, trials


@pytest.mark.slow
def test_slurm_job_on_a_fresh_runs_folder_beside_another_ray_uses_the_command_lines_settings(slurm_site, tmp_path):
    cluster, url, _, _ = slurm_site
    runs = tmp_path / "runs"  # does not exist yet: `cemlab slurm` makes the job's log folder
    decoy_runs = tmp_path / "shell-runs"
    other_tmp = tempfile.mkdtemp(prefix="rayo", dir="/tmp")
    ports = [free_port() for _ in range(7)]
    other_ray = (f"ray start --head --block --disable-usage-stats --num-cpus=1 --include-dashboard=false "
                 f"--temp-dir={other_tmp} --port={ports[0]} --node-manager-port={ports[1]} "
                 f"--object-manager-port={ports[2]} --dashboard-agent-listen-port={ports[3]} "
                 f"--dashboard-agent-grpc-port={ports[4]} --metrics-export-port={ports[5]} "
                 f"--runtime-env-agent-port={ports[6]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "RAY_TMPDIR": other_tmp, **NO_DRAIN})
    try:
        with started(other_ray, env, tmp_path / "other-ray.log") as other:
            _wait_for_port(ports[0], other, tmp_path / "other-ray.log")
            t0 = time.monotonic()
            job_id, _ = submit(slurm_site, "one", runs, {  # the shell exports other settings: the options win
                "CEMLAB_RUNS_DIR": str(decoy_runs), "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"})
            info = cluster.wait(job_id, lambda j: j["JobState"] not in ("PENDING", "RUNNING", "CONFIGURING",
                                                                         "COMPLETING"), 600, "ended")
            wall = time.monotonic() - t0
            log = job_log(runs, "one", job_id)
            assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{log[-4000:]}"
            assert other.poll() is None, "the job stopped the other Ray"
    finally:
        shutil.rmtree(other_tmp, ignore_errors=True)
    print(f"\nslurm job {job_id}: submitted to COMPLETED in {wall:.0f} s")
    assert re.search(rf"JobId={job_id} .*JobState=COMPLETED", cluster.completion_log())
    first_trial = re.search(r"\d\d:\d\d:\d\d +running +86m__llama", log)
    assert first_trial and log.index("cemlab: data step") < first_trial.start(), log[-4000:]
    assert f"runs {runs};" in log and f"tracking {url}" in log
    one_finished_run_per_trial(url, "one", 1)
    assert (runs / "logs" / "one-smoke" / "summary.json").exists() and not decoy_runs.exists()
    assert not _ray_alive(f"/tmp/cemlab-ray-{job_id}/"), "the job left its Ray running"


@pytest.mark.slow
def test_slurm_requeue_mid_sweep_stops_cleanly_and_the_job_resumes_its_trial(slurm_site, tmp_path):
    from cemlab.tracking import schema

    cluster, url, _, _ = slurm_site
    runs = tmp_path / "runs"
    job_id, _ = submit(slurm_site, "slow", runs, {})
    # mid-trial: its first checkpoint is written
    deadline = time.monotonic() + 600
    while not list((runs / "checkpoints").glob("*/last.ckpt")):
        assert time.monotonic() < deadline, job_log(runs, "slow", job_id)[-4000:]
        assert cluster.job(job_id)["JobState"] in ("PENDING", "RUNNING"), job_log(runs, "slow", job_id)[-4000:]
        time.sleep(0.25)
    t0 = time.monotonic()
    cluster.run("scontrol", "requeue", str(job_id))
    cluster.wait(job_id, lambda j: j["Restarts"] == "1" and j["JobState"] == "PENDING", 300, "requeued")
    # the first run has ended: its driver marked the trial's run interrupted
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    exp = client.get_experiment_by_name("cemlab/slow")
    [run] = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get(schema.ROLE) == "trial"]
    assert run.data.tags[schema.STATUS] == schema.STATUS_INTERRUPTED, job_log(runs, "slow", job_id)[-4000:]
    info = cluster.wait(job_id, lambda j: j["JobState"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"),
                        600, "ended")
    print(f"\nslurm job {job_id}: requeue to COMPLETED in {time.monotonic() - t0:.0f} s")
    log = job_log(runs, "slow", job_id)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", f"{info}\n{log[-4000:]}"
    assert log.index("stopping the sweep") < log.index("left running marked interrupted") < log.index("(restart 1)"), \
        log[-4000:]  # the script's check after the stop ran (a no-op when the driver marked the run itself)
    _, [again] = one_finished_run_per_trial(url, "slow", 1)
    assert again.info.run_id == run.info.run_id  # resumed in the same run


def _wait_for_port(port: int, proc, log: Path, timeout: float = 120) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)


def _ray_alive(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0
