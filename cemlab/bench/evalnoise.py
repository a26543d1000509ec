"""Evaluation noise against evaluation batches: how many test and validation batches a scale needs.

    cemlab bench evalnoise [--sweep recursion_ablation] [--scale tiny] [--seeds 0 1]
                           [--cells llama "cem-attn T2" ...] [--runs DIR] [--max-batches 64]
                           [--csv OUT.csv]

For trained trials of the sweep at the scale (the final checkpoints ``last.ckpt`` of a runs folder,
``--runs``; trials without one are trained first, into that folder), every test sequence's mean
token loss is computed on ``--max-batches`` batches of the split (``train.micro_batch_size``
sequences each, evenly spaced as the run's own evaluation takes them: ``eval_indices``), at the
training recursion T and, for CEM models, at T' = 2T; and on the validation split at T. From these it
prints, for b = 1, 2, 4, ... batches, the standard error of what the report reads:

- ``run``: one run's log perplexity (the mean of its sequences' losses), a run on its own;
- ``paired``: the difference of two cells' log perplexities at the same seed and rate, both on the
  same batches (what the verdicts pair over seeds: the batches' own difficulty cancels);
- ``curve``: one CEM run's log ratio of perplexity at T' = 2T over T' = T (the test-time claim);
- ``val paired``: the same as ``paired`` on the validation split (the learning-rate choice).

The standard error of a mean of ``n = b x micro_batch_size`` sequences is the sequences' sd over
sqrt(n) (:func:`se_of_mean`: sequences as independent draws, the conservative reading of an evenly
spaced sample), pooled over runs or pairs as a root mean square. :func:`rule_batches` is the rule
the scales' batch counts follow (docs/performance.md, "Evaluation sized to its precision"); the
measured table is written with ``--csv`` (the committed one: ``docs/evalnoise.csv``).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

#: The rule's fraction: evaluation noise at most this share of the seed-to-seed sd it adds to.
RULE_FRACTION = 0.25


def se_of_mean(x, n: int) -> float:
    """Standard error of the mean of ``n`` draws of the values ``x`` (their sd, ddof 1, over
    sqrt(n))."""
    x = np.asarray(x, dtype=float)
    if n < 1 or x.size < 2:
        raise ValueError(f"se_of_mean needs n >= 1 and at least two values (n={n}, {x.size} values)")
    return float(np.std(x, ddof=1) / math.sqrt(n))


def pooled(values) -> float:
    """Root mean square: the pooled standard error of several runs or pairs."""
    v = np.asarray(list(values), dtype=float)
    return float(np.sqrt(np.mean(v ** 2))) if v.size else math.nan


def batches_for(se_one_batch: float, target: float) -> int:
    """The fewest batches whose standard error ``se_one_batch / sqrt(b)`` is at most ``target``."""
    if not (se_one_batch >= 0 and target > 0):
        raise ValueError(f"batches_for needs se_one_batch >= 0 and target > 0 ({se_one_batch}, {target})")
    return max(1, math.ceil((se_one_batch / target) ** 2 - 1e-9))


def rule_batches(se_one_batch: float, seed_sd: float, fraction: float = RULE_FRACTION) -> int:
    """The rule: the fewest batches whose evaluation standard error is at most ``fraction`` of the
    seed-to-seed sd of the same quantity (at 1/4 it adds at most 1/16 = 6.25% to the variance, 3.1%
    to the sd)."""
    return batches_for(se_one_batch, fraction * seed_sd)


def batch_ladder(max_batches: int) -> list[int]:
    out, b = [], 1
    while b <= max_batches:
        out.append(b)
        b *= 2
    return out


def noise_table(per_seq: dict, pairs: list[tuple], curves: list[tuple], val_pairs: list[tuple], mb: int,
                max_batches: int) -> list[dict]:
    """Rows of (quantity, batches, pooled SE, worst SE, how many runs or pairs) from per-sequence
    losses: ``per_seq[(trial, split, steps, at_T)]`` is an array of sequence losses (``at_T``: at the
    trial's training recursion); ``pairs``/``val_pairs``
    are (trial a, trial b, steps a, steps b) on test/val, ``curves`` (trial, T)."""
    quantities = {
        "run": [per_seq[k] for k in per_seq if k[1] == "test" and k[3]],
        "paired": [per_seq[(a, "test", sa, True)] - per_seq[(b, "test", sb, True)] for a, b, sa, sb in pairs],
        "curve": [per_seq[(t, "test", 2 * T, False)] - per_seq[(t, "test", T, True)] for t, T in curves],
        "val paired": [per_seq[(a, "val", sa, True)] - per_seq[(b, "val", sb, True)] for a, b, sa, sb in val_pairs],
    }
    rows = []
    for name, xs in quantities.items():
        if not xs:
            continue
        for b in batch_ladder(max_batches):
            ses = [se_of_mean(x, b * mb) for x in xs]
            rows.append({"quantity": name, "batches": b, "sequences": b * mb, "se": pooled(ses),
                         "se_max": max(ses), "n": len(xs)})
    return rows


def evaluation_flops(cfg, test_batches: int, curve_batches: int | None, val_batches: int, validations: int,
                     curve_steps: list[int]) -> dict[str, float]:
    """Forward FLOPs of one trial's evaluation (``cemlab.models.flops_per_token`` at each recursion
    count): the test metric at T, the test-time curve (``curve_steps``; T' = T is free when the curve
    shares the test batches), ``validations`` validations of ``val_batches``; micro batches of
    ``train.micro_batch_size`` sequences of the context length."""
    from cemlab.models import flops_per_token

    m = cfg.model
    seq = cfg.data.seq_len or m.context_length
    per_batch = cfg.train.micro_batch_size * seq
    attn_T, mlp_T = m.attention.steps, m.mlp.steps
    T = max([s for s, k in ((attn_T, m.attention.kind), (mlp_T, m.mlp.kind)) if k == "cem"], default=None)

    def fwd(steps: int | None) -> float:
        if steps is None or T is None:
            return flops_per_token(m, seq)["forward"]
        upd = {}
        if m.attention.kind == "cem":
            upd["attn_steps"] = steps
        if m.mlp.kind == "cem":
            upd["mlp_steps"] = steps
        return flops_per_token(m.model_copy(update=upd), seq)["forward"]

    test = test_batches * per_batch * fwd(T)
    cb = test_batches if curve_batches is None else min(curve_batches, test_batches)
    curve = 0.0
    if T is not None:
        curve = sum(cb * per_batch * fwd(s) for s in curve_steps if not (s == T and cb == test_batches))
    val = validations * val_batches * per_batch * fwd(T)
    return {"test": test, "curve": curve, "validation": val, "total": test + curve + val}


# -- trained trials and their per-sequence losses ---------------------------------------------------
def _trials(sweep: str, scale: str, seeds: list[int], cells: list[str]):
    from cemlab.sweeps.sweepfile.load import load_sweep

    spec = load_sweep(sweep)
    trials = spec.expand(scale, overrides=[f"seed=[{','.join(str(s) for s in seeds)}]"])
    if cells:
        trials = [t for t in trials if any(c == t.variant or c in t.variant for c in cells)]
    return trials


def _train_missing(trials, runs: Path, uri: str) -> None:
    from cemlab.train.run import train

    for t in trials:
        if not (runs / "checkpoints" / t.config_hash / "last.ckpt").is_file():
            cfg = t.config.model_copy(deep=True)
            cfg.tracking.system_metrics = False
            cfg.tracking.log_model = False
            cfg.train.progress_bar = False
            print(f"training {t.trial_id} ({t.config_hash})", flush=True)
            train(cfg, tracking_uri=uri)


def sequence_losses(cfg, ckpt: Path, split: str, steps_list: list[int], max_batches: int) -> dict[int, np.ndarray]:
    """Mean token loss of each evaluated sequence of ``split`` (the first ``max_batches`` x micro
    batches' worth, evenly spaced as the run's evaluation takes them) at each recursion step count."""
    import torch
    import torch.nn.functional as F

    from cemlab.tasks import task_of
    from cemlab.train.data import eval_indices
    from cemlab.train.plan import make_plan

    task, plan = task_of(cfg), make_plan(cfg, 1)
    data = task.load_data(cfg, plan)
    runtime = task.build(cfg)
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    runtime.model.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    runtime.model.eval()
    dataset = getattr(data, split)
    mb = plan.micro_batch_size
    idx = eval_indices(len(dataset), max_batches * mb)
    out: dict[int, np.ndarray] = {}
    T = runtime.recursion_T()
    for steps in steps_list:
        losses = []
        ctx = runtime.recursion_steps(steps) if T is not None and steps != T else _null()
        with torch.no_grad(), ctx:
            for i in range(0, len(idx), mb):
                batch = [dataset[j] for j in idx[i:i + mb]]
                x = torch.stack([b[0] for b in batch])
                y = torch.stack([b[1] for b in batch])
                logits = runtime.model(x)
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="none")
                losses.append(nll.reshape(y.shape).mean(dim=1).double().numpy())
        out[steps] = np.concatenate(losses)
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def measure(trials, runs: Path, max_batches: int):
    """Per-sequence losses of every trial (test at T and 2T, val at T) and the pairs they form."""
    per_seq: dict = {}
    info = {}
    for t in trials:
        ckpt = runs / "checkpoints" / t.config_hash / "last.ckpt"
        from cemlab.tasks import task_of

        T = task_of(t.config).build(t.config).recursion_T()
        steps = [T or 1] + ([2 * T] if T else [])
        test = sequence_losses(t.config, ckpt, "test", steps, max_batches)
        val = sequence_losses(t.config, ckpt, "val", steps[:1], max_batches)
        per_seq[(t.trial_id, "test", steps[0], True)] = test[steps[0]]
        if T:
            per_seq[(t.trial_id, "test", 2 * T, False)] = test[2 * T]
        per_seq[(t.trial_id, "val", steps[0], True)] = val[steps[0]]
        info[t.trial_id] = (t, steps[0], T)
        print(f"{t.trial_id}: test log ppl {test[steps[0]].mean():.4f} over {len(test[steps[0]])} sequences"
              + (f", at T'={2 * T} {test[2 * T].mean():.4f}" if T else ""), flush=True)
    pairs, val_pairs = [], []
    for a, b in itertools.combinations(info, 2):
        ta, tb = info[a][0], info[b][0]
        if ta.axes.get("seed") == tb.axes.get("seed") and ta.axes.get("lr") == tb.axes.get("lr"):
            pairs.append((a, b, info[a][1], info[b][1]))
        if ta.variant == tb.variant and ta.axes.get("seed") == tb.axes.get("seed") and ta.axes.get("lr") != tb.axes.get("lr"):
            val_pairs.append((a, b, info[a][1], info[b][1]))
    if not val_pairs:  # one rate only: the validation differences of the cells, as on the test split
        val_pairs = list(pairs)
    curves = [(tid, T) for tid, (_, _, T) in info.items() if T]
    mb = trials[0].config.train.micro_batch_size
    return per_seq, pairs, curves, val_pairs, mb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", default="recursion_ablation", help="sweep whose trials are read (default: recursion_ablation)")
    p.add_argument("--scale", default="tiny", help="scale of the trials (default: tiny; a ladder rung: workstation-tpp5)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default: 0 1)")
    p.add_argument("--cells", nargs="*", default=["llama", "cem-attn T2 dplr eta=1", "cem-mlp T2 dplr eta=1"],
                   help="variant labels (or parts of them) to read (default: Llama and both T=2 eta=1 cells)")
    p.add_argument("--lrs", type=float, nargs="*", default=None, help="learning rates to keep (default: all of the scale's)")
    p.add_argument("--runs", default=None, help="runs folder with the trials' checkpoints (missing ones are trained "
                   "into it; default: a fresh temporary folder)")
    p.add_argument("--max-batches", type=int, default=64, help="batches of each split to evaluate (default: 64)")
    p.add_argument("--csv", default=None, help="write the table here")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cemlab bench evalnoise", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.max_batches < 2:
        print("--max-batches must be at least 2", file=sys.stderr)
        return 2
    runs = Path(args.runs or tempfile.mkdtemp(prefix="cemlab-evalnoise-")).resolve()
    os.environ["CEMLAB_RUNS_DIR"] = str(runs)
    trials = _trials(args.sweep, args.scale, args.seeds, args.cells)
    if args.lrs:
        trials = [t for t in trials if any(math.isclose(t.axes.get("lr", math.nan), lr) for lr in args.lrs)]
    if not trials:
        print(f"no trial of {args.sweep} at {args.scale} matches --cells {args.cells}", file=sys.stderr)
        return 2
    _train_missing(trials, runs, f"sqlite:///{runs}/mlflow.db")
    per_seq, pairs, curves, val_pairs, mb = measure(trials, runs, args.max_batches)
    rows = noise_table(per_seq, pairs, curves, val_pairs, mb, args.max_batches)
    for r in rows:
        r["scale"] = args.scale
    print(f"{'quantity':<11} {'batches':>7} {'sequences':>9} {'SE (pooled)':>11} {'SE (max)':>9} {'n':>3}")
    for r in rows:
        print(f"{r['quantity']:<11} {r['batches']:>7} {r['sequences']:>9} {r['se']:>11.5f} {r['se_max']:>9.5f} {r['n']:>3}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["scale", "quantity", "batches", "sequences", "se", "se_max", "n"])
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
