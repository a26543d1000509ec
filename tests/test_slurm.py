"""The SLURM launcher: the sbatch text ``cemlab slurm`` writes, and its Ray part run for real.

The Ray part is run as the job would run it, minus SLURM: the generated script is sourced (which
only defines its functions), ``ray_node 0`` and ``ray_node 1`` start two Ray nodes on 127.0.0.1
(two ``ray start --block`` processes on free ports: the head and a worker that joins it), then
``wait_for_nodes`` and ``run_sweep`` run a one-trial smoke sweep against a real MLflow server;
running ``run_sweep`` again, as a requeued job does, finds the trial's result and trains nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cemlab.sweeps.slurm import SlurmJob, render
from pg_support import free_port
from test_postgres_mlflow import mlflow_server

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
    assert 'MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-http://mlflow.internal:5000}"' in text
    assert "PASSWORD=" not in text  # credentials come from the submitting environment only
    assert 'CEMLAB_RUN="${CEMLAB_RUN-apptainer exec --nv --bind /shared/cemlab/runs /shared/cemlab.sif}"' in text
    assert "SWEEP_ARGS=(recursion_ablation --scale paper --plain)" in text
    assert "cemlab data prepare recursion_ablation --scale paper" in text
    assert "ray symmetric-run --address" in text and "--min-nodes \"$CEMLAB_NODES\"" in text
    # the sweep joins the job's cluster (without RAY_ADDRESS it would start a Ray of its own)
    assert '-- env RAY_ADDRESS="$HEAD_IP:$RAY_PORT" cemlab sweep "${SWEEP_ARGS[@]}"' in text
    assert "ray start --head" in text and "--dashboard-host=127.0.0.1" in text
    assert 'RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"' in text and "RAY_AUTH_TOKEN=$(head -c 32 /dev/urandom" in text
    assert text.index("cemlab data prepare") < text.index("if use_symmetric_run")  # data before Ray holds the GPUs
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
    for bad, match in [(dict(mlflow="http://127.0.0.1:5000"), "loopback"), (dict(mlflow="runs/mlflow"), "URL"),
                       (dict(runs_dir="runs"), "absolute"), (dict(apptainer="a.sif", enroot="b"), "one container")]:
        with pytest.raises(ValueError, match=match):
            render(job(**bad))


def test_cli_checks_the_sweep_and_the_gpus(tmp_path, capsys):
    from cemlab.cli import main

    common = ["--mlflow", "http://mlflow.internal:5000", "--runs-dir", "/shared/runs"]
    assert main(["slurm", "recursion_ablation", "--nodes", "1", "--gpus-per-node", "4", *common]) == 2
    assert "needs 8 GPUs" in capsys.readouterr().err
    assert main(["slurm", "no_such_sweep", *common]) == 2
    out = tmp_path / "j.sbatch"
    assert main(["slurm", "recursion_ablation", "--nodes", "2", *common, "-o", str(out)]) == 0
    assert sbatch_options(out.read_text())["nodes"] == "2" and os.access(out, os.X_OK)


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


@pytest.mark.slow
def test_the_scripts_ray_part_runs_a_sweep_on_two_local_nodes_and_a_requeue_resumes(tmp_path):
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    shutil.copy(REPO_SWEEPS / "scales.yaml", sweeps / "scales.yaml")
    (sweeps / "one.yaml").write_text(ONE_TRIAL)
    runs = tmp_path / "runs"
    script = tmp_path / "job.sbatch"
    (tmp_path / "mlflow").mkdir()
    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}", tmp_path / "mlflow",
                       tmp_path / "mlflow" / "server.log") as url:
        # the job names the cluster's server; here the environment points it at the local one
        script.write_text(render(SlurmJob(sweep="one", scale="smoke", nodes=2, gpus_per_node=0, cpus_per_node=1,
                                          mlflow="http://mlflow.internal:5000", runs_dir=str(runs))))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "CEMLAB_"))}
        env.update({"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "HEAD_IP": "127.0.0.1",
                    "RAY_PORT": str(port), "CEMLAB_RUN": "", "CEMLAB_NODE_RUN": "", "CEMLAB_DASHBOARD": "false",
                    "CEMLAB_SWEEPS_DIR": str(sweeps), "CEMLAB_REPORTS_DIR": str(tmp_path / "reports"),
                    "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_TRACKING_URI": url, "CEMLAB_CPUS": "1",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})  # as main() exports them

        # The head's temp folder is the test's: `ray start --head` records its address there
        # (ray_current_cluster), where a later bare ray.init() on this machine would otherwise find it.
        ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths have a length limit

        def node_env(rank: int) -> dict:
            ports = [free_port() for _ in range(4)]
            return {**env, "NODE_IP": "127.0.0.1", "CEMLAB_RAY_START_ARGS": (
                f"--node-manager-port={ports[0]} --object-manager-port={ports[1]} "
                f"--dashboard-agent-listen-port={ports[2]} --metrics-export-port={ports[3]}"
                + (f" --temp-dir={ray_tmp}" if rank == 0 else ""))}

        src = f"source {script}"
        with started(f"{src}; ray_node 0", node_env(0), tmp_path / "head.log"), \
                started(f"{src}; ray_node 1", node_env(1), tmp_path / "worker.log"):
            first = subprocess.run(["bash", "-c", f"{src}; wait_for_nodes 180 && run_sweep"], env=env,
                                   capture_output=True, text=True, timeout=600)
            logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
            assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:] + logs[-3000:]
            assert "ray: 2 node(s) up" in first.stdout
            summary = json.loads((runs / "logs" / "one-smoke" / "summary.json").read_text())
            assert summary["counts"] == {"finished": 1}
            # the requeued job runs the same script: the sweep finds its trial's result in MLflow and does
            # not train it again ("reused": the first invocation had finished; an interrupted one is
            # reopened and its trials are "done" or resumed from their checkpoints, test_sweep_run_resume)
            again = subprocess.run(["bash", "-c", f"{src}; wait_for_nodes 60 && run_sweep"], env=env,
                                   capture_output=True, text=True, timeout=600)
            assert again.returncode == 0, again.stderr[-3000:]
            summary = json.loads((runs / "logs" / "one-smoke" / "summary.json").read_text())
            assert summary["counts"] == {"reused": 1}
    shutil.rmtree(ray_tmp, ignore_errors=True)
