"""Training runs end to end on the CPU, logged to a real MLflow sqlite store.

Every language-model test trains on the embedded corpus with the data settings of
``configs/default.yaml`` (one shared token cache), one torch thread (so that results do not depend
on thread scheduling and a subprocess computes exactly what this process computes) and a fixed seed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cemlab.config import RunConfig, load_run_config
from cemlab.tracking import schema
from train_support import DEFAULT_YAML, env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

def lm_config(env, *overrides: str) -> RunConfig:
    """``configs/default.yaml`` with the shared cache, one thread and the given overrides."""
    return load_run_config(DEFAULT_YAML, [f"data.cache_dir={env['cache']}", "train.num_threads=1", *overrides])


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def load_trained(cfg: RunConfig, checkpoint: Path):
    """The model of a cemlab checkpoint, rebuilt from the config (independently of the trainer)."""
    from cemlab.models import build_model

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    model = build_model(cfg.model)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    return model.eval()


def direct_perplexity(model, tokens: np.ndarray, seq_len: int) -> float:
    """exp(mean next-token NLL) over every full window of ``tokens``, by a plain loop."""
    n = (len(tokens) - 1) // seq_len
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 16):
            rows = [np.asarray(tokens[j * seq_len: j * seq_len + seq_len + 1], dtype=np.int64)
                    for j in range(i, min(n, i + 16))]
            batch = torch.from_numpy(np.stack(rows))
            logits = model(batch[:, :-1]).double()
            nll += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(),
                                                           reduction="sum"))
            count += batch[:, 1:].numel()
    return math.exp(nll / count)


def test_default_run_beats_a_unigram_model_and_logs_what_it_reports(env, runs_dir):
    """configs/default.yaml (about a minute) reaches a test perplexity far below the unigram
    model's on the same split; the logged test perplexity equals a direct recomputation from the
    final checkpoint."""
    from cemlab.data import prepare_data, unigram_perplexity
    from cemlab.train import train

    cfg = lm_config(env)
    result = train(cfg, tracking_uri=env["uri"], resume=False)
    assert result.status == "finished" and result.steps == result.total_steps
    bundle = prepare_data(cfg.data, cfg.model.vocab_size, cfg.model.context_length)
    unigram = unigram_perplexity(bundle.train, bundle.test, cfg.model.vocab_size)
    ppl = result.metrics["test/ppl"]
    print(f"\n1-minute run: test ppl {ppl:.1f}, unigram {unigram:.1f}, {result.seconds:.0f}s, "
          f"{result.metrics['train/tokens_per_s']:.0f} tokens/s")
    assert ppl < 0.5 * unigram

    model = load_trained(cfg, Path(result.checkpoint_dir) / "last.ckpt")
    assert direct_perplexity(model, bundle.test, cfg.model.context_length) == pytest.approx(ppl, rel=1e-5)
    run = env["client"].get_run(result.run_id)
    assert run.data.metrics[schema.TEST_PPL] == pytest.approx(ppl, rel=1e-12)
    assert run.data.tags[schema.STATUS] == "finished" and run.info.status == "FINISHED"


def test_killed_run_resumes_to_the_same_result(env, runs_dir, tmp_path):
    """A run killed with SIGKILL after a checkpoint and resumed in the same MLflow run ends with
    the same losses and test perplexity as an uninterrupted run; each step is logged once."""
    from cemlab.train import train

    common = ["train.tokens=61440", "train.batch_size=16", "train.micro_batch_size=8", "train.val_interval=10",
              "train.checkpoint_every=10", "train.test_batches=8", "train.seed=7"]
    whole_cfg = lm_config(env, *common, f"train.checkpoint_dir={tmp_path / 'whole'}")
    whole = train(whole_cfg, tracking_uri=env["uri"], resume=False)
    assert whole.total_steps == 30 and whole.status == "finished"

    killed_dir = tmp_path / "killed"
    cfg = lm_config(env, *common, f"train.checkpoint_dir={killed_dir}")
    assert cfg.hash() == whole_cfg.hash()  # the checkpoint folder is not part of what a run computes
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    # --restart: the store already holds this config's finished run (`whole`), which a plain rerun reuses
    proc = subprocess.Popen([sys.executable, "-m", "cemlab.cli", "train", str(cfg_file), "--restart",
                             "--tracking-uri", env["uri"]],
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state_file = killed_dir / "state.json"
    deadline = time.monotonic() + 300
    state = {}
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("step", 0) >= 10:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # a few steps past the checkpoint: they are lost and computed again
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    state = json.loads(state_file.read_text())
    assert 10 <= state["step"] < 30
    killed_run = state["run_id"]
    assert env["client"].get_run(killed_run).info.status == "RUNNING"  # killed: nobody said otherwise

    resumed = train(cfg, tracking_uri=env["uri"], resume=True)
    assert resumed.resumed and resumed.run_id == killed_run and resumed.status == "finished"
    for key in ("train/loss", "val/loss", "test/loss", "test/ppl"):
        assert resumed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-6, abs=0), key
    print(f"\nresume: killed after the checkpoint of step {state['step']} of 30; final train loss {resumed.metrics['train/loss']!r} vs {whole.metrics['train/loss']!r}, "
          f"test ppl {resumed.metrics['test/ppl']!r} vs {whole.metrics['test/ppl']!r}")

    client = env["client"]
    for key in ("train/loss", "train/lr", "val/ppl"):
        a, b = history(client, whole.run_id, key), history(client, killed_run, key)
        assert [s for s, _ in b] == [s for s, _ in a], key  # every step once, none missing
        np.testing.assert_allclose([v for _, v in b], [v for _, v in a], rtol=1e-6, err_msg=key)
    assert client.get_run(killed_run).data.tags[schema.STATUS] == "finished"
    # Resuming a finished run returns its result without training again.
    again = train(cfg, tracking_uri=env["uri"], resume=True)
    assert again.run_id == killed_run and again.metrics == resumed.metrics


def test_mlflow_holds_params_tags_histories_energies_and_config(env, runs_dir):
    """A full CEM model (T=2, dplr): MlflowClient finds the run with its flattened config, tags,
    per-step histories, the schedule, per-recursion-step energies (equal to a recomputation from
    the checkpoint), the test-time recursion curve and the config artifact."""
    from cemlab.config import flatten
    from cemlab.train import train

    cfg = lm_config(env, "model.attention=cem", "model.mlp=cem", "model.attn_steps=2", "model.mlp_steps=2",
                    "model.attn_precond=dplr", "model.mlp_precond=dplr", "train.tokens=16384", "train.batch_size=16",
                    "train.micro_batch_size=8", "train.val_interval=4", "train.test_batches=2", "model.mlp_eta=learned")
    reports = []
    result = train(cfg, tracking_uri=env["uri"], resume=False, report=reports.append)
    client = env["client"]
    run = client.get_run(result.run_id)
    assert run.info.run_name == "cem T2 dplr nano lr2e-3"
    tags = run.data.tags
    assert tags[schema.MODEL_KIND] == "cem" and tags[schema.SIZE] == "nano" and tags[schema.TASK] == "lm"
    assert tags[schema.CONFIG_HASH] == cfg.hash() and tags[schema.ROLE] == "train"
    assert tags[schema.STATUS] == "finished" and len(tags[schema.GIT_COMMIT]) == 40
    params = run.data.params
    assert params == {k: str(v) for k, v in flatten(cfg).items()}
    assert params["model.attn_steps"] == "2" and params["train.lr"] == "0.002"

    steps = result.total_steps
    assert steps == 8
    assert [s for s, _ in history(client, result.run_id, schema.TRAIN_LOSS)] == list(range(1, steps + 1))
    assert [s for s, _ in history(client, result.run_id, schema.VAL_PPL)] == [4, 8]
    tokens = history(client, result.run_id, schema.TOKENS_SEEN)
    assert tokens == [(s, 16.0 * 128 * s) for s in range(1, steps + 1)]
    lrs = [v for _, v in history(client, result.run_id, schema.LR)]
    warmup = round(0.05 * steps)  # 0 for 8 steps: the cosine starts at the peak
    expected = [2e-3 * (0.1 + 0.9 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup - 1))) / 2)
                for s in range(steps)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-9)
    assert all(v > 0 for _, v in history(client, result.run_id, schema.TOKENS_PER_S))
    assert run.data.metrics[schema.PARAMS_TOTAL] > 0 and run.data.metrics[schema.TOKEN_BUDGET] == 16384
    from cemlab.models import flops_per_token

    assert run.data.metrics[schema.FLOPS_PER_TOKEN] == flops_per_token(cfg.model, 128)["train"]

    # Energies after each recursion step, recomputed from the checkpoint on the same batch.
    from cemlab.data import PackedDataset, prepare_data
    from cemlab.train.data import eval_indices

    model = load_trained(cfg, Path(result.checkpoint_dir) / "last.ckpt")
    bundle = prepare_data(cfg.data, cfg.model.vocab_size, 128)
    val = PackedDataset(bundle.val, 128)
    idx = eval_indices(len(val), cfg.train.val_batches * cfg.train.micro_batch_size)[:4]
    traces = model.energy_trace(torch.stack([val[i][0] for i in idx]))
    assert set(traces) == {("attn", 0), ("attn", 1), ("mlp", 0), ("mlp", 1)}
    for (sub, layer), trace in traces.items():
        logged = history(client, result.run_id, schema.energy_metric(sub, layer))
        assert [s for s, _ in logged] == [0, 1, 2]
        np.testing.assert_allclose([v for _, v in logged], trace.tolist(), rtol=1e-5, atol=1e-5)
        drops = history(client, result.run_id, schema.energy_drop_metric(sub, layer))
        assert drops[-1][0] == steps and drops[-1][1] == pytest.approx(float(trace[0] - trace[-1]), abs=1e-4)

    # Step sizes at the end: attention's fixed eta = 1 (total 2), the MLP's learned values (from 1/2).
    assert "T=2 steps of eta=1.0 (total step T*eta = 2)" in tags["mlflow.note.content"]
    assert "NOT the gradient" not in tags["mlflow.note.content"]  # no KQ diagonal here
    for (sub, layer), etas in {(n, i): s.step_sizes() for n, i, s in model.cem_sublayers()}.items():
        logged = history(client, result.run_id, schema.step_size_metric(sub, layer))
        assert [t for t, _ in logged] == [1, 2] and [v for _, v in logged] == pytest.approx(etas, rel=1e-6)
        total = history(client, result.run_id, schema.total_step_metric(sub, layer))
        assert total[-1][0] == steps and total[-1][1] == pytest.approx(sum(etas), rel=1e-6)
        if sub == "attn":
            assert etas == [1.0, 1.0]
        else:
            assert all(e > 0 for e in etas) and etas != [0.5, 0.5]  # learned: moved from 1/T

    curve = history(client, result.run_id, schema.TEST_PPL_AT_STEPS)
    assert [s for s, _ in curve] == [1, 2, 3, 4] and result.test_at_steps.keys() == {1, 2, 3, 4}
    assert dict(curve)[2] == pytest.approx(run.data.metrics[schema.TEST_PPL])
    assert len({round(v, 6) for _, v in curve}) == 4  # changing T' at test time changes the model

    local = client.download_artifacts(result.run_id, schema.CONFIG_ARTIFACT, str(runs_dir))
    assert load_run_config(local) == cfg
    assert [r["step"] for r in reports] == [4, 8, 8] and "test/ppl" in reports[-1] and "val/ppl" in reports[0]


def test_nan_marks_the_run_diverged_and_the_cli_exits_3(env, runs_dir, tmp_path, monkeypatch):
    from cemlab.cli import main

    cfg = lm_config(env, "train.tokens=20480", "train.batch_size=16", "train.micro_batch_size=8",
                    "train.val_interval=2", f"train.checkpoint_dir={tmp_path / 'ck'}")
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    monkeypatch.setenv("CEMLAB_INJECT_NAN_STEP", "5")
    assert main(["train", str(cfg_file), "--tracking-uri", env["uri"]]) == 3
    state = json.loads((tmp_path / "ck" / "state.json").read_text())
    run = env["client"].get_run(state["run_id"])
    assert run.data.tags[schema.STATUS] == "diverged" and run.data.tags[schema.DIVERGED_STEP] == "5"
    assert run.info.status == "FINISHED"
    assert [s for s, _ in history(env["client"], state["run_id"], schema.TRAIN_LOSS)] == [1, 2, 3, 4]
    assert [s for s, _ in history(env["client"], state["run_id"], schema.VAL_PPL)] == [2, 4]
    assert state["result"]["diverged_step"] == 5 and state["status"] == "diverged"
    # The result stands: resuming does not train again and reports the divergence again.
    assert main(["train", str(cfg_file), "--tracking-uri", env["uri"], "--resume"]) == 3
    assert len(env["client"].get_metric_history(state["run_id"], schema.TRAIN_LOSS)) == 4


def test_cli_bad_input_exits_2_before_anything_is_logged(env, runs_dir, tmp_path, capsys):
    from cemlab.cli import main

    n_runs = len(env["client"].search_runs([env["client"].get_experiment_by_name("cemlab").experiment_id]))
    assert main(["train", str(DEFAULT_YAML), "model.n_heads=3", "--tracking-uri", env["uri"]]) == 2
    assert "n_heads" in capsys.readouterr().err
    assert main(["train", str(DEFAULT_YAML), "data.source=text", f"data.path={tmp_path / 'missing'}",
                 "--tracking-uri", env["uri"]]) == 2
    assert "data.path" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "nope.yaml")]) == 2
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "state.json").write_text(json.dumps({"config_hash": "0123456789ab", "run_id": "x"}))
    assert main(["train", str(DEFAULT_YAML), f"data.cache_dir={env['cache']}", f"train.checkpoint_dir={ck}",
                 "--resume", "--tracking-uri", env["uri"]]) == 2
    assert "0123456789ab" in capsys.readouterr().err
    assert len(env["client"].search_runs([env["client"].get_experiment_by_name("cemlab").experiment_id])) == n_runs


def test_compiled_model_trains_like_eager(env, runs_dir):
    """``train.compile`` (torch.compile, inductor on the CPU) gives the eager losses."""
    from cemlab.train import train

    common = ["model.n_layers=1", "train.tokens=3072", "train.batch_size=8", "train.micro_batch_size=4",
              "train.val_interval=3", "train.test_batches=1"]
    eager = train(lm_config(env, *common), tracking_uri=env["uri"], resume=False)
    compiled = train(lm_config(env, *common, "train.compile=true"), tracking_uri=env["uri"], resume=False)
    a = history(env["client"], eager.run_id, schema.TRAIN_LOSS)
    b = history(env["client"], compiled.run_id, schema.TRAIN_LOSS)
    assert len(a) == 3 and [s for s, _ in a] == [s for s, _ in b]
    np.testing.assert_allclose([v for _, v in b], [v for _, v in a], rtol=1e-4)
    assert compiled.metrics["val/loss"] == pytest.approx(eager.metrics["val/loss"], rel=1e-4)


def test_gp_task_trains_through_the_same_path_and_logs_rmse(env, runs_dir, capsys):
    """task: gp trains the recursive CEM MLP regressor; val/test RMSE are logged, far below the
    RMSE of predicting the training mean, and equal to a recomputation from the checkpoint. Its
    stderr is not a terminal: one progress line per validation, with the RMSE that was logged."""
    from cemlab.gp import make_gp_data
    from cemlab.models.gp import build_gp_model
    from cemlab.train import train

    cfg = RunConfig.model_validate({
        "task": "gp", "gp": {"n_train": 1024, "latent_dim": 32, "steps": 2},
        "train": {"batch_size": 64, "micro_batch_size": 64, "tokens": 19200, "val_interval": 100,
                  "num_threads": 1},
    })
    from cemlab.tracking.mlflow_run import create_run
    from cemlab.tracking.store import ensure_experiment

    client = env["client"]
    parent = create_run(client, ensure_experiment("cemlab/gp_test", client), "gp sweep", {schema.ROLE: "sweep"})
    result = train(cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"experiment": "cemlab/gp_test"})}),
                   tracking_uri=env["uri"], resume=False, parent_run_id=parent)
    run = client.get_run(result.run_id)
    assert run.data.tags[schema.TASK] == "gp" and run.info.run_name == "gp rbf T2 d32 lr2e-3"
    assert run.data.tags[schema.PARENT_RUN_ID] == parent and run.data.tags[schema.ROLE] == "trial"
    assert run.info.experiment_id == client.get_run(parent).info.experiment_id
    assert [s for s, _ in history(client, result.run_id, schema.VAL_RMSE)] == [100, 200, 300]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in lines] == ["100/300", "200/300", "300/300"]
    for ln, (_, value) in zip(lines, history(client, result.run_id, schema.VAL_RMSE)):
        assert f"val rmse {value:.4f}" in ln and "examples/s" in ln and "elapsed" in ln
    assert "left" in lines[0] and "left" not in lines[-1]
    assert [s for s, _ in history(client, result.run_id, schema.TEST_RMSE_AT_STEPS)] == [1, 2, 3, 4]
    assert [s for s, _ in history(client, result.run_id, schema.energy_metric("mlp", 0))] == [0, 1, 2]
    assert run.data.metrics[schema.FLOPS_PER_EXAMPLE] > 0 and schema.EXAMPLES_PER_S in run.data.metrics

    data = make_gp_data(cfg.gp)
    mean_rmse = float(((data.test.y - data.train.y.mean()) ** 2).mean().sqrt())
    rmse = run.data.metrics[schema.TEST_RMSE]
    assert rmse < 0.6 * mean_rmse
    state = torch.load(Path(result.checkpoint_dir) / "last.ckpt", map_location="cpu", weights_only=True)
    model = build_gp_model(cfg.gp)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state["state_dict"].items()})
    with torch.no_grad():
        direct = float(((model.eval()(data.test.x).double() - data.test.y.double()) ** 2).mean().sqrt())
    assert rmse == pytest.approx(direct, rel=1e-5)


def test_metric_buffer_logs_each_step_once_after_a_restart(env):
    """A resumed run replays the steps after its checkpoint; values already in the store are not
    logged twice, later ones are."""
    from cemlab.tracking.mlflow_run import MetricBuffer, create_run

    client = env["client"]
    run_id = create_run(client, client.get_experiment_by_name("cemlab").experiment_id, "buffer", {})
    first = MetricBuffer(client, run_id)
    for step in range(1, 6):
        first.add("train/loss", 10.0 - step, step)
    first.add("val/loss", 3.0, 4)
    first.flush()
    again = MetricBuffer(client, run_id)
    again.skip_logged()
    for step in range(3, 9):
        again.add_many({"train/loss": 10.0 - step, "val/loss": 2.0}, step)
    again.flush()
    assert history(client, run_id, "train/loss") == [(s, 10.0 - s) for s in range(1, 9)]
    assert history(client, run_id, "val/loss") == [(4, 3.0), (5, 2.0), (6, 2.0), (7, 2.0), (8, 2.0)]
