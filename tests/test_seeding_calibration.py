"""The sequential seeding's error rates, by simulation of the report's own decision code.

Per-seed test perplexities of three CEM-attention cells (T=1 eta=1, T=2 eta=1, T=2 eta=1/T: the
two conditions of ``t2-beats-t1``) are drawn with a seed effect shared by the cells and a noise of
their own, and the look loop of a seeded sweep runs on them as the driver runs it: the report's
``verdicts.evaluate`` through ``cemlab.report.look.LookLoop`` on the first ``n_j`` seeds at
``alpha / K`` (a comparison decided at a look keeps its verdict), seeds added only to the cells of
inconclusive comparisons, until nothing is open or the last look. No training, seconds.

- every true effect zero: each wrong direction (supported, or contradicted) at most alpha / 2
  per claim condition, within Monte-Carlo error; with 500 replications or more, the same draws
  judged at the full alpha at every look (no correction) are shown beside it;
- a true effect of 1 sd of the paired log difference: power and seeds used, printed beside the
  fixed 3-seed design (``pytest -s`` shows them).

``CEMLAB_CALIBRATION_REPS`` sets the replications (default 100; docs/verdicts.md quotes a run with
more).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from cemlab.report import claims
from cemlab.report.look import LookLoop
from cemlab.report.sequential import ALPHA, look_alpha
from cemlab.report.stats import CONTRADICTED, SUPPORTED
from cemlab.sweeps.spec.load import load_sweep
from sweep_support import REPO_SWEEPS

SWEEP = "recursion_ablation"
CLAIM = [c for c in claims.CLAIMS if c.id == "t2-beats-t1"]
CELLS = [(1, "1"), (2, "1"), (2, "1/T")]
#: The main job's plan at tiny, read from its sweep file: 3 seeds, then 5 more where open (two looks).
LOOKS = load_sweep(REPO_SWEEPS / f"{SWEEP}.yaml").seeding.looks("tiny", [0, 1, 2])
REPS = int(os.environ.get("CEMLAB_CALIBRATION_REPS", "100"))
SIGMA_CELL = 0.02    # a cell's own noise (log perplexity) per seed
SIGMA_SEED = 0.03    # the noise the cells share at a seed (data order, init): pairing removes it
SIGMA_DIFF = SIGMA_CELL * math.sqrt(2)   # sd of a paired log difference


def _cell_id(T: int, eta: str) -> str:
    return json.dumps({"T": T, "eta": eta, "lr": 2e-3, "precond": "dplr", "size": "86m", "sweep": SWEEP},
                      sort_keys=True)


def trials_frame(values: dict[tuple, np.ndarray]) -> pd.DataFrame:
    """Finished trials of the cells ``(T, eta)`` -> per-seed test perplexities, as ``table.join_trials``
    makes them (the columns the recursion rules read)."""
    rows = []
    for (T, eta), vals in values.items():
        for seed, v in enumerate(vals):
            rows.append(dict(order=len(rows), sweep=SWEEP, figure="Fig 2c", scale="tiny", family="cem-attn",
                             group="cem-attn", variant=f"cem-attn T{T} dplr eta={eta}", size="86m", task="lm",
                             metric="test/ppl", lr=2e-3, T=T, precond="dplr", kq_diagonal="shared", kernel="",
                             param_matched=False, eta=eta, x0="h", corpus="stdlib", cell=_cell_id(T, eta), seed=seed,
                             val=float(v), status="finished", run_id=f"r{len(rows)}", value=float(v),
                             params_total=1e5, token_budget=5e5, total_steps=400.0, train_tokens=2e5,
                             flops_per_token=1.0, params_attention=1.0, params_mlp=1.0, params_embedding=1.0,
                             flops_per_example=math.nan))
    return pd.DataFrame(rows)


def draw(rng, effects: dict[tuple, float], n: int) -> dict[tuple, np.ndarray]:
    """``n`` seeds of every cell, fixed before any look (look j reads the first n_j)."""
    shared = rng.normal(0.0, SIGMA_SEED, n)
    return {c: 30.0 * np.exp(effects.get(c, 0.0) + shared + rng.normal(0.0, SIGMA_CELL, n)) for c in CELLS}


def run_looks(values: dict[tuple, np.ndarray], looks: list[list[int]], alpha: float) -> tuple[dict, int]:
    """The driver's look loop on ``values``: ``({condition: verdict}, trials used)``."""
    have = {c: len(looks[0]) for c in CELLS}
    by_id = {_cell_id(*c): c for c in CELLS}
    loop = LookLoop(CLAIM, "tiny", SWEEP, looks, alpha)
    for j in range(len(looks)):
        frame = trials_frame({c: v[:have[c]] for c, v in values.items()})
        look = loop.look(j, lambda s: frame if s == SWEEP else frame.iloc[:0])
        if j == len(looks) - 1 or not look.open_cells:
            break
        for cid in look.open_cells:
            have[by_id[cid]] = len(looks[j + 1])
    return {v.condition: v.verdict for v in loop.verdicts}, sum(have.values())


def rates(effects: dict[tuple, float], looks: list[list[int]], alpha: float, reps: int, seed: int):
    """Per condition: P(supported), P(contradicted); and the mean trials per replication."""
    rng = np.random.default_rng(seed)
    counts: dict[str, list[int]] = {}
    used = 0
    for _ in range(reps):
        verdicts, n = run_looks(draw(rng, effects, len(looks[-1])), looks, alpha)
        used += n
        for cond, v in verdicts.items():
            c = counts.setdefault(cond, [0, 0])
            c[0] += v == SUPPORTED
            c[1] += v == CONTRADICTED
    return {cond: (s / reps, k / reps) for cond, (s, k) in counts.items()}, used / reps


def test_looks_plan_is_the_main_jobs():
    assert LOOKS == [[0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]]
    assert look_alpha(len(LOOKS)) == pytest.approx(ALPHA / 2)


def test_with_every_effect_zero_each_wrong_direction_stays_within_alpha_over_two():
    seq, seeds = rates({}, LOOKS, look_alpha(len(LOOKS)), REPS, seed=1)
    # the same draws with every look at the full alpha (no correction), in the longer runs only
    naive = rates({}, LOOKS, ALPHA, REPS, seed=1)[0] if REPS >= 500 else {c: (math.nan, math.nan) for c in seq}
    print(f"\nall effects zero, {REPS} replications, {seeds / len(CELLS):.2f} seeds per cell on average")
    bound = ALPHA / 2 + 2.33 * math.sqrt(ALPHA / 2 * (1 - ALPHA / 2) / REPS)  # one-sided 99% Monte-Carlo margin
    assert len(seq) == 2
    for cond, (sup, con) in seq.items():
        print(f"  {cond}: false supported {sup:.3f}, false contradicted {con:.3f} "
              f"(uncorrected looks: {naive[cond][0]:.3f}, {naive[cond][1]:.3f}); nominal {ALPHA / 2:.3f} each")
        assert sup <= bound and con <= bound, (cond, sup, con, bound)
        if REPS >= 500:
            assert naive[cond][0] >= sup and naive[cond][1] >= con   # the correction only removes decisions
    # the loop did add seeds: under the null most comparisons stay open after look 0
    assert seeds > len(CELLS) * len(LOOKS[0])


def test_power_and_seeds_used_at_a_true_effect_of_one_sd_beside_the_fixed_three_seed_design():
    effects = {(2, "1"): -SIGMA_DIFF, (2, "1/T"): -SIGMA_DIFF}   # T=2 better by 1 sd at both conditions
    reps = max(40, REPS // 3)
    seq, seq_trials = rates(effects, LOOKS, look_alpha(len(LOOKS)), reps, seed=2)
    fixed, fixed_trials = rates(effects, [LOOKS[0]], ALPHA, reps, seed=2)
    most, _ = rates(effects, [LOOKS[-1]], ALPHA, reps, seed=2)   # the budget everywhere, no looks: the bound's cost
    print(f"\ntrue effect 1 sd (paired log ppl), {reps} replications: P(supported) per condition")
    for cond in seq:
        print(f"  {cond}: sequential (3 -> {len(LOOKS[-1])} seeds, alpha/{len(LOOKS)} per look) {seq[cond][0]:.2f}, "
              f"fixed 3 seeds (alpha) {fixed[cond][0]:.2f}, fixed {len(LOOKS[-1])} seeds (alpha) {most[cond][0]:.2f}")
    print(f"  seeds per cell: sequential {seq_trials / len(CELLS):.2f}, fixed {fixed_trials / len(CELLS):.2f}")
    assert fixed_trials == 3 * len(CELLS) and 3 * len(CELLS) <= seq_trials <= len(LOOKS[-1]) * len(CELLS)
    for cond in seq:
        assert seq[cond][1] == 0 and fixed[cond][1] == 0   # never the wrong way at 1 sd
        assert seq[cond][0] > fixed[cond][0]    # more seeds where open buy power despite alpha/2
