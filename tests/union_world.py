"""The design study's world (docs/tuned-design-study.md, scripts/tuned-design-study.py) in the main
job's 9 cells, and the main job's tuned comparisons (the union rule) run on it twice: through
cemlab's own code (:func:`cemlab_loop`) and as a vectorised numpy copy (:func:`fast`) that
tests/test_union_calibration.py checks against it draw by draw before using it for many draws.

**The world.** Per seed, a run's log perplexity is its cell's effect + the learning-rate curve at its
rate + a seed effect (sd 0.03, shared by every cell and rate at that seed) + its own noise (sd 0.02);
1 sd = 0.02 sqrt(2), the sd of a paired difference. Rates 5e-4 ... 1.6e-2 by factors of 2; the
validation metric is the test metric; a diverged run has status ``diverged`` and no value. A case
gives the *reference* cells (Llama, every T=1 cell) one curve and the *variant* cells (every T=2
cell) another, with an effect and a divergence probability per rate each: the primary comparisons
(T=2 eta=1 vs T=1 eta=1, attention and MLP) are the study's A (reference) and B (favoured).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import stdtr

from cemlab.paper import SESOI
from cemlab.report.claims.catalog import claims_for
from cemlab.report.claims.verdicts import evaluate
from cemlab.report.inputs.table import aggregate, trial_row
from cemlab.report.looks.confirmation_look import comparison_graph, confirmation_plan, share_rates
from cemlab.report.stats.bracketing import family_edges, tuning_family
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.tuning_policy import STEP, Tried, steps_taken

SWEEP = "recursion_ablation"
SPEC = load_sweep(Path(__file__).resolve().parents[1] / "sweeps" / f"{SWEEP}.yaml")
GRID = SPEC.expand("tiny")
POLICY = SPEC.tuning_policy("tiny", GRID)
RATIO, BOUNDS = SPEC.rate_ratio("tiny", GRID), tuple(SPEC.tuning.bounds)
BUDGET, ALPHA, PRIMARY = SPEC.confirmation_budget("tiny", GRID), SPEC.confirmation.alpha, SPEC.confirmation.primary
PRIMARY_SEEDS = SPEC.primary_seeds("tiny")   # the primary condition's fixed fresh seeds
SELECTION = [int(s) for s in SPEC.looks("tiny", GRID)[0]]
#: The claims of the main job with comparisons at tiny (precond-t2-not-t1 has no diag cell there and
#: test-time-recursion reads run histories: neither adds a confirmation pair, which the tests check).
CLAIMS = [c for c in claims_for(SPEC.claims) if c.id in ("t2-beats-t1", "cem-attn-t2-beats-llama", "small-step-t1")]

SC, SS = 0.02, 0.03
SD = SC * math.sqrt(2)
RATES = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
L2 = np.log2(RATES)
GRID_IDX = (2, 3)
OPT = 4e-3 * 2 ** 0.2
CURV = SD / (math.log2(2e-3 / OPT) ** 2 - math.log2(4e-3 / OPT) ** 2)
HI = (np.array(RATES) >= 4e-3).astype(float)
FLAT = np.zeros(len(RATES))
BASE, CHANCE = 150.0, 2048.0
MARGIN = math.log1p(SESOI)
SEEDS = 24        # drawn per cell and rate: 2 selection seeds and at most 22 fresh ones (n + extra)
CHUNK = 500       # draws come in chunks of fixed seeds: the first k draws do not depend on how many


def quad(opt: float = OPT, k: float = 1.0) -> np.ndarray:
    """The study's curve: quadratic in log2(lr), 2e-3 1 sd worse than 4e-3 at the default optimum (x ``k``)."""
    return k * CURV * (L2 - math.log2(opt)) ** 2


def cliff(k: float) -> np.ndarray:
    """Flat to 4e-3, 8e-3 better by ``k`` sd, 1.6e-2 3 sd above 8e-3."""
    c = np.zeros(len(RATES))
    c[4], c[5] = -k * SD, -k * SD + 3 * SD
    return c


# ------------------------------------------------------------------ the job's cells and comparisons
_ROWS = [trial_row(t, i) for i, t in enumerate(SPEC.expand("tiny", overrides=[
    f"lr=[{','.join(f'{r:g}' for r in RATES)}]", f"seed=[{SELECTION[0]}]"]))]
CELLS = ("llama", "aT1e1", "aT1eh", "aT2e1", "aT2eh", "mT1e1", "mT1eh", "mT2e1", "mT2eh")


def _name(row: dict) -> str:
    if row["family"] == "llama":
        return "llama"
    return f"{row['family'][4]}T{row['T']}e{'1' if str(row['eta']) == '1' else 'h'}"


def rate_idx(lr: float) -> int:
    return next(k for k, r in enumerate(RATES) if math.isclose(lr, r, rel_tol=1e-6))


#: (cell index, rate index) -> the trial row cemlab's table gives it (``table.trial_row``), its grid order.
TEMPLATE = {(CELLS.index(_name(r)), rate_idx(r["lr"])): (i, r) for i, r in enumerate(_ROWS)}
FAMILY = [tuning_family(TEMPLATE[(i, 2)][1]["cell"]) for i in range(len(CELLS))]
VARIANT = tuple(i for i, c in enumerate(CELLS) if c[1:3] == "T2")
#: The fast copy's comparisons (claim, condition, label, reference A, favoured B), in cemlab's order.
COMPARISONS = (
    ("t2-beats-t1", "same per-step eta=1", "cem-attn 86m dplr same per-step eta=1", 1, 3),
    ("t2-beats-t1", "same per-step eta=1", "cem-mlp 86m dplr same per-step eta=1", 5, 7),
    ("t2-beats-t1", "same per-step eta=0.5", "cem-attn 86m dplr same per-step eta=0.5", 2, 4),
    ("t2-beats-t1", "same per-step eta=0.5", "cem-mlp 86m dplr same per-step eta=0.5", 6, 8),
    ("t2-beats-t1", "same total step T*eta=1", "cem-attn 86m dplr same total step T*eta=1", 1, 4),
    ("t2-beats-t1", "same total step T*eta=1", "cem-mlp 86m dplr same total step T*eta=1", 5, 8),
    ("cem-attn-t2-beats-llama", "eta=1", "86m eta=1", 0, 3),
    ("cem-attn-t2-beats-llama", "eta=0.5", "86m eta=0.5", 0, 4),
    ("small-step-t1", "", "cem-attn 86m dplr T=1 eta=0.5 vs eta=1", 1, 2),
    ("small-step-t1", "", "cem-attn 86m dplr T=1 eta=0.5 vs Llama", 0, 2),
    ("small-step-t1", "", "cem-mlp 86m dplr T=1 eta=0.5 vs eta=1", 5, 6),
    ("small-step-t1", "", "cem-mlp 86m dplr T=1 eta=0.5 vs Llama", 0, 6),
)
PRIMARY_CMP = (0, 1)    # t2-beats-t1's primary condition: attention and MLP, T=2 eta=1 vs T=1 eta=1
CONDITIONS = {}
for _k, (_c, _cond, *_rest) in enumerate(COMPARISONS):
    CONDITIONS.setdefault((_c, _cond), []).append(_k)
ADJ = np.zeros((len(CELLS), len(CELLS)), dtype=int)
for *_x, _a, _b in COMPARISONS:
    ADJ[_a, _b] = ADJ[_b, _a] = 1
WORDS = ("inconclusive", "supported", "contradicted", "negligible")


def case(ref, var=None, eff: float = 0.0, div_ref=0.0, div_var=0.0) -> dict:
    """A world: the reference cells on curve ``ref``, the variant (T=2) cells on ``var`` (default the
    same) with effect ``eff`` (log scale, negative = better), each run diverging with probability
    ``div_ref`` / ``div_var`` (a number, or one per rate)."""
    var = ref if var is None else var
    vr = [i in VARIANT for i in range(len(CELLS))]
    return dict(curves=np.stack([var if v else ref for v in vr]),
                eff=np.array([eff if v else 0.0 for v in vr]),
                div=np.stack([np.broadcast_to(div_var if v else div_ref, len(RATES)) for v in vr]))


def draw(c: dict, reps: int, seed: int, skip: int = 0) -> np.ndarray:
    """(reps, 9 cells, 6 rates, SEEDS) test perplexities, NaN where the run diverged. Chunk k of
    ``CHUNK`` draws comes from the seed (seed, k) whatever the case: common random numbers across cases;
    ``skip``: start at chunk ``skip``."""
    out = []
    for k in range(skip, skip - (-reps // CHUNK)):
        rng = np.random.default_rng([seed, k])
        shared = rng.normal(0.0, SS, (CHUNK, 1, 1, SEEDS))
        own = rng.normal(0.0, SC, (CHUNK, len(CELLS), len(RATES), SEEDS))
        u = rng.random((CHUNK, len(CELLS), len(RATES), SEEDS))
        v = BASE * np.exp(c["eff"][None, :, None, None] + c["curves"][None, :, :, None] + shared + own)
        v[u < c["div"][None, :, :, None]] = np.nan
        out.append(v)
    return np.concatenate(out)[:reps]


# ------------------------------------------------------------------ the loop through cemlab
def frame(v: np.ndarray, have) -> pd.DataFrame:
    """The trial table the report reads (``table.join_trials``' columns) of draw ``v`` for ``have``:
    (cell, rate index, seeds) triples."""
    rows = []
    for i, k, seeds in have:
        order, row = TEMPLATE[(i, k)]
        for s in seeds:
            x = float(v[i, k, s])
            rows.append({**row, "order": order * 100 + s, "seed": s, "run_id": f"r{i}.{k}.{s}",
                         "status": "finished" if math.isfinite(x) else "diverged", "value": x, "val": x,
                         "chance": CHANCE, "params_total": 1e5, "token_budget": 5e5, "total_steps": 400.0,
                         "train_tokens": 2e5, "flops_per_token": 1.0, "params_attention": 1.0, "params_mlp": 1.0,
                         "params_embedding": 1.0, "flops_per_example": math.nan})
    return pd.DataFrame(rows)


def judge(t: pd.DataFrame, claims=None, final: bool = True) -> list:
    """``verdicts.evaluate`` on the trial table ``t`` as the report judges a sweep with confirmation
    (``final``: at the file's alpha; else as ``confirmation_look.selection_verdicts`` chooses)."""
    cells = aggregate(t)
    return evaluate(claims or CLAIMS, lambda s: cells if s == SWEEP else cells.iloc[:0], "tiny",
                    lambda s: t if s == SWEEP else t.iloc[:0], None, sensitivity=False, selection_seeds=SELECTION,
                    **({"alpha": ALPHA} if final else {}))


def grid_frame(v: np.ndarray) -> pd.DataFrame:
    return frame(v, [(i, k, SELECTION) for i in range(len(CELLS)) for k in GRID_IDX])


def cemlab_loop(v: np.ndarray, graph: dict) -> dict:
    """The main job on draw ``v`` (9, 6, SEEDS) through cemlab: the grid on the selection seeds; the
    bracketing step as ``interim_look_store.sweep_bracket`` takes it (``family_edges``, the sweep
    file's policy's ``judge``, ``share_rates`` over the comparison graph ``graph``); the confirmation
    stage's arithmetic (``confirmation_plan`` on the selection verdicts, as ``sweep_confirm``); the
    final verdicts on the fresh seeds (``verdicts.evaluate`` with ``selection_seeds``)."""
    grid = [(i, k, SELECTION) for i in range(len(CELLS)) for k in GRID_IDX]
    own, have = {}, {}
    for r in family_edges(frame(v, grid)).itertuples():
        nxt = POLICY.judge(Tried(tuple(r.lrs), tuple(r.scores), steps_taken(POLICY.grid, r.lrs)))
        have[r.family] = [float(x) for x in r.lrs]
        if nxt.state == STEP:
            own[r.family] = {float(x) for x in nxt.rates}
    added = share_rates(own, have, graph, RATIO, BOUNDS) if own else {}
    rates = [sorted({rate_idx(x) for x in [*have[f], *added.get(f, ())]}) for f in FAMILY]
    sel = grid + [(i, k, SELECTION) for i, rs in enumerate(rates) for k in rs if k not in GRID_IDX]
    t = frame(v, sel)
    selection = judge(t, final=False)
    plan = confirmation_plan(selection, BUDGET, len(t), SELECTION, PRIMARY, PRIMARY_SEEDS)
    fresh = [(FAMILY.index(f), rate_idx(r), seeds) for key, seeds in (("pairs", plan["base_seeds"]),
                                                                      ("primary_pairs", plan["extra_seeds"]))
             for f, rs in plan[key].items() for r in sorted(rs)]
    t = frame(v, sel + fresh)
    out = dict(rates=rates, plan=plan, trials=len(t), graph=comparison_graph(selection), checks={}, verdicts={})
    for verdict in judge(t):
        out["verdicts"][(verdict.id, verdict.condition)] = verdict.verdict
        for ch in verdict.checks:
            lrs = [json.loads(c)["lr"] for c in ch.cell_ids]
            pick = ch.confirmation.chosen
            chosen = (rate_idx(lrs[pick[0]]), rate_idx(lrs[ch.n_choices[0] + pick[1]]))
            e = ch.evidence
            out["checks"][(verdict.id, verdict.condition, ch.label)] = dict(
                word=ch.verdict, chosen=chosen, p=(e.p_claim, e.p_against, e.p_negligible), n=ch.iv.n,
                families=(tuning_family(ch.cell_ids[0]), tuning_family(ch.cell_ids[-1])))
    return out


# ------------------------------------------------------------------ the fast copy
_POP = np.array([bin(m).count("1") for m in range(64)])


def _pvals(d: np.ndarray, m: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """``significance.t_pvalues`` on the first ``m`` columns of each row of ``d`` (NaN -> 1, as
    ``decision.every_choice_p`` reads it): (p below ``tol``, p above)."""
    mask = np.arange(d.shape[1])[None] < m[:, None]
    mean = np.where(mask, d, 0.0).sum(1) / m
    sd = np.sqrt(np.where(mask, (d - mean[:, None]) ** 2, 0.0).sum(1) / np.maximum(m - 1, 1))
    ok = (m >= 2) & (sd > 1e-12 * np.maximum(1.0, np.abs(mean)))
    t = np.where(ok, (mean - tol) / np.where(ok, sd, 1.0) * np.sqrt(m), 0.0)
    return np.where(ok, stdtr(np.maximum(m - 1, 1), t), 1.0), np.where(ok, stdtr(np.maximum(m - 1, 1), -t), 1.0)


def _diffs(a: np.ndarray, b: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``bounds.paired_diffs_by_seed`` of log(B / A) on the first ``m`` fresh seeds (inf: diverged), the
    tests' point at 0: a divergence of one side scored at sum(d^2) / sum(d) over the seeds where both
    finished when those lean against it (the t statistic's maximiser), else as the worst finished run of
    the two at those seeds; at least beyond the margin; both diverged, or nothing finished: 0."""
    mask = np.arange(a.shape[1])[None] < m[:, None]
    both = np.concatenate([np.where(mask, a, -np.inf), np.where(mask, b, -np.inf)], 1)
    w = np.where(np.isfinite(both), both, -np.inf).max(1)[:, None]
    ai, bi = np.isinf(a), np.isinf(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        done = np.where(mask & ~ai & ~bi, b - a, 0.0)
        s1, s2 = done.sum(1)[:, None], (done ** 2).sum(1)[:, None]
        peak = s2 / np.where(s1 != 0, s1, 1.0)
        up = np.where(s1 > 0, peak, w - a)
        down = np.where(s1 < 0, peak, b - w)
        d = np.where(bi & ~ai, np.maximum(up, MARGIN), np.where(ai & ~bi, np.minimum(down, -MARGIN), b - a))
    return np.where((ai & bi) | ~np.isfinite(w), 0.0, d)


def _required_p(pairs: list, m: np.ndarray, j: int, tol: float) -> np.ndarray:
    """``decision.every_choice_p`` of a direction (``j``: 0 below, 1 above ``tol``) over its required
    choices, (differences, required) pairs: the largest p-value (no Bonferroni factor on fresh seeds)."""
    return np.max([np.where(req, _pvals(d, m, tol)[j], 0.0) for d, req in pairs], 0)


def _holm(p: np.ndarray, a: float) -> np.ndarray:
    """``decision.holm`` along the last axis."""
    k = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    ok = np.take_along_axis(p, order, 1) <= a / (k - np.arange(k))
    out = np.zeros_like(ok)
    np.put_along_axis(out, order, np.cumprod(ok, axis=1).astype(bool), 1)
    return out


def fast(v: np.ndarray, seeds: tuple | None = None) -> dict:
    """The same procedure as :func:`cemlab_loop` on draws ``v`` (R, 9, 6, SEEDS), in numpy. ``seeds``:
    (n, extra) per draw to judge on instead of those the budget buys (the rule at fixed seeds)."""
    R, nc = v.shape[:2]
    rep = np.arange(R)
    logs = np.log(v)
    logs[np.isnan(logs)] = np.inf                       # a divergence: the worst outcome
    s = np.sort(logs[..., :2], -1)
    edge = s[..., 0] / 2 + s[..., 1] / 2                 # bracketing.rate_score (its median)
    score = (s[..., 0] + s[..., 1]) / 2                  # confirmation.selection_score (np.median)
    e2, e3 = edge[:, :, 2], edge[:, :, 3]
    f2, f3 = np.isfinite(e2), np.isfinite(e3)
    down = (~f2 & ~f3) | (f2 & (~f3 | (e2 <= e3)))      # best at the lower rate, or no finite rate
    lo = np.where(down | (down.astype(int) @ ADJ > 0), 1, 2)          # shared with compared cells
    hi = np.where(~down | ((~down).astype(int) @ ADJ > 0), 4, 3)
    idx = np.arange(len(RATES))
    inside = (idx >= lo[..., None]) & (idx <= hi[..., None])
    sc = np.where(inside, score, np.inf)
    chosen = np.where(np.isfinite(sc).any(-1), np.argmin(sc, -1), lo)   # ties, or all diverged: the lowest
    dead = inside & np.isinf(logs[..., :2]).all(-1)
    mask = np.zeros((R, nc), dtype=int)
    for *_x, a, b in COMPARISONS:
        u = (1 << chosen[:, a]) | (1 << chosen[:, b])
        mask[:, a] |= u
        mask[:, b] |= u
    c = _POP[mask].sum(1)
    spent = 2 * (hi - lo + 1).sum(1)
    cp = sum(2 * _POP[(1 << chosen[:, COMPARISONS[k][3]]) | (1 << chosen[:, COMPARISONS[k][4]])] for k in PRIMARY_CMP)
    if PRIMARY_SEEDS is not None:   # confirmation_plan: the primary pairs' seeds first, the rest share what is left
        tp = np.minimum(PRIMARY_SEEDS, (BUDGET - spent) // cp)
        rest = c - cp
        n = np.where(rest > 0, np.minimum(tp, (BUDGET - spent - tp * cp) // np.maximum(rest, 1)), tp)
        extra = tp - n
    else:
        n = (BUDGET - spent) // c
        extra = np.where(n > 0, (BUDGET - spent - n * c) // cp, 0)
    if seeds is not None:
        n, extra = seeds
    fresh = logs[..., SELECTION[-1] + 1:]

    def at(cell: int, r: np.ndarray) -> np.ndarray:     # a cell's fresh seeds at a rate per draw
        return fresh[rep, cell, r]

    p = np.ones((R, len(COMPARISONS), 3))
    for k, (*_x, a, b) in enumerate(COMPARISONS):
        m = n + extra if k in PRIMARY_CMP else n
        ca, cb = chosen[:, a], chosen[:, b]
        d0 = _diffs(at(a, ca), at(b, cb), m)
        # the required choices (UnionChoice.required): 'below' B at its chosen rate against A at each rate of
        # the union, 'above' the mirror; a union rate where every selection run of the cell to be beaten
        # diverged is not required, its own chosen rate always is
        below = [(d0, True), (_diffs(at(a, cb), at(b, cb), m), (cb != ca) & ~dead[rep, a, cb])]
        above = [(d0, True), (_diffs(at(a, ca), at(b, ca), m), (ca != cb) & ~dead[rep, b, ca])]
        p[:, k, 0], p[:, k, 1] = _required_p(below, m, 0, 0.0), _required_p(above, m, 1, 0.0)
        p[:, k, 2] = np.maximum(_required_p(below, m, 0, MARGIN), _required_p(above, m, 1, -MARGIN))
    a2 = ALPHA / 2
    word = np.zeros((R, len(COMPARISONS)), dtype=int)
    verdict = {}
    for key, ks in CONDITIONS.items():
        sup, neg = p[:, ks, 0] <= a2, p[:, ks, 2] <= a2
        con = _holm(p[:, ks, 1], a2)
        w = np.where(sup, 1, np.where(con, 2, np.where(neg, 3, 0)))
        word[:, ks] = w
        verdict[key] = np.where(con.any(1), 2, np.where(((w == 1) | (w == 3)).all(1), np.where(sup.all(1), 1, 3), 0))
    return dict(lo=lo, hi=hi, chosen=chosen, c=c, spent=spent, n=n, cp=cp, extra=extra,
                trials=spent + n * c + extra * cp,
                p=p, word=word, verdict=verdict, alone=np.stack([p[..., 0] <= a2, p[..., 1] <= a2], -1))
