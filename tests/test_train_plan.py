"""Training plan and pieces, without training: budget, schedule, weight decay, data order, run
names, atomic checkpoint files, config errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cemlab.config import ConfigError, RunConfig, load_run_config
from cemlab.models.config import ModelConfig
from cemlab.train import checkpoint as ckpt
from cemlab.train.data import DataPosition, StepBatchSampler, eval_indices
from cemlab.train.plan import decay_groups, lr_factor, make_plan
from cemlab.tasks import format_lr
from cemlab.tracking.mlflow_run import run_name


def llama_params(d, layers, d_mlp, vocab):
    """Llama parameter count by hand: embedding + head, per layer 4 D^2 (q, k, v, o) + 3 D d_mlp
    (SwiGLU) + 2 D (norms), final norm D."""
    return 2 * vocab * d + layers * (4 * d * d + 3 * d * d_mlp + 2 * d) + d


def test_chinchilla_budget_is_20_tokens_per_baseline_parameter_for_every_variant():
    base = RunConfig(model={"preset": "nano"}, train={"batch_size": 16, "micro_batch_size": 8})
    expected = 20 * llama_params(64, 2, 172, 512)
    plan = make_plan(base)
    assert plan.budget == expected
    assert plan.total_steps == math.ceil(expected / (16 * 128))
    cem = base.model_copy(update={"model": base.model.model_copy(update={
        "attention": "cem", "mlp": "cem", "attn_steps": 2, "mlp_steps": 2, "attn_precond": "dplr",
        "mlp_precond": "dplr", "mlp_param_matched": True})})
    cem_plan = make_plan(RunConfig.model_validate(cem.model_dump()))
    assert cem_plan.budget == expected and cem_plan.total_steps == plan.total_steps


def test_paper_86m_budget_matches_table_1():
    cfg = RunConfig(model={"preset": "86m", "attention": "cem", "attn_steps": 2}, train={})
    plan = make_plan(cfg)
    assert plan.budget == 20 * llama_params(672, 8, 1792, 32000)
    assert abs(plan.budget / 20 / 86e6 - 1) < 0.01
    assert plan.accumulation == 128 // 8 and plan.seq_len == 2048


def test_fixed_budget_max_steps_and_accumulation():
    cfg = RunConfig(model={"preset": "nano"}, train={"tokens": 100_000, "batch_size": 32, "micro_batch_size": 8})
    plan = make_plan(cfg)
    assert plan.total_steps == math.ceil(100_000 / (32 * 128)) and plan.accumulation == 4
    assert make_plan(cfg, world_size=2).accumulation == 2
    capped = RunConfig(model={"preset": "nano"}, train={"tokens": 100_000, "max_steps": 7, "batch_size": 32,
                                                       "micro_batch_size": 8})
    assert make_plan(capped).total_steps == 7
    assert make_plan(capped).warmup_steps == round(0.05 * 7)


def test_plan_errors_name_the_fields():
    cfg = RunConfig(model={"preset": "nano"}, train={"batch_size": 24, "micro_batch_size": 8})
    with pytest.raises(ConfigError, match="train.batch_size=24.*micro_batch_size=8.*2 devices"):
        make_plan(cfg, world_size=2)
    with pytest.raises(ConfigError, match=r"data.seq_len=256 exceeds model.context_length=128"):
        make_plan(RunConfig(model={"preset": "nano"}, data={"seq_len": 256}))
    with pytest.raises(ConfigError, match=r"gp.kernel"):
        make_plan(load_run_config(None, ["task=gp", "gp.kernel=matern"]))
    with pytest.raises(ConfigError, match="micro_batch_size"):
        load_run_config(None, ["train.batch_size=10", "train.micro_batch_size=4"])
    with pytest.raises(ConfigError, match="train.test_recursion_steps"):
        load_run_config(None, ["train.test_recursion_steps=[0, 2]"])


def test_schedule_warmup_then_cosine_to_the_final_factor():
    total, warmup, final = 100, 5, 0.1
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup, final))
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # Independent: linear ramp 1/5 ... 5/5, then a half cosine over the remaining 95 steps.
    for s in range(warmup):
        assert lrs[s] == pytest.approx(2e-3 * (s + 1) / warmup)
    for s in range(warmup, total):
        p = (s - warmup) / (total - warmup - 1)
        assert lrs[s] == pytest.approx(2e-3 * (final + (1 - final) * (1 + math.cos(math.pi * p)) / 2))
    assert lrs[warmup] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(2e-4)
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))
    assert lr_factor(0, 1, 0, 0.1) == pytest.approx(0.1)  # a one-step run ends at the final rate


def test_weight_decay_on_matrices_only():
    cfg = ModelConfig.preset("nano", attention="cem", mlp="cem", attn_precond="dplr", mlp_precond="dplr",
                             kq_diagonal="per_head")
    from cemlab.models import build_model

    model = build_model(cfg)
    decay, no_decay = decay_groups(model)
    names = dict(model.named_parameters())
    assert set(decay) | set(no_decay) == set(names) and not set(decay) & set(no_decay)
    matrices = ("embed.weight", "head.weight", "Wq.weight", "Wk.weight", "W.weight", "V.weight",
                "precond.U", "precond.V")
    for n in names:
        assert (n in decay) == n.endswith(matrices), n
    for must in ("blocks.0.attn.kq_diag", "blocks.0.attn.self_bias", "blocks.0.attn.precond.p",
                 "blocks.1.mlp.precond.p", "blocks.0.attn.norm.weight", "norm.weight"):
        assert must in no_decay


def test_gp_weight_decay_skips_biases_and_diagonals():
    from cemlab.gp import GPConfig
    from cemlab.models.gp import build_gp_model

    model = build_gp_model(GPConfig(latent_dim=16, precond="dplr", precond_rank=4))
    decay, no_decay = decay_groups(model)
    assert set(decay) == {"input.weight", "layers.0.W.weight", "layers.0.V.weight", "layers.0.precond.U",
                          "layers.0.precond.V", "readout.weight"}
    assert {"input.bias", "readout.bias", "layers.0.precond.p", "layers.0.norm.weight"} <= set(no_decay)


def _plan(total=10, batch=8, micro=2, world=1):
    cfg = RunConfig(model={"preset": "nano"}, train={"tokens": total * batch * 128, "batch_size": batch,
                                                     "micro_batch_size": micro})
    return make_plan(cfg, world_size=world)


def test_data_order_is_a_function_of_seed_and_position():
    plan, n = _plan(), 13  # 13 examples: data-epochs wrap in the middle of a step
    full = list(StepBatchSampler(n, plan, seed=3, rank=0, position=DataPosition()))
    assert len(full) == plan.total_steps * plan.accumulation == 40
    flat = [i for b in full for i in b]
    assert sorted(flat[:n]) == list(range(n)) and sorted(flat[n:2 * n]) == list(range(n))
    assert flat[:n] != flat[n:2 * n]  # each data-epoch its own permutation
    torch.manual_seed(123)  # global RNG state plays no part
    pos = DataPosition()
    pos.start_step = 6
    resumed = list(StepBatchSampler(n, plan, seed=3, rank=0, position=pos))
    assert resumed == full[6 * plan.accumulation:]
    other = [i for b in StepBatchSampler(n, plan, seed=4, rank=0, position=DataPosition()) for i in b]
    assert other != flat


def test_ranks_split_each_step_without_overlap():
    n = 50
    single = list(StepBatchSampler(n, _plan(world=1), seed=0, rank=0, position=DataPosition()))
    plan2 = _plan(world=2)
    r0 = list(StepBatchSampler(n, plan2, seed=0, rank=0, position=DataPosition()))
    r1 = list(StepBatchSampler(n, plan2, seed=0, rank=1, position=DataPosition()))
    for step in range(10):
        one = sorted(i for b in single[step * 4:(step + 1) * 4] for i in b)
        two = sorted(i for b in r0[step * 2:(step + 1) * 2] + r1[step * 2:(step + 1) * 2] for i in b)
        assert one == two


def test_eval_indices_cover_the_split_evenly():
    assert eval_indices(5, None) == [0, 1, 2, 3, 4] and eval_indices(5, 10) == [0, 1, 2, 3, 4]
    idx = eval_indices(100, 5)
    assert idx == [0, 25, 50, 74, 99]


def test_run_names_are_readable():
    def name(**model):
        return run_name(RunConfig(model={"preset": "86m", **model}, train={"lr": 2e-3}))

    assert name() == "llama 86m lr2e-3"
    assert name(attention="cem", attn_steps=2, attn_precond="dplr") == "cem-attn T2 dplr 86m lr2e-3"
    assert name(attention="cem", mlp="cem", attn_steps=2, mlp_steps=2, attn_precond="dplr",
                mlp_precond="dplr") == "cem T2 dplr 86m lr2e-3"
    assert name(attention="cem", kq_diagonal="shared", attn_precond="diag") == "cem-attn T1 diag kq-shared 86m lr2e-3"
    assert name(mlp="cem", mlp_param_matched=True, mlp_reuse=2) == "cem-mlp T1 reuse2 pm 86m lr2e-3"
    assert run_name(RunConfig(task="gp", gp={"kernel": "gibbs", "steps": 4}, train={"lr": 1e-3, "seed": 2})) \
        == "gp gibbs T4 d64 lr1e-3 s2"
    assert [format_lr(x) for x in (2e-3, 5e-4, 2.5e-3, 8e-3, 1.0)] == ["2e-3", "5e-4", "2.5e-3", "8e-3", "1e0"]


class _FakeTrainer:
    """Stands in for ``lightning.Trainer`` in the atomic-save test: writes ``payload``, optionally
    crashing half way through the file."""

    is_global_zero = True

    def __init__(self):
        self.payload, self.crash = b"", False

        class _S:
            def barrier(self, name=None):
                pass

        self.strategy = _S()

    def save_checkpoint(self, path, weights_only=None):
        with open(path, "wb") as fh:
            fh.write(self.payload[: len(self.payload) // 2])
            if self.crash:
                raise OSError("disk full (simulated)")
            fh.write(self.payload[len(self.payload) // 2:])


def test_checkpoint_save_is_atomic(tmp_path):
    trainer = _FakeTrainer()
    trainer.payload = b"first checkpoint " * 100
    target = ckpt.save_checkpoint(trainer, tmp_path)
    assert target.read_bytes() == trainer.payload
    first = trainer.payload
    trainer.payload, trainer.crash = b"second checkpoint " * 100, True
    with pytest.raises(OSError, match="simulated"):
        ckpt.save_checkpoint(trainer, tmp_path)
    assert target.read_bytes() == first  # the crash left the previous checkpoint whole
    trainer.crash = False
    ckpt.save_checkpoint(trainer, tmp_path)
    assert target.read_bytes() == trainer.payload
    ckpt.write_state(tmp_path, {"step": 3})
    assert ckpt.read_state(tmp_path) == {"step": 3}
    (tmp_path / ckpt.STATE_NAME).write_text("{not json")
    assert ckpt.read_state(tmp_path) is None


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_example_configs_validate_and_plan(path):
    cfg = load_run_config(path)
    plan = make_plan(cfg)
    assert plan.total_steps >= 1 and plan.budget > 0
    assert run_name(cfg)


def test_terminal_statuses_and_reopen_in_a_real_store(tmp_path):
    """``finish_run`` gives each cemlab status its MLflow status (a run ASHA stopped is a result:
    FINISHED), and ``reopen_run`` drops the error of an earlier attempt, so a retried run that
    then succeeds carries no error."""
    from mlflow.tracking import MlflowClient

    from cemlab.tracking import mlflow_run as mr
    from cemlab.tracking import schema
    from cemlab.tracking.store import run_status

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("t", artifact_location=(tmp_path / "artifacts").as_uri())
    expected = {schema.STATUS_FINISHED: "FINISHED", schema.STATUS_DIVERGED: "FINISHED",
                schema.STATUS_STOPPED: "FINISHED", schema.STATUS_FAILED: "FAILED",
                schema.STATUS_INTERRUPTED: "KILLED"}
    for status, mlflow_status in expected.items():
        rid = mr.create_run(client, exp, status, {schema.STATUS: schema.STATUS_RUNNING})
        mr.finish_run(client, rid, status)
        run = client.get_run(rid)
        assert (run.info.status, run.data.tags[schema.STATUS], run_status(run)) == (mlflow_status, status, status)

    # a failed attempt, retried: reopened it is running without the old error, and it finishes clean
    rid = mr.create_run(client, exp, "retried", {schema.STATUS: schema.STATUS_RUNNING})
    mr.finish_run(client, rid, schema.STATUS_FAILED, {schema.ERROR: "RuntimeError: first attempt"})
    assert client.get_run(rid).data.tags[schema.ERROR] == "RuntimeError: first attempt"
    mr.reopen_run(client, rid)
    run = client.get_run(rid)
    assert run.info.status == "RUNNING" and run_status(run) == schema.STATUS_RUNNING
    assert schema.ERROR not in run.data.tags
    mr.finish_run(client, rid, schema.STATUS_FINISHED)
    run = client.get_run(rid)
    assert (run.info.status, run_status(run)) == ("FINISHED", schema.STATUS_FINISHED)
    assert schema.ERROR not in run.data.tags
    # reopening a run that never had an error (an interrupted one) works too, and a second failure
    # records its own error
    mr.reopen_run(client, rid)
    mr.finish_run(client, rid, schema.STATUS_FAILED, {schema.ERROR: "ValueError: second"})
    assert client.get_run(rid).data.tags[schema.ERROR] == "ValueError: second"
