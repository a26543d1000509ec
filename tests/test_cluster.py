"""Sweeps on a Ray cluster of several nodes, on this machine, logging to MLflow on PostgreSQL.

A real Ray cluster of three raylets (``ray.cluster_utils.Cluster``): a head with no CPUs (GCS
and the sweep's driver) and two worker nodes with one CPU each, so every trial runs on a
worker node and two one-CPU processes never share one. The sweeps join it through
``RAY_ADDRESS`` and log to one MLflow tracking server started by the test on a real PostgreSQL
server (Debian's, ``tests/pg_support.py``), both on 127.0.0.1: the cluster's shared server
(``MLFLOW_TRACKING_URI``), as in docker/compose.yaml. The runs folder (checkpoints, Ray storage)
is one local folder, which every node of this cluster sees at the same path, as shared storage
would on a real one.

In order (the last one kills a node):

1. a two-worker DDP trial (Ray Train ``TorchTrainer``, Lightning DDP over gloo, one worker per
   node) trains to the same losses as one process with the same global batch and seed, and is
   one run in MLflow;
2. a project sweep at the smoke scale places its trials on both nodes; the store (PostgreSQL,
   read with plain SQL too) holds them, and the sweep's report, read back from that server,
   has their values in its figures' CSVs;
3. killing the node of a running trial: Tune retries it from its last checkpoint on the other
   node, it finishes in the same MLflow run with each step once, and the finished trial keeps
   its run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from cemlab.tracking import schema
from mlflow_support import mlflow_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    """Head (0 CPUs) + two worker nodes (1 CPU each); this process is the driver. Yields
    ``(cluster, [worker node, worker node])``."""
    import ray
    from ray.cluster_utils import Cluster

    from cemlab.sweeps.stages.execute import quiet_tune

    quiet_tune()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    """A PostgreSQL server for the module (``pg_support.postgres`` is per test); missing server
    binaries skip the module, except under CI, as ``pg_support.postgres`` does."""
    from pg_support import PostgresUnavailable, postgres_server

    try:
        with postgres_server() as server:
            yield server
    except PostgresUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def tracking(pg, tmp_path_factory) -> str:
    """The module's MLflow tracking server, on PostgreSQL (the cluster's shared server)."""
    root = tmp_path_factory.mktemp("cluster-mlflow")
    (root / "artifacts").mkdir()
    with mlflow_server(pg.sqlalchemy_uri, root / "artifacts", root / "server.log") as url:
        yield url


@pytest.fixture
def cluster_env(cluster, tracking, runs_dir, tmp_path, monkeypatch):
    """What a sweep driver on the cluster sees: RAY_ADDRESS, MLFLOW_TRACKING_URI, a runs folder."""
    c, _ = cluster
    monkeypatch.setenv("RAY_ADDRESS", c.address)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    return runs_dir


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory) -> Path:
    """The token cache the other sweep tests share (the corpus is tokenised once per session)."""
    return tmp_path_factory.getbasetemp() / "sweep-data-cache"


def sweep_dir(tmp_path: Path, monkeypatch, name: str, text: str, **smoke_lm) -> Path:
    """A sweep folder with the project's scales (the smoke scale's ``lm`` entry changed by
    ``smoke_lm``: ``resources`` and ``train`` dicts) and one sweep file."""
    d = tmp_path / "sweeps"
    d.mkdir(exist_ok=True)
    scales = yaml.safe_load((REPO_SWEEPS / "scales.yaml").read_text())
    lm = scales["smoke"]["lm"]
    lm["resources"].update(smoke_lm.get("resources", {}))
    lm["base"]["train"].update(smoke_lm.get("train", {}))
    (d / "scales.yaml").write_text(yaml.safe_dump(scales))
    (d / f"{name}.yaml").write_text(textwrap.dedent(text))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(d))
    return d


def run(name: str, cache: Path, report: bool = False, **kw):
    """The sweep, then (``report``) its report, as ``cemlab sweep`` does."""
    from rich.console import Console

    from cemlab.cli import report_after_sweep
    from cemlab.sweeps.runner import run_sweep

    console = Console(file=open("/dev/null", "w"), width=200)
    result = run_sweep(name, "smoke", cache_dir=cache, console=console, live=False, **kw)
    if report:
        report_after_sweep(result, console, kw.get("overrides"))
    return result


def trial_runs(client, sweep: str) -> dict[str, object]:
    exp = client.get_experiment_by_name(f"cemlab/{sweep}")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    out = {}
    for r in runs:
        if r.data.tags.get(schema.ROLE) == "trial":
            assert r.data.tags[schema.TRIAL_ID] not in out, "a trial has two runs"
            out[r.data.tags[schema.TRIAL_ID]] = r
    return out


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def worker_ids(cluster) -> set[str]:
    return {n.node_id for n in cluster[1]}


# ---------------------------------------------------------------------------------------------
# 1. A two-worker DDP trial = one process with the same global batch
# ---------------------------------------------------------------------------------------------

DDP = """\
figure: "test: ddp"
axes: {size: [86m], lr: [2.0e-3]}
variants:
  - {group: llama, label: llama}
"""


def test_two_worker_ddp_trial_matches_one_process(cluster, cluster_env, data_cache, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.train import checkpoint as ckpt
    from cemlab.train.run import train

    # Global batch 8 = 2 workers x micro-batch 2 x 2 accumulation steps (one process: 1 x 2 x 4).
    sweep_dir(tmp_path, monkeypatch, "ddp", DDP, resources={"workers": 2}, train={"micro_batch_size": 2})
    # Rank zero fails at its 2nd validation (step 16; checkpoint of step 8) on the first attempt:
    # the retry resumes every rank from the checkpoint, and must still match one process exactly.
    monkeypatch.setenv("CEMLAB_SWEEP_FAULTS", json.dumps({"*": {"times": 1, "at_report": 2}}))
    result = run("ddp", data_cache, retries=1)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    (outcome,) = result.outcomes
    assert outcome.status == "finished" and outcome.attempts == 2 and outcome.resumed
    assert len(outcome.nodes) == 2 and set(outcome.nodes) == worker_ids(cluster)   # one rank per node
    log = Path(outcome.log_path).read_text()
    assert "InjectedFault: injected failure 1" in log and f"resuming from {cluster_env}/checkpoints/" in log
    assert len(re.findall(r"rank 1/2 pid", log)) == 2   # both attempts ran two ranks

    client = MlflowClient(result.tracking_uri)
    runs = trial_runs(client, "ddp")
    assert list(runs) == [outcome.trial.trial_id]   # rank zero alone logged: one run
    run_ = runs[outcome.trial.trial_id]
    assert run_.info.run_id == outcome.run_id and run_.data.tags[schema.STATUS] == "finished"
    ddp_loss = history(client, run_.info.run_id, schema.TRAIN_LOSS)
    assert [s for s, _ in ddp_loss] == list(range(1, 17))   # each step once
    plan = ckpt.read_state(cluster_env / "checkpoints" / outcome.trial.config_hash)["plan"]
    assert (plan["world_size"], plan["accumulation"], plan["micro_batch_size"]) == (2, 2, 2)

    # The same trial in one process (this one, no Ray), into its own store.
    (trial,) = load_sweep("ddp").expand("smoke")
    cfg = trial.config.model_copy(deep=True)
    cfg.data.cache_dir = str(data_cache)
    cfg.train.num_threads = 1
    cfg.train.checkpoint_dir = str(tmp_path / "single")
    single_uri = f"sqlite:///{tmp_path}/single.db"
    single = train(cfg, tracking_uri=single_uri, resume=False, progress_bar=False)
    assert ckpt.read_state(tmp_path / "single")["plan"]["accumulation"] == 4
    single_loss = history(MlflowClient(single_uri), single.run_id, schema.TRAIN_LOSS)

    assert [s for s, _ in single_loss] == list(range(1, 17))
    assert [v for _, v in ddp_loss] == pytest.approx([v for _, v in single_loss], rel=1e-5, abs=0)
    assert ddp_loss[-1][1] < ddp_loss[0][1] - 0.2   # it learned: the comparison is not of two constants
    for key in (schema.VAL_LOSS, schema.TEST_LOSS):
        assert run_.data.metrics[key] == pytest.approx(single.metrics[key], rel=1e-5), key


# ---------------------------------------------------------------------------------------------
# 2. Trials on both nodes, one store on PostgreSQL, the report read back from it
# ---------------------------------------------------------------------------------------------


def test_project_sweep_on_both_nodes_into_postgres_and_its_report(cluster, cluster_env, pg, data_cache, tmp_path,
                                                                   monkeypatch):
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from cemlab.sweeps.sweepfile.load import load_sweep

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    trials = load_sweep("attention_replacement").expand("smoke")
    assert len(trials) == 2
    result = run("attention_replacement", data_cache, report=True)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error, result.report_error) for o in result.outcomes]
    nodes = {o.trial.trial_id: o.nodes for o in result.outcomes}
    assert all(len(n) == 1 for n in nodes.values()), nodes
    assert {n[0] for n in nodes.values()} == worker_ids(cluster)   # one trial on each worker node
    for o in result.outcomes:   # the trial's log names the node it ran on, as its Tune result did
        assert f"node {o.nodes[0]}" in Path(o.log_path).read_text()
    summary = json.loads((cluster_env / "logs" / "attention_replacement-smoke" / "summary.json").read_text())
    assert {t["trial_id"]: t["nodes"] for t in summary["trials"]} == nodes

    client = MlflowClient(result.tracking_uri)
    runs = trial_runs(client, "attention_replacement")
    assert sorted(runs) == sorted(t.trial_id for t in trials)
    ppl = {}
    for o in result.outcomes:
        r = runs[o.trial.trial_id]
        assert r.info.run_id == o.run_id and r.data.tags[schema.PARENT_RUN_ID] == result.parent_run_id
        assert r.data.tags[schema.STATUS] == "finished"
        ppl[o.trial.group] = r.data.metrics[schema.TEST_PPL]
    # The runs are rows of the PostgreSQL database (plain SQL, no MLflow).
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT r.run_uuid, m.value FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
                        "JOIN latest_metrics m ON m.run_uuid = r.run_uuid WHERE e.name = %s AND m.key = %s",
                        ("cemlab/attention_replacement", schema.TEST_PPL))
            rows = dict(cur.fetchall())
    finally:
        conn.close()
    assert rows == pytest.approx({r.info.run_id: r.data.metrics[schema.TEST_PPL] for r in runs.values()})

    # The report was built from that server: its tables and figure data carry the runs' values.
    assert result.report is not None and result.report_error is None
    out = result.report.parent
    table = pd.read_csv(out / "trials.csv").set_index("run_id")
    assert sorted(table.index) == sorted(o.run_id for o in result.outcomes)
    assert (table["status"] == "finished").all()
    for r in runs.values():
        assert table.loc[r.info.run_id, "value"] == pytest.approx(r.data.metrics[schema.TEST_PPL], rel=1e-9)
    fig = pd.read_csv(out / "fig2a.csv").set_index("group")["mean"]
    assert fig.to_dict() == pytest.approx(ppl, rel=1e-9)
    for name in ("fig2a.png", "fig2a.pdf", "index.html"):
        assert (out / name).stat().st_size > 0, name


# ---------------------------------------------------------------------------------------------
# 3. A node dies mid-trial
# ---------------------------------------------------------------------------------------------

NODE_LOSS = """\
figure: "test: node loss"
axes: {size: [86m], lr: [3.0e-3]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: cem-attn long, set: {model.attention: cem, train.tokens: 131072}}
"""
SHORT, LONG = "86m__llama__lr3e-3__s0", "86m__cem-attn_long__lr3e-3__s0"


def _trial_state(runs: Path, log: Path) -> tuple[dict, str | None]:
    """(state.json of the trial's checkpoint, the node of its latest attempt), from its log."""
    if not log.is_file():
        return {}, None
    text = log.read_text()
    starts = re.findall(r"\(config ([0-9a-f]+)\) pid \d+ node ([0-9a-f]+)", text)
    if not starts:
        return {}, None
    config, node = starts[-1]
    try:
        return json.loads((runs / "checkpoints" / config / "state.json").read_text()), node
    except (OSError, ValueError):
        return {}, node


def test_killed_node_trial_resumes_on_the_other_node(cluster, cluster_env, data_cache, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    c, workers = cluster
    sweep_dir(tmp_path, monkeypatch, "nodeloss", NODE_LOSS)
    log_dir = cluster_env / "logs" / "nodeloss-smoke"
    box: dict = {}
    sweep = threading.Thread(target=lambda: box.update(result=run("nodeloss", data_cache, retries=1)))
    sweep.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and sweep.is_alive():
            short, _ = _trial_state(cluster_env, log_dir / f"{SHORT}.log")
            long_, node = _trial_state(cluster_env, log_dir / f"{LONG}.log")
            if short.get("status") == "finished" and long_.get("status") == "running" and long_.get("step", 0) >= 8:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the sweep never reached the kill point: {box}")
        victim = next(n for n in workers if n.node_id == node)
        killed_at = long_["step"]
        c.remove_node(victim, allow_graceful=False)   # SIGKILL: the raylet and its trial process
        finished = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_run(short["run_id"])
        sweep.join(timeout=300)
        assert not sweep.is_alive(), "the sweep did not finish after the node died"
    finally:
        sweep.join(timeout=1)
    result = box["result"]
    out = {o.trial.trial_id: o for o in result.outcomes}
    survivor = next(n.node_id for n in workers if n is not victim)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    assert out[LONG].status == "finished" and out[LONG].attempts == 2 and out[LONG].resumed
    assert out[LONG].nodes == [survivor] != [victim.node_id]
    assert out[SHORT].status == "finished" and out[SHORT].attempts == 1
    log = (log_dir / f"{LONG}.log").read_text()
    assert f"resuming from {cluster_env}/checkpoints/" in log
    assert 0 < killed_at < out[LONG].trial.config.train.tokens // (8 * 32)

    client = MlflowClient(result.tracking_uri)
    runs = trial_runs(client, "nodeloss")
    assert sorted(runs) == sorted([SHORT, LONG])   # the retried trial is still one run
    long_run, short_run = runs[LONG], runs[SHORT]
    assert long_run.info.run_id == out[LONG].run_id and long_run.data.tags[schema.STATUS] == "finished"
    total = out[LONG].trial.config.train.tokens // (8 * 32)
    assert [s for s, _ in history(client, long_run.info.run_id, schema.TRAIN_LOSS)] == list(range(1, total + 1))
    # the finished trial kept its run and its result, untouched
    assert short_run.info.run_id == out[SHORT].run_id == finished.info.run_id
    assert short_run.data.tags[schema.STATUS] == "finished" and short_run.info.end_time == finished.info.end_time
    assert short_run.data.metrics == finished.data.metrics
    assert [s for s, _ in history(client, short_run.info.run_id, schema.TRAIN_LOSS)] == list(range(1, 17))
