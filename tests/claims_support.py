"""Crafted trials of the recursion_ablation grid for the claim tests: cells (T, eta[, precond[, lr]])
with per-seed test (and validation) perplexities, as ``table.join_trials`` makes them, judged by the
report's own ``verdicts.evaluate``."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from cemlab.report.claims import catalog as claims, verdicts
from cemlab.report.inputs.table import aggregate

#: The chance value of the crafted trials' metric (the vocabulary size: the uniform predictor's perplexity).
CHANCE = 512.0


def crafted_trials(values: dict[tuple, list[float]], val: dict[tuple, list[float]] | None = None) -> pd.DataFrame:
    """Trials of cem-attn cells (T, eta[, precond[, lr]]) -> per-seed test perplexities (and
    validation perplexities ``val``, else none), as ``table.join_trials`` makes them: NaN is a
    diverged run, None a failed one."""
    rows = []
    for key, vals in values.items():
        T, eta, precond, lr = (*key, "dplr", 2e-3)[:4] if len(key) == 2 else (*key, 2e-3)[:4]
        vv = (val or {}).get(key, [math.nan] * len(vals))
        for seed, (v, w) in enumerate(zip(vals, vv)):
            status = "failed" if v is None else "finished" if math.isfinite(v) else "diverged"
            v = math.nan if v is None else v
            cell = json.dumps({"T": T, "eta": eta, "precond": precond, "size": "86m", "sweep": "recursion_ablation",
                               "lr": lr}, sort_keys=True)
            rows.append(dict(order=len(rows), sweep="recursion_ablation", figure="Fig 2c", scale="tiny",
                             family="cem-attn", group="cem-attn", variant=f"cem-attn T{T} {precond} eta={eta}",
                             size="86m", task="lm", metric="test/ppl", lr=lr, T=T, precond=precond,
                             kq_diagonal="shared", kernel="", param_matched=False, eta=eta, x0="h", corpus="stdlib",
                             cell=cell, seed=seed, val=w,
                             status=status, run_id=f"r{len(rows)}", value=v, chance=CHANCE,
                             params_total=1e5, token_budget=5e5, total_steps=400.0, train_tokens=2e5,
                             flops_per_token=1.0,
                             params_attention=1.0, params_mlp=1.0, params_embedding=1.0, flops_per_example=math.nan))
    return pd.DataFrame(rows)


def crafted_verdicts(values, sweeps: dict[str, list[str]] | None = None, val=None, selection_seeds=None,
                     alpha: float = verdicts.ALPHA) -> dict[str, verdicts.Verdict]:
    """``t2-beats-t1`` judged on ``crafted_trials`` by ``verdicts.evaluate`` (``selection_seeds``: the
    union rule of a sweep with a confirmation stage, rates chosen on those seeds)."""
    trials = crafted_trials(values, val)
    cells = aggregate(trials)
    empty = pd.DataFrame(columns=cells.columns)
    out = verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                            lambda s: cells if s == "recursion_ablation" else empty, "tiny",
                            lambda s: trials if s == "recursion_ablation" else trials.iloc[:0], sweeps=sweeps,
                            selection_seeds=selection_seeds, alpha=alpha)
    return {v.condition: v for v in out}


#: A learning-rate curve with its optimum at 2e-3: the factor on the perplexity at each rate.
CURVE_AT_2E3 = {1e-3: 1.06, 2e-3: 1.0, 4e-3: 1.03, 8e-3: 1.08}
BRACKETED = (1e-3, 2e-3, 4e-3)      # 2e-3 inside: bracketed
AT_HIGHEST = (1e-3, 2e-3)           # best at its highest rate
AT_LOWEST = (2e-3, 4e-3)            # best at its lowest rate


def curve_grid(t2_factor: float, t1_rates, t2_rates, noise: float = 0.01, rng_seed: int = 60) -> dict:
    """T=1 and T=2 (eta=1, dplr) over 6 seeds, each at its own rates, on the curve ``CURVE_AT_2E3``
    (a seed effect shared by every cell, a run's own noise of ``noise``), T=2 ``t2_factor`` times T=1."""
    rng = np.random.default_rng(rng_seed)
    base = 150.0 * np.exp(rng.normal(0.0, 0.03, 6))
    out = {}
    for T, f, rates in ((1, 1.0, t1_rates), (2, t2_factor, t2_rates)):
        for lr in rates:
            out[(T, "1", "dplr", lr)] = list(base * f * CURVE_AT_2E3[lr] * np.exp(rng.normal(0.0, noise, 6)))
    return out


def crafted_check(grid, val=None):
    (ch,) = crafted_verdicts(grid, val=val)["same per-step eta=1"].checks
    return ch


def noisy(base, factors):
    return [b * f for b, f in zip(base, factors)]


LR_GRID_RATES = (1e-3, 2e-3, 4e-3, 8e-3)


def lr_grid():
    """T=1 and T=2 at four learning rates, with seed noise. Validation prefers lr 4e-3 for both, the
    rates either side of it worse (each optimum bracketed); at 2e-3 T=2 looks best on test (a choice
    on test would pick it)."""
    t1 = [30.0, 31.0, 29.5, 30.2]
    n = (1.0, 1.004, 0.997, 1.002)
    test = {(1, "1", "dplr", 1e-3): noisy(t1, [1.06 * x for x in n[::-1]]),
            (1, "1", "dplr", 2e-3): noisy(t1, [1.02 * x for x in n]), (1, "1", "dplr", 4e-3): t1,
            (1, "1", "dplr", 8e-3): noisy(t1, [1.04 * x for x in n]),
            (2, "1", "dplr", 1e-3): noisy(t1, [1.08 * x for x in n]),
            (2, "1", "dplr", 2e-3): noisy(t1, [0.90 / x for x in n]),
            (2, "1", "dplr", 4e-3): noisy(t1, [1.03 * x for x in n[::-1]]),
            (2, "1", "dplr", 8e-3): noisy(t1, [1.06 * x for x in n[::-1]])}
    val = {(1, "1", "dplr", 1e-3): [x * 1.09 for x in t1], (1, "1", "dplr", 2e-3): [x * 1.05 for x in t1],
           (1, "1", "dplr", 4e-3): t1, (1, "1", "dplr", 8e-3): [x * 1.06 for x in t1],
           (2, "1", "dplr", 1e-3): [x * 1.15 for x in t1], (2, "1", "dplr", 2e-3): [x * 1.10 for x in t1],
           (2, "1", "dplr", 4e-3): [x * 1.04 for x in t1], (2, "1", "dplr", 8e-3): [x * 1.08 for x in t1]}
    return test, val


def unexplained_outside(df: pd.DataFrame, effect: str, low: str, high: str, reason: str) -> tuple:
    """Rows of a report's table read back (claims.csv, comparisons.csv) whose ``effect`` lies outside
    [``low``, ``high``] (an end that is empty or infinite bounds nothing) with the ``reason`` column
    empty, and the rows outside with a reason, as two frames."""
    e, lo, hi = (pd.to_numeric(df[c], errors="coerce") for c in (effect, low, high))
    out = (e < lo - 1e-12) | (e > hi + 1e-12)
    why = df[reason].fillna("").astype(str).str.strip() != ""
    return df[out & ~why], df[out & why]
