"""``cemlab bench train``: the bare PyTorch loop and cemlab's Lightning step do the same work (the
same training loss at every timed step), and the numbers printed are the ones computed."""

from __future__ import annotations

import csv
import json

import pytest

pytestmark = pytest.mark.slow

TINY = ["train.num_threads=1", "model.preset=nano", "model.d_model=16", "model.n_heads=2", "model.d_mlp=32",
        "model.n_layers=1", "model.vocab_size=300", "model.context_length=32", "data.max_chars=60000",
        "train.batch_size=8", "train.micro_batch_size=2"]


def test_both_loops_train_the_same_model_step_for_step(runs_dir, tmp_path):
    from cemlab.bench import train as bench
    from cemlab.config import load_run_config
    from cemlab.train.trainer import accelerator_and_precision

    cfg = load_run_config(None, [*TINY, "train.accelerator=cpu"])
    warmup, steps = 1, 3
    plan, data = bench._setup(cfg, warmup + steps + 1)
    assert plan.accumulation == 4
    result = bench.paired_round(cfg, plan, data, warmup, *accelerator_and_precision(cfg))
    assert len(result.bare) == len(result.light) == steps
    assert all(cpu > 0 for _, cpu in result.bare + result.light)
    # Same seed, batches, accumulation, clipping, optimizer and schedule: the same losses, exactly.
    assert result.bare_loss == result.light_loss
    assert len(set(result.bare_loss)) == steps  # and they are training (the loss changes every step)


def test_cli_prints_rounds_overhead_and_csv(runs_dir, tmp_path, capsys):
    from cemlab.bench import train as bench

    out_csv = tmp_path / "bench.csv"
    assert bench.main(["--steps", "2", "--warmup", "1", "--rounds", "2", "--no-data", "--csv", str(out_csv),
                       *TINY]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert len(summary["overhead_rounds"]) == 2
    assert summary["overhead"] == pytest.approx(sorted(summary["overhead_rounds"])[0] / 2
                                                + sorted(summary["overhead_rounds"])[1] / 2)
    assert "differ by at most 0.0e+00" in out
    rows = {r["measure"]: float(r["value"]) for r in csv.DictReader(out_csv.open())}
    assert rows["lightning overhead"] == pytest.approx(summary["overhead"], abs=1e-4)
    assert rows["lightning cost per micro-batch"] == pytest.approx(summary["lightning_ms_per_micro_batch"], abs=1e-3)
