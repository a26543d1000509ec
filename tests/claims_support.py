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


def crafted_verdicts(values, sweeps: dict[str, list[str]] | None = None, val=None) -> dict[str, verdicts.Verdict]:
    trials = crafted_trials(values, val)
    cells = aggregate(trials)
    empty = pd.DataFrame(columns=cells.columns)
    out = verdicts.evaluate([c for c in claims.CLAIMS if c.id == "t2-beats-t1"],
                            lambda s: cells if s == "recursion_ablation" else empty, "tiny",
                            lambda s: trials if s == "recursion_ablation" else trials.iloc[:0], sweeps=sweeps)
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
