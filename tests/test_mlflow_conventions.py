"""MLflow's own conventions on a cemlab run, read back from a real MLflow server.

A tiny run trains against the project's local ``mlflow server`` (``cemlab.tracking.server``, on
127.0.0.1 and a free port) and ``MlflowClient`` reads back what MLflow's UI and filters use: the
``mlflow.*`` system tags, the description, the dataset inputs, MLflow's own ``system/`` metrics
and the final model, which ``mlflow.pytorch.load_model`` restores and which, evaluated here by a
plain loop over the same test windows, gives the logged test loss.
"""

from __future__ import annotations

import re

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from cemlab.config import load_run_config
from cemlab.tracking import schema

DEFAULT_YAML = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


@pytest.fixture
def served(runs_dir, monkeypatch, tmp_path):
    from cemlab.tracking.server import start_server, stop_server

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    url = start_server()
    yield url
    stop_server()


def _test_loss(model, tokens: np.ndarray, seq_len: int, indices: list[int]) -> float:
    """Mean next-token cross entropy over the packed windows ``indices`` of ``tokens``, by a loop."""
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in indices:
            row = torch.from_numpy(np.asarray(tokens[i * seq_len: i * seq_len + seq_len + 1], dtype=np.int64))[None]
            logits = model(row[:, :-1]).double()
            nll += float(torch.nn.functional.cross_entropy(logits[0], row[0, 1:], reduction="sum"))
            count += seq_len
    return nll / count


@pytest.mark.slow
def test_run_has_mlflow_system_tags_description_dataset_system_metrics_and_a_loadable_model(served, runs_dir):
    import mlflow
    import mlflow.pytorch
    from mlflow import MlflowClient
    from mlflow.utils import mlflow_tags as mt

    from cemlab.data import prepare_data
    from cemlab.train import train
    from cemlab.train.data import eval_indices

    cfg = load_run_config(DEFAULT_YAML, [f"data.cache_dir={runs_dir / 'cache'}", "data.max_chars=400000",
                                         "train.num_threads=1", "train.tokens=20480", "train.batch_size=16",
                                         "train.micro_batch_size=8", "train.val_interval=5", "train.test_batches=2",
                                         "model.attention=cem", "model.attn_steps=2", "model.attn_precond=diag",
                                         "tracking.log_model=true", "tracking.tags={cemlab.sweep: demo, "
                                         "cemlab.scale: smoke, cemlab.figure: Fig 2c, cemlab.trial_id: t1}"])
    result = train(cfg, tracking_uri=served, resume=False)
    assert result.status == "finished"
    client = MlflowClient(served)
    run = client.get_run(result.run_id)
    tags = run.data.tags

    # System tags, read by MLflow's UI columns and search filters.
    assert tags[mt.MLFLOW_USER] not in ("", "unknown") and tags[mt.MLFLOW_USER] == _login()
    assert tags[mt.MLFLOW_SOURCE_TYPE] == "LOCAL"
    assert tags[mt.MLFLOW_SOURCE_NAME] == "cemlab sweep demo --scale smoke"
    assert len(tags[mt.MLFLOW_GIT_COMMIT]) == 40 and tags[mt.MLFLOW_GIT_COMMIT] == tags[schema.GIT_COMMIT]
    assert tags[mt.MLFLOW_RUN_NAME] == run.info.run_name == result.run_name
    note = tags[mt.MLFLOW_RUN_NOTE]
    for part in ("cem-attn", "nano", "T=2", "η=1", "preconditioner diag", "20,480 tokens", "demo", "smoke", "Fig 2c"):
        assert part in note, (part, note)
    found = client.search_runs([run.info.experiment_id], f"tags.`{mt.MLFLOW_USER}` = '{_login()}'")
    assert result.run_id in {r.info.run_id for r in found}

    # Dataset inputs: one per split, the corpus's fingerprint as the digest, token counts in the profile.
    bundle = prepare_data(cfg.data, cfg.model.vocab_size, cfg.model.context_length)
    inputs = {next(t.value for t in d.tags if t.key == mt.MLFLOW_DATASET_CONTEXT): d.dataset
              for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "validation", "test"}
    for split, context in (("train", "train"), ("val", "validation"), ("test", "test")):
        ds = inputs[context]
        assert ds.name == "stdlib" and ds.source_type == "local"
        assert ds.digest == Path(bundle.stats["cache_path"]).name.rsplit("-", 1)[-1] + f"-{split}"
        import json

        assert json.loads(ds.profile)["tokens"] == len(bundle.split(split))

    # MLflow's system metrics sampler ran beside the training.
    system = [k for k in run.data.metrics if k.startswith("system/")]
    assert "system/cpu_utilization_percentage" in system and "system/system_memory_usage_megabytes" in system

    # The final model: a LoggedModel output of the run, restored by mlflow.pytorch, evaluating to
    # the logged test loss on the same test windows.
    assert [o.model_id for o in run.outputs.model_outputs] == [tags[schema.MODEL_URI].removeprefix("models:/")]
    mlflow.set_tracking_uri(served)
    try:
        model = mlflow.pytorch.load_model(tags[schema.MODEL_URI]).eval()
    finally:
        mlflow.set_tracking_uri(None)
    seq = cfg.model.context_length
    n_windows = (len(bundle.test) - 1) // seq
    idx = eval_indices(n_windows, cfg.train.test_batches * cfg.train.micro_batch_size)
    loss = _test_loss(model, bundle.test, seq, idx)
    assert loss == pytest.approx(run.data.metrics[schema.TEST_LOSS], rel=1e-5)
    assert math.exp(loss) == pytest.approx(run.data.metrics[schema.TEST_PPL], rel=1e-5)


def _login() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def test_system_metrics_and_model_switches(monkeypatch):
    from cemlab.config import RunConfig
    from cemlab.tracking.conventions import SYSTEM_METRICS_ENV, log_model_enabled, system_metrics_enabled

    monkeypatch.delenv(SYSTEM_METRICS_ENV, raising=False)
    cfg = RunConfig()
    assert system_metrics_enabled(cfg) is True
    monkeypatch.setenv(SYSTEM_METRICS_ENV, "false")
    assert system_metrics_enabled(cfg) is False
    cfg.tracking.system_metrics = True  # the config wins over the environment
    assert system_metrics_enabled(cfg) is True
    assert log_model_enabled(RunConfig()) is True
    smoke = RunConfig(tracking={"tags": {schema.SCALE: "smoke"}})
    assert log_model_enabled(smoke) is False
    smoke.tracking.log_model = True
    assert log_model_enabled(smoke) is True


def test_a_system_metrics_monitor_that_does_not_stop_does_not_hold_the_run_end(caplog):
    """MLflow's ``finish`` joins its sampling thread with no limit; the run's end waits a bounded time."""
    import threading
    import time

    from cemlab.train.run import stop_system_metrics

    release = threading.Event()

    class Stuck:   # a monitor whose sampling thread is stuck in a call that never returns
        finished = False

        def finish(self):
            release.wait()
            self.finished = True

    t0 = time.perf_counter()
    assert stop_system_metrics(Stuck(), timeout=0.3) is False
    assert time.perf_counter() - t0 < 5 and "did not stop within" in caplog.text
    release.set()

    class Prompt:
        finished = False

        def finish(self):
            self.finished = True

    monitor = Prompt()
    assert stop_system_metrics(monitor, timeout=5) is True and monitor.finished


@pytest.mark.slow
def test_reused_runs_are_linked_once_under_the_parent_that_reused_them(tmp_path):
    from mlflow import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    from cemlab.tracking.conventions import LINKED_RUN, link_reused_runs
    from cemlab.tracking.store import ensure_experiment, get_client, search_runs

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = get_client(uri)
    first = ensure_experiment("cemlab/first", client)
    second = ensure_experiment("cemlab/second", client)
    old_parent = client.create_run(first, tags={schema.ROLE: "sweep"}).info.run_id
    reused = client.create_run(first, run_name="llama s1 lr2e-3", tags={
        schema.ROLE: "trial", schema.PARENT_RUN_ID: old_parent, schema.CONFIG_HASH: "abc", schema.SWEEP: "first",
        schema.TRIAL_ID: "s1__llama__lr2e-3__s0", schema.axis_tag("lr"): "0.002", schema.SEARCH_CELL: "x"})
    rid = reused.info.run_id
    client.log_batch(rid, params=[], metrics=[])
    client.log_param(rid, "train.lr", "0.002")
    client.log_metric(rid, schema.TEST_PPL, 41.5, step=10)
    client.log_metric(rid, "system/cpu_utilization_percentage", 80.0)
    client.set_terminated(rid)
    parent = client.create_run(second, tags={schema.ROLE: "sweep"}).info.run_id

    made = link_reused_runs(client, parent, [client.get_run(rid)])
    assert len(made) == 1 and link_reused_runs(client, parent, [client.get_run(rid)]) == []  # idempotent
    link = MlflowClient(uri).get_run(made[0])
    tags = link.data.tags
    assert link.info.experiment_id == second and link.info.status == "FINISHED"
    assert tags[schema.PARENT_RUN_ID] == parent and tags[LINKED_RUN] == rid and tags[schema.ROLE] == "link"
    assert link.info.run_name == "llama s1 lr2e-3 (reused)"
    assert tags[schema.TRIAL_ID] == "s1__llama__lr2e-3__s0" and tags[schema.axis_tag("lr")] == "0.002"
    for key in (schema.CONFIG_HASH, schema.SWEEP, schema.SEARCH_CELL):  # never taken for the trial's run
        assert key not in tags
    assert search_runs(client, [second], f"tags.`{schema.CONFIG_HASH}` = 'abc'") == []
    assert link.data.params == {"train.lr": "0.002"} and link.data.metrics == {schema.TEST_PPL: 41.5}
    assert f"#/experiments/{first}/runs/{rid}" in tags[MLFLOW_RUN_NOTE]
    assert client.get_run(rid).data.tags[schema.PARENT_RUN_ID] == old_parent  # the reused run stays where it ran


@pytest.mark.slow
def test_ui_serves_on_a_stable_port_from_5000_or_the_next_free_one(runs_dir, tmp_path, monkeypatch, capsys):
    import socket

    from cemlab.cli import main
    from cemlab.tracking.server import PORT_ENV, stop_server

    monkeypatch.chdir(tmp_path)
    # A base port, held so that the next one is taken, below the ephemeral range: no outgoing connection
    # of another process then takes the ports after it between the two starts (an OS-given base did).
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    with socket.socket() as probe:
        for base in range(low - 1000, low - 100, 20):
            try:
                probe.bind(("127.0.0.1", base))
                break
            except OSError:
                continue
        else:
            pytest.fail(f"no free port to hold between {low - 1000} and {low - 100}, below the ephemeral range")
        monkeypatch.setenv(PORT_ENV, str(base))
        try:
            assert main(["ui"]) == 0
            first = capsys.readouterr().out
            port = int(first.split("http://127.0.0.1:")[1].split()[0])
            assert base < port < base + 20, first
            stop_server()
            assert main(["ui"]) == 0  # restarted: the same address again (links stay valid)
            again = capsys.readouterr().out  # the address whole, ending its line or followed by a space
            assert re.search(rf"http://127\.0\.0\.1:{port}(\s|$)", again, re.M), again
        finally:
            stop_server()


def test_sweep_parent_describes_the_sweep_and_links_mlflows_comparison_of_all_its_trials(tmp_path):
    import json
    from urllib.parse import unquote, urlsplit

    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    from cemlab.tracking.conventions import COMPARE_URL, describe_sweep_run
    from cemlab.tracking.store import ensure_experiment, get_client

    client = get_client(f"sqlite:///{tmp_path}/mlflow.db")
    here, elsewhere = ensure_experiment("cemlab/mlp_replacement", client), ensure_experiment("cemlab/other", client)
    parent = client.create_run(here).info.run_id
    runs = [client.create_run(here).info.run_id for _ in range(2)] + [client.create_run(elsewhere).info.run_id]
    # what varies at this scale: the MLP and the seed; the learning rate is fixed
    for rid, mlp, seed in zip(runs, ["llama", "cem", "cem"], [0, 0, 1]):
        for k, v in {"model.mlp": mlp, "train.lr": "0.002", "train.seed": seed}.items():
            client.log_param(rid, k, v)
        client.log_metric(rid, "test/ppl", 30.0)
    url = describe_sweep_run(client, parent, sweep="mlp_replacement", figure="Fig 2b", scale="smoke",
                             description="CEM MLP against the Llama MLP.", run_ids=runs)
    tags = client.get_run(parent).data.tags
    assert tags[COMPARE_URL] == url and f"[Compare its 3 trials]({url})" in tags[MLFLOW_RUN_NOTE]
    note = tags[MLFLOW_RUN_NOTE]
    assert "varies at scale smoke, `model.mlp`;" in note and "`train.lr`" not in note and "`test/ppl`" in note
    assert url.endswith("&workflowType=machine_learning")  # MLflow 3's runs view, not its GenAI overview
    assert "mlp_replacement" in tags[MLFLOW_RUN_NOTE] and "Fig 2b" in tags[MLFLOW_RUN_NOTE]
    assert tags["mlflow.source.name"] == "cemlab sweep mlp_replacement --scale smoke"
    assert tags["mlflow.user"] == _login() and len(tags["mlflow.source.git.commit"]) == 40
    fragment = urlsplit(url).fragment
    assert fragment.startswith("/compare-runs?")
    query = dict(part.split("=", 1) for part in fragment.split("?", 1)[1].split("&"))
    assert json.loads(unquote(query["runs"])) == sorted(runs)
    assert json.loads(unquote(query["experiments"])) == sorted({here, elsewhere})


@pytest.mark.parametrize("eta, shown", [(0.5, "η=0.5"), ("1/T", "η=1/T"), ("learned", "η=learned")])
def test_description_names_every_step_size_mode(eta, shown):
    from cemlab.config import RunConfig
    from cemlab.tracking.conventions import description

    cfg = RunConfig.model_validate({"model": {"preset": "nano", "attention": "cem", "attn_steps": 2, "attn_eta": eta}})
    text = description(cfg)
    assert f"CEM (T=2, {shown}, preconditioner" in text and "MLP: Llama" in text
