"""Evaluation sized to its precision: the standard-error estimator of ``cemlab bench evalnoise``
against a direct computation, the scales' batch counts against the rule and the committed
measurement (``docs/evalnoise.csv``), ``train.curve_batches``' bounds, and the test-time curve on
fewer batches still giving what the test-time claim reads (T' = T and 2T on the same batches)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from cemlab.bench import evalnoise as en
from cemlab.config import ConfigError, RunConfig, load_run_config
from cemlab.train.data import eval_indices
from cemlab.train.evaluate import curve_indices

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "docs" / "evalnoise.csv"


def test_se_of_mean_is_the_sd_over_root_n():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 0.7, size=200)
    for n in (1, 8, 128):
        direct = math.sqrt(np.sum((x - x.mean()) ** 2) / (len(x) - 1)) / math.sqrt(n)
        assert en.se_of_mean(x, n) == pytest.approx(direct, rel=1e-12)
    with pytest.raises(ValueError):
        en.se_of_mean([1.0], 4)


def test_se_of_mean_matches_the_spread_of_sample_means():
    """The formula is the spread of the mean of n draws: checked against 4000 simulated means."""
    rng = np.random.default_rng(1)
    pop = rng.gamma(2.0, 1.5, size=100_000)
    n = 64
    means = np.array([rng.choice(pop, n).mean() for _ in range(4000)])
    assert en.se_of_mean(pop, n) == pytest.approx(means.std(ddof=1), rel=0.05)


def test_rule_and_batches_for():
    assert en.batches_for(0.04, 0.01) == 16          # 0.04 / sqrt(16) = 0.01 exactly
    assert en.batches_for(0.041, 0.01) == 17
    assert en.batches_for(0.001, 0.01) == 1
    assert en.rule_batches(0.04, 0.04) == 16         # a quarter of 0.04
    with pytest.raises(ValueError):
        en.batches_for(0.01, 0.0)


def test_noise_table_pools_pairs_as_root_mean_square():
    rng = np.random.default_rng(2)
    a, b = rng.normal(5, 0.5, 64), rng.normal(5, 0.5, 64)
    per_seq = {("a", "test", 1, True): a, ("b", "test", 1, True): b,
               ("a", "val", 1, True): a, ("b", "val", 1, True): b}
    rows = en.noise_table(per_seq, [("a", "b", 1, 1)], [], [("a", "b", 1, 1)], 8, 8)
    run = {r["batches"]: r for r in rows if r["quantity"] == "run"}
    assert sorted(run) == [1, 2, 4, 8]
    want = math.sqrt((en.se_of_mean(a, 16) ** 2 + en.se_of_mean(b, 16) ** 2) / 2)
    assert run[2]["se"] == pytest.approx(want) and run[2]["n"] == 2
    paired = {r["batches"]: r for r in rows if r["quantity"] == "paired"}
    assert paired[4]["se"] == pytest.approx(np.std(a - b, ddof=1) / math.sqrt(32))


def _measured() -> list[dict]:
    """The committed table: scale, quantity, batches, SE (pooled) and SE (max)."""
    with open(MEASURED) as f:
        rows = list(csv.DictReader(f))
    return rows


def _rule_rows():
    with open(ROOT / "docs" / "evalnoise-rule.csv") as f:
        return list(csv.DictReader(f))


def test_the_scales_batches_against_the_written_rule():
    """docs/evalnoise-rule.csv's counts follow from the committed measurement (the b = 1 standard
    error, pooled over pairs) and the seed-to-seed sd it names; its ``set_batches`` is what
    sweeps/scales.yaml sets (curve_batches unset: the test batches), and ``meets`` says truly
    whether that is at least the rule's count. ``strict_batches`` is the same rule against the sd of
    the mean of 8 seeds (an evaluation error shared by every seed)."""
    scales = yaml.safe_load((ROOT / "sweeps" / "scales.yaml").read_text())
    measured = {(r["scale"], r["quantity"]): float(r["se"]) for r in _measured() if r["batches"] == "1"}
    rules = _rule_rows()
    assert {r["field"] for r in rules} == {"test_batches", "curve_batches", "val_batches"}
    for r in rules:
        se1, sd, frac = measured[(r["measured_at"], r["quantity"])], float(r["seed_sd"]), float(r["fraction"])
        need = en.rule_batches(se1, sd, frac)
        assert int(r["rule_batches"]) == need, r
        assert int(r["strict_batches"]) == en.rule_batches(se1, sd / math.sqrt(8), frac), r
        train = scales[r["scale"]]["lm"]["base"]["train"]
        got = train.get(r["field"]) or (train["test_batches"] if r["field"] == "curve_batches" else None)
        assert got == int(r["set_batches"]), (r, got)
        assert (r["meets"] == "yes") == (got >= need), r
        assert (se1 / math.sqrt(got) <= frac * sd) == (got >= need), r


def test_curve_batches_is_bounded_and_named():
    cfg = load_run_config(None, ["train.test_batches=16", "train.curve_batches=4"])
    assert cfg.train.curve_batches == 4
    with pytest.raises(ConfigError, match="curve_batches=32 must be at most test_batches=16"):
        load_run_config(None, ["train.test_batches=16", "train.curve_batches=32"])
    with pytest.raises(ConfigError, match="train.curve_batches"):
        load_run_config(None, ["train.curve_batches=0"])


def test_curve_batches_leaves_old_hashes_alone():
    """At its default the new field is not part of the config hash (old trials still match)."""
    a = RunConfig(train={"test_batches": 16})
    assert "curve_batches" not in a.model_dump(mode="json")["train"] or a.hash() == RunConfig(
        train={"test_batches": 16, "curve_batches": None}).hash()
    assert RunConfig(train={"test_batches": 16, "curve_batches": 4}).hash() != a.hash()


def test_curve_indices():
    cfg = RunConfig(train={"test_batches": 16, "micro_batch_size": 8, "batch_size": 8})
    test_idx = eval_indices(1000, 128)
    assert curve_indices(cfg, 1000, 8, test_idx) is test_idx       # default: the test metric's, reused at T
    few = cfg.model_copy(update={"train": cfg.train.model_copy(update={"curve_batches": 4})})
    idx = curve_indices(few, 1000, 8, test_idx)
    assert idx == eval_indices(1000, 32) and len(idx) == 32 and idx[0] == 0 and idx[-1] == 999
    same = cfg.model_copy(update={"train": cfg.train.model_copy(update={"curve_batches": 16})})
    assert curve_indices(same, 1000, 8, test_idx) is test_idx


def test_curve_on_fewer_batches_gives_what_the_claim_reads():
    """With curve_batches below test_batches the curve is evaluated at every T' (T included) on the
    curve's batches: the test-time claim's T' = T and 2T are there and read the same examples; the
    test metric keeps its own batches."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from cemlab.train.evaluate import evaluate_on_test, test_recursion_list

    seen = []

    class Runtime:
        metric = "ppl"
        steps = 2

        def recursion_T(self):
            return 2

        @contextmanager
        def recursion_steps(self, s):
            old, self.steps = self.steps, s
            yield
            self.steps = old

    rt = Runtime()

    class Module:
        def to(self, device):
            return self

        def evaluate(self, dataset, idx, mb):
            seen.append((rt.steps, tuple(idx)))
            return {"loss": 0.0, "ppl": 100.0 + rt.steps + len(idx) / 1000}

    cfg = RunConfig(train={"test_batches": 16, "curve_batches": 4, "micro_batch_size": 8, "batch_size": 8})
    data = SimpleNamespace(test=list(range(787)))
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device="cpu"), is_global_zero=True)
    final, curve, _ = evaluate_on_test(cfg, trainer, Module(), rt, data, SimpleNamespace(micro_batch_size=8), None,
                                       test_recursion_list(cfg, 2))
    assert sorted(curve) == [1, 2, 3, 4]
    assert seen[0] == (2, tuple(eval_indices(787, 128)))                   # the test metric: 16 batches
    assert {idx for _, idx in seen[1:]} == {tuple(eval_indices(787, 32))}  # the curve: 4, every T'
    assert [s for s, _ in seen[1:]] == [1, 2, 3, 4]
    assert final["test/ppl"] == pytest.approx(102.128) and curve[2] == pytest.approx(102.032)
    # at the default, T' = T reuses the test metric (no extra pass)
    seen.clear()
    cfg16 = RunConfig(train={"test_batches": 16, "micro_batch_size": 8, "batch_size": 8})
    _, curve16, _ = evaluate_on_test(cfg16, trainer, Module(), rt, data, SimpleNamespace(micro_batch_size=8), None,
                                     test_recursion_list(cfg16, 2))
    assert [s for s, _ in seen] == [2, 1, 3, 4] and curve16[2] == pytest.approx(102.128)
