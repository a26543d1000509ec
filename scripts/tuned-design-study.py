#!/usr/bin/env python3
"""Tuned-comparison design study for cemlab's main job (recursion_ablation, scale tiny).

Standalone (numpy + scipy).  It simulates two cells, A (the reference) and B (the favoured
variant), in the project's simulation world, runs each candidate *design* (how rates are chosen,
which seeds judge, which test) on the same draws, and prints:

  * the level of every wrong verdict per null case and direction (false "supported" = B better,
    false "contradicted" = B worse), with Monte-Carlo standard errors;
  * the power at a true effect of 1 sd (one comparison; the primary condition = two independent
    comparisons, attention and MLP, both supported = power squared);
  * P(contradicted) of a variant 2 sd worse as its divergence at rates >= 4e-3 rises 0 -> 100%;
  * the trials of the real 9-cell main job (10 comparisons, below): worst case from the design's
    caps, expected from simulating the 9 cells' selection stage.

The world (the project's, kept): per-seed log perplexity of a run =
    cell effect + curve(lr) + seed effect (sd 0.03, shared by every cell and rate at that seed)
    + the run's own noise (sd 0.02);
1 sd = 0.02 * sqrt(2), the sd of a paired difference.  Validation metric = test metric (the same
draw): selection reads the same numbers a test on those seeds would read.  The default curve is
quadratic in log2(lr), optimum 4e-3 * 2**0.2, curvature such that 2e-3 is 1 sd worse than 4e-3.
A diverged run is NaN: it ranks last in every median (selection), and in a test it is scored as the
worst finished run of its choice at the paired seeds (a seed where both diverged is a tie, 0).

Rates: 5e-4 .. 1.6e-2 in factors of 2 (the bounds); the grid is 2e-3, 4e-3.

Comparisons assumed for the 9-cell job (cells: Llama; attn/mlp x T in {1,2} x eta in {1, 1/2}):
  t2-beats-t1, per sublayer: T2e1 vs T1e1, T2e1/2 vs T1e1               (4)
  small-step-t1, per sublayer: T1e1/2 vs T1e1, T1e1/2 vs Llama           (4)
  cem-attn-t2-beats-llama: attn T2e1 vs Llama, attn T2e1/2 vs Llama      (2)
10 comparisons; Llama is in 4, each T1e1 in 3.

Usage (docs/tuned-design-study.md has the tables, run times and the recommendation):
  python scripts/tuned-design-study.py --reps 10000              every design at the worst-case
                                                                 seed rule (--only KEY-PREFIX)
  ... --reps 10000 --adaptive [--alpha 0.0225] [--budget 175]    candidates at the adaptive rule
  ... --reps 10000 --primary-first --alpha 0.0225                the recommended design (union-d,
                                                                 selection on 2 seeds, 1 shared
                                                                 step, primary-first seeds)
  ... --reps 4000 --sweep --only "KEY,KEY"                       power and level against seeds
"""
import argparse
import math
import time

import numpy as np
from scipy.special import stdtr

SC, SS = 0.02, 0.03
SD = SC * math.sqrt(2)
RATES = np.array([5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
L2 = np.log2(RATES)
NR = len(RATES)
GRID_LO, GRID_HI = 2, 3
OPT = 4e-3 * 2 ** 0.2
CURV = SD / (math.log2(2e-3 / OPT) ** 2 - math.log2(4e-3 / OPT) ** 2)
BUDGET = 165
ALPHA = 0.025  # one-sided level per direction of the fresh-seed designs (--alpha)
BIG = 1e300  # the median of a rate whose selection seeds diverged (ranks last, but in range)

# ---------------------------------------------------------------- the 9-cell job's graph
CELLS = ["llama", "aT2e1", "aT2eh", "aT1e1", "aT1eh", "mT2e1", "mT2eh", "mT1e1", "mT1eh"]
EDGES = [("aT2e1", "aT1e1"), ("aT2eh", "aT1e1"), ("mT2e1", "mT1e1"), ("mT2eh", "mT1e1"),
         ("aT1eh", "aT1e1"), ("aT1eh", "llama"), ("mT1eh", "mT1e1"), ("mT1eh", "llama"),
         ("aT2e1", "llama"), ("aT2eh", "llama")]
ADJ9 = np.zeros((9, 9), bool)
for _a, _b in EDGES:
    ADJ9[CELLS.index(_a), CELLS.index(_b)] = ADJ9[CELLS.index(_b), CELLS.index(_a)] = True
DEG9 = ADJ9.sum(1)
ADJ2 = np.array([[False, True], [True, False]])


# ---------------------------------------------------------------- curves and cases
def quad(opt=OPT, k=1.0):
    return k * CURV * (L2 - math.log2(opt)) ** 2


def cliff(k):
    c = np.zeros(NR)
    c[4] = -k * SD
    c[5] = -k * SD + 3 * SD
    return c


FLAT = np.zeros(NR)
HI = (RATES >= 4e-3).astype(float)  # rates >= 4e-3


def case(curve_a, curve_b=None, eff=0.0, div_a=0.0, div_b=0.0):
    curve_b = curve_a if curve_b is None else curve_b
    da = div_a * np.ones(NR) if np.isscalar(div_a) else div_a
    db = div_b * np.ones(NR) if np.isscalar(div_b) else div_b
    return dict(curves=np.stack([curve_a, curve_b]), eff=np.array([0.0, eff]),
                div=np.stack([da, db]))


# kind: "null" (both directions are wrong verdicts), "sup-wrong" (only supported is wrong)
NULLS = [
    ("flat", "null", case(FLAT)),
    ("quad opt 4e-3*2^.2", "null", case(quad())),
    ("quad opt 2e-3*2^-.2", "null", case(quad(2e-3 * 2 ** -0.2))),
    ("quad opt 8e-3 (beyond grid)", "null", case(quad(8e-3))),
    ("quad sharp (x3)", "null", case(quad(k=3))),
    ("quad shallow (x0.5)", "null", case(quad(k=0.5))),
    ("A flat, B sharp, equal min @4e-3", "null", case(FLAT, quad(4e-3, 3))),
    ("cliff 2 sd", "null", case(cliff(2))),
    ("cliff 4 sd", "null", case(cliff(4))),
    ("cliff 8 sd", "null", case(cliff(8))),
    ("10% random div >=4e-3", "null", case(quad(), div_a=0.1 * HI, div_b=0.1 * HI)),
    ("extra: A opt 2e-3, B opt 8e-3, sharp", "null", case(quad(2e-3, 3), quad(8e-3, 3))),
    ("B div 5% every rate", "sup-wrong", case(quad(), div_b=0.05)),
    ("B div 50% >=4e-3", "sup-wrong", case(quad(), div_b=0.5 * HI)),
]
POWER = case(quad(), eff=-SD)
POWER_SHIFT = case(quad(), quad(8e-3), eff=-SD)  # extra: B 1 sd better, its optimum at 8e-3
MONO = [(p, case(quad(), eff=2 * SD, div_b=p * HI)) for p in (0, .05, .1, .25, .5, 1.0)]


def draw(c, reps, nseeds, seed):
    """(reps, 2 cells, 6 rates, nseeds) log perplexities, NaN where diverged.  The same seed gives
    the same normal and uniform draws for every case (common random numbers)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, SS, (reps, 1, 1, nseeds))
    own = rng.normal(0, SC, (reps, 2, NR, nseeds))
    u = rng.random((reps, 2, NR, nseeds))
    x = (c["eff"][None, :, None, None] + c["curves"][None, :, :, None] + shared + own)
    x[u < c["div"][None, :, :, None]] = np.nan
    return x


# ---------------------------------------------------------------- selection (bracketing)
def medians(xs):
    return np.median(np.where(np.isnan(xs), BIG, xs), axis=-1)


def select(xs, adj, max_steps, share):
    """xs: (R, C, 6, n_sel) selection seeds.  Start at the grid; each step adds the rate beyond a
    cell's best edge (median over the selection seeds); with share, a rate a cell adds is also added
    to every cell it is compared with (contiguity filled in).  Steps until no cell is at an edge, at
    most max_steps.  Returns lo, hi (rate index range), best, runner-up, edge flag."""
    R, C = xs.shape[:2]
    med = medians(xs)
    lo = np.full((R, C), GRID_LO)
    hi = np.full((R, C), GRID_HI)
    idx = np.arange(NR)

    def best_of(lo, hi):
        inr = (idx >= lo[..., None]) & (idx <= hi[..., None])
        m = np.where(inr, med, np.inf)
        o = np.argsort(m, axis=-1, kind="stable")
        return o[..., 0], o[..., 1]

    for _ in range(max_steps):
        b, _r = best_of(lo, hi)
        atlo = (b == lo) & (lo > 0)
        athi = (b == hi) & (hi < NR - 1)
        if not (atlo.any() or athi.any()):
            break
        nlo, nhi = lo - atlo, hi + athi
        if share:
            addlo = np.where(atlo, nlo, 99)
            addhi = np.where(athi, nhi, -1)
            nlo = np.minimum(nlo, np.where(adj[None], addlo[:, None, :], 99).min(-1))
            nhi = np.maximum(nhi, np.where(adj[None], addhi[:, None, :], -1).max(-1))
        lo, hi = nlo, nhi
    b, r = best_of(lo, hi)
    edge = ((b == lo) & (lo > 0)) | ((b == hi) & (hi < NR - 1))
    return lo, hi, b, r, edge


# ---------------------------------------------------------------- tests
def ptest(xa, xb):
    """One-sided paired t p-values along the last axis: (p B<A, p B>A).  A diverged run (NaN) is
    scored as the worst finished run of the two at the paired seeds; both diverged = tie."""
    xa, xb = np.broadcast_arrays(xa, xb)
    both = np.isnan(xa) & np.isnan(xb)
    allv = np.concatenate([xa, xb], axis=-1)
    fin = np.isfinite(allv)
    worst = np.where(fin, allv, -np.inf).max(-1, keepdims=True)
    worst = np.where(np.isfinite(worst), worst, 0.0)
    a = np.where(np.isnan(xa), worst, xa)
    b = np.where(np.isnan(xb), worst, xb)
    d = np.where(both, 0.0, b - a)
    n = d.shape[-1]
    m = d.mean(-1)
    s = d.std(-1, ddof=1)
    ok = s > 1e-12
    t = np.where(ok, m / np.where(ok, s, 1) * math.sqrt(n), 0.0)
    return np.where(ok, stdtr(n - 1, t), 1.0), np.where(ok, stdtr(n - 1, -t), 1.0)


def at(x, cell, rate_idx, seeds):
    """x[r, cell, rate_idx[r], seeds] -> (R, len(seeds))."""
    xc = x[:, cell][:, :, seeds]  # (R, 6, n)
    return np.take_along_axis(xc, rate_idx[:, None, None], axis=1)[:, 0, :]


def every_choice(x, lo, hi, seeds):
    """Every choice tested: p_sup = m_B * min_j max_i p(B_j < A_i); p_con the mirror."""
    xa = x[:, 0][:, :, seeds]
    xb = x[:, 1][:, :, seeds]
    ps, pc = ptest(xa[:, None, :, :], xb[:, :, None, :])  # (R, j=B rate, i=A rate)
    idx = np.arange(NR)
    ina = (idx >= lo[:, 0, None]) & (idx <= hi[:, 0, None])
    inb = (idx >= lo[:, 1, None]) & (idx <= hi[:, 1, None])
    mA, mB = ina.sum(1), inb.sum(1)
    both = inb[:, :, None] & ina[:, None, :]
    sup = np.where(inb, np.where(both, ps, -1).max(2), np.inf).min(1) * mB
    con = np.where(ina, np.where(both, pc, -1).max(1), np.inf).min(1) * mA
    return sup, con


# ---------------------------------------------------------------- quadratic fit
def fitted_min(means, lo, hi):
    """means (R, C, 6): least-squares quadratic in log2 lr over the rates in [lo, hi]; its minimum
    over that interval."""
    idx = np.arange(NR)
    w = ((idx >= lo[..., None]) & (idx <= hi[..., None])).astype(float)
    l = L2 - L2[2]
    X = np.stack([np.ones(NR), l, l * l], -1)  # (6, 3)
    mm = np.where(w > 0, means, 0.0)
    XtX = np.einsum("rck,ki,kj->rcij", w, X, X)
    Xty = np.einsum("rck,ki,rck->rci", w, X, mm)
    beta = np.linalg.solve(XtX + 1e-12 * np.eye(3), Xty[..., None])[..., 0]
    a, b, c = beta[..., 0], beta[..., 1], beta[..., 2]
    llo, lhi = l[lo], l[hi]

    def q(z):
        return a + b * z + c * z * z
    v = np.minimum(q(llo), q(lhi))
    zv = np.where(c > 0, -b / (2 * np.where(c > 0, c, 1)), llo)
    inside = (c > 0) & (zv > llo) & (zv < lhi)
    return np.where(inside, np.minimum(v, q(zv)), v)


def quad_jackknife(x, lo, hi, seeds):
    xs = x[..., seeds]
    worst = np.where(np.isfinite(xs), xs, -np.inf).max(axis=(1, 2, 3), keepdims=True)
    xs = np.where(np.isnan(xs), worst, xs)
    n = len(seeds)
    full = fitted_min(xs.mean(-1), lo, hi)
    th = full[:, 1] - full[:, 0]
    jk = np.empty((xs.shape[0], n))
    tot = xs.sum(-1)
    for k in range(n):
        f = fitted_min((tot - xs[..., k]) / (n - 1), lo, hi)
        jk[:, k] = f[:, 1] - f[:, 0]
    se = np.sqrt((n - 1) / n * ((jk - jk.mean(1, keepdims=True)) ** 2).sum(1))
    ok = se > 1e-12
    t = np.where(ok, th / np.where(ok, se, 1), 0.0)
    return np.where(ok, stdtr(n - 1, t), 1.0), np.where(ok, stdtr(n - 1, -t), 1.0)


# ---------------------------------------------------------------- designs
# Each design: dict(key, label, run(x) -> (sup, con) booleans over reps, plus its trial model:
#   sel_seeds, max_steps, share, conf ('all' = every rate of the range at every seed, or
#   'single' / 'union' / 'ref2' on fresh seeds), n (seeds per rate judged), cap_rates (worst case).

def make_designs(nc_override=None):
    D = []

    def nc_for(key, default):
        return default if nc_override is None else nc_override

    # (0) today's design
    def d0(x):
        s3 = np.arange(3)
        lo, hi, b, r, edge = select(x[..., :3], ADJ2, 1, False)
        ps0, pc0 = every_choice(x, lo, hi, s3)
        ps1, pc1 = every_choice(x, lo, hi, np.arange(6))
        a0, a1 = 0.00125, 0.02375
        ps0 = np.where(edge[:, 0], 1, ps0)
        pc0 = np.where(edge[:, 1], 1, pc0)
        ps1 = np.where(edge[:, 0], 1, ps1)
        pc1 = np.where(edge[:, 1], 1, pc1)
        s0, c0 = ps0 <= a0, pc0 <= a0
        dec0 = s0 | c0
        return s0 | (~dec0 & (ps1 <= a1)), c0 | (~dec0 & (pc1 <= a1))
    D.append(dict(key="D0", label="today: grid+1 step (own), EC+Bonf, edge rule, looks 3->6",
                  run=d0, sel=3, steps=1, share=False, conf="all", n=6, fresh=False))

    # (1) single / (2) union / (3) ref2 on fresh confirmation seeds
    def dead(x, cell, rate_idx, nsel):
        return np.isnan(at(x, cell, rate_idx, np.arange(nsel))).all(-1)

    def conf_p(x, kind, b, r, cs, nsel):
        A, B = 0, 1
        xa, xb = at(x, A, b[:, 0], cs), at(x, B, b[:, 1], cs)
        ps, pc = ptest(xa, xb)
        if kind in ("union", "union-d"):  # the reference at every rate of the union {a's, b's}
            ps2 = ptest(at(x, A, b[:, 1], cs), xb)[0]
            pc2 = ptest(xa, at(x, B, b[:, 0], cs))[1]
            if kind == "union-d":  # ... but not where every one of its selection runs diverged
                ps2 = np.where(dead(x, A, b[:, 1], nsel), 0.0, ps2)
                pc2 = np.where(dead(x, B, b[:, 0], nsel), 0.0, pc2)
            ps, pc = np.maximum(ps, ps2), np.maximum(pc, pc2)
        elif kind == "ref2":  # the reference also at its runner-up from selection
            ps = np.maximum(ps, ptest(at(x, A, r[:, 0], cs), xb)[0])
            pc = np.maximum(pc, ptest(xa, at(x, B, r[:, 1], cs))[1])
        return ps, pc

    def conf_design(kind, nsel, steps, share, nc, looks):
        def run(x):
            lo, hi, b, r, edge = select(x[..., :nsel], ADJ2, steps, share)
            if looks == 1 or nc < 4:
                ps, pc = conf_p(x, kind, b, r, np.arange(nsel, nsel + nc), nsel)
                return ps <= ALPHA, pc <= ALPHA
            h = nc // 2  # two looks: n/2 seeds at 0.5%, n at 2% (Bonferroni over the looks)
            ps0, pc0 = conf_p(x, kind, b, r, np.arange(nsel, nsel + h), nsel)
            ps1, pc1 = conf_p(x, kind, b, r, np.arange(nsel, nsel + nc), nsel)
            s0, k0 = ps0 <= 0.005, pc0 <= 0.005
            dec = s0 | k0
            return s0 | (~dec & (ps1 <= 0.02)), k0 | (~dec & (pc1 <= 0.02))
        return run

    for kind, nsel, steps, share, looks in [
            ("single", 3, 1, False, 1), ("single", 2, 1, False, 1), ("single", 3, 1, True, 1),
            ("single", 3, 1, True, 2),
            ("union", 3, 1, False, 1), ("union", 2, 1, True, 1), ("union", 3, 1, True, 1),
            ("union-d", 2, 1, True, 1), ("union-d", 2, 1, True, 2),
            ("union-d", 1, 1, True, 1), ("union-d", 2, 2, True, 1), ("union-d", 3, 1, True, 1),
            ("ref2", 3, 1, False, 1), ("ref2", 3, 1, True, 1), ("ref2", 2, 1, True, 1),
            ("ref2", 2, 2, True, 1), ("ref2", 2, 1, True, 2)]:
        d = dict(sel=nsel, steps=steps, share=share, conf=kind, fresh=True)
        d["n"] = nc_for(None, budget_seeds(d))
        key = {"single": "D1", "union": "D2", "union-d": "D2", "ref2": "D3"}[kind]
        d["key"] = (f"{key} {kind} s{nsel} st{steps}{' sh' if share else ''}"
                    f"{' 2look' if looks == 2 else ''}")
        d["label"] = (f"{kind}: select on {nsel} seeds, <= {steps} step(s)"
                      f"{', shared' if share else ''}; fresh seeds"
                      f"{', looks n/2 (0.5%) + n (2%)' if looks == 2 else ''}")
        d["run"] = conf_design(kind, nsel, steps, share, d["n"], looks)
        D.append(d)

    # (4) shared bracketing until interior (capped), every choice + Bonferroni on all seeds
    def ec_shared(steps, n, edge_rule=True):
        def run(x):
            lo, hi, b, r, edge = select(x[..., :3], ADJ2, steps, True)
            ps, pc = every_choice(x, lo, hi, np.arange(n))
            if edge_rule:
                ps = np.where(edge[:, 0], 1, ps)
                pc = np.where(edge[:, 1], 1, pc)
            return ps <= 0.025, pc <= 0.025
        return run
    for steps in (1, 2):
        d = dict(sel=3, steps=steps, share=True, conf="all", fresh=False)
        d["n"] = nc_for(None, budget_seeds(d))
        d.update(key=f"D4 EC shared st{steps}", run=ec_shared(steps, d["n"]),
                 label=f"shared steps until interior (<= {steps}), EC+Bonf on all seeds, edge rule")
        D.append(d)

    # (5) fitted quadratic in log-lr, jackknife-over-seeds SE
    def qj(steps, n):
        def run(x):
            lo, hi, b, r, edge = select(x[..., :3], ADJ2, steps, True)
            ps, pc = quad_jackknife(x, lo, hi, np.arange(n))
            ps = np.where(edge[:, 0], 1, ps)
            pc = np.where(edge[:, 1], 1, pc)
            return ps <= 0.025, pc <= 0.025
        return run
    for steps in (1,):
        d = dict(sel=3, steps=steps, share=True, conf="all", fresh=False)
        d["n"] = nc_for(None, budget_seeds(d))
        d.update(key=f"D5 quad-jackknife st{steps}", run=qj(steps, d["n"]),
                 label=f"shared steps (<= {steps}), fitted-quadratic minimum, jackknife SE, edge rule")
        D.append(d)

    return D


# ---------------------------------------------------------------- trials for the 9-cell job
def sel_rates_cap(d):
    """Worst-case rates per cell after the selection stage."""
    per_step = 2 if d["share"] else 1  # shared: a cell may get one rate at each end per step
    return min(NR, 2 + per_step * d["steps"])


def worst_trials(d, n=None):
    n = d["n"] if n is None else n
    cap = sel_rates_cap(d)
    if not d["fresh"]:
        return 9 * cap * n
    sel = 9 * cap * d["sel"]
    if d["conf"] == "single":
        return sel + 9 * n
    if d["conf"] == "ref2":
        return sel + 18 * n
    if d["conf"] in ("union", "union-d"):
        return sel + int(np.minimum(1 + DEG9, NR).sum()) * n


def budget_seeds(d):
    """The seed budget rule (reads no verdict): the most seeds per rate judged whose worst-case
    9-cell trials stay within BUDGET (at least 2)."""
    n = 2
    while worst_trials(d, n + 1) <= BUDGET:
        n += 1
    return n


def expected_trials(d, reps, seed, eff_sd=0.0, full=False, give=0):
    """Mean 9-cell trials: every cell on the default curve (eff_sd: the T=2 cells better by that),
    the selection stage simulated with the job's comparison graph.  For the 'all' designs every rate
    of the range runs on every seed (looks stopping early are ignored: at tiny they stop almost
    nothing)."""
    rng = np.random.default_rng(seed)
    nsel = d["sel"]
    eff = np.zeros(9)
    for i, c in enumerate(CELLS):
        if "T2" in c:
            eff[i] = -eff_sd * SD
    xs = (eff[None, :, None, None] + quad()[None, None, :, None]
          + rng.normal(0, SS, (reps, 1, 1, nsel)) + rng.normal(0, SC, (reps, 9, NR, nsel)))
    lo, hi, b, r, edge = select(xs, ADJ9, d["steps"], d["share"])
    nrates = (hi - lo + 1)
    if not d["fresh"]:
        per_seed = nrates.sum(1)
        sel = 0
    else:
        sel = (nrates * nsel).sum(1)
        if d["conf"] == "single":
            per_seed = np.full(reps, 9)
        elif d["conf"] == "union-d":
            per_seed = 0
            for i in range(9):
                s = [b[:, i]] + [b[:, j] for j in np.flatnonzero(ADJ9[i])]
                per_seed = per_seed + np.array([len(set(v)) for v in zip(*s)])
        elif d["conf"] == "ref2":
            per_seed = np.full(reps, 18)
        else:
            per_seed = 0
            for i in range(9):
                s = [b[:, i]] + [b[:, j] for j in np.flatnonzero(ADJ9[i])]
                per_seed = per_seed + np.array([len(set(v)) for v in zip(*s)])
    trials = sel + per_seed * d["n"]
    # the adaptive rule: after the selection stage, the most seeds the budget's remainder buys
    n_adapt = (BUDGET - sel) // per_seed
    if full == "primary":
        # primary-first: the base seeds less `give`, then the rest of the budget on the two primary
        # comparisons (attn and mlp T2e1 vs T1e1) at the union of their pair's chosen rates
        prim = 0
        for i, j in ((1, 3), (5, 7)):
            prim = prim + 2 * np.where(b[:, i] == b[:, j], 1, 2)
        base = np.maximum(n_adapt - give, 2)
        extra = (BUDGET - sel - per_seed * base) // prim
        return base, base + extra, sel + per_seed * base + prim * extra
    if full:
        return n_adapt, sel + per_seed * n_adapt
    return trials.mean(), n_adapt.mean(), np.percentile(n_adapt, 5)


# ---------------------------------------------------------------- main
def se(p, n):
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def pct(p, n):
    return f"{100 * p:5.1f} ({100 * se(p, n):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--only", default="", help="main tables: designs whose key starts with this; --adaptive, --sweep:"
                         " comma-separated keys")
    ap.add_argument("--sweep", action="store_true",
                    help="power at 1 sd and worst level against seeds, beyond the budget")
    ap.add_argument("--nseeds", type=int, default=24, help="seeds drawn per replication")
    ap.add_argument("--adaptive", action="store_true",
                    help="the adaptive seed rule: n = the most seeds the rest of 165 trials buys"
                         " after the 9-cell selection stage; level and power as mixtures over n")
    ap.add_argument("--primary-first", action="store_true",
                    help="the recommended design with the rest of the budget on the primary condition")
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help="one-sided level per direction of the single-look fresh-seed designs")
    ap.add_argument("--budget", type=int, default=BUDGET, help="trials of the 9-cell job (165)")
    a = ap.parse_args()
    globals()["BUDGET"] = a.budget
    globals()["ALPHA"] = a.alpha
    t0 = time.time()
    R, S = a.reps, a.nseeds
    if a.sweep:
        return sweep(a)
    if a.primary_first:
        return primary_first(a)
    if a.adaptive:
        return adaptive(a)
    designs = [d for d in make_designs() if d["key"].startswith(a.only)]
    worlds = {name: draw(c, R, S, a.seed) for name, _, c in NULLS}
    pw = draw(POWER, R, S, a.seed + 1)
    print(f"# reps {R}; 1 sd = {SD:.4f}; level and power in %, Monte-Carlo SE in brackets\n")
    print("## Designs, seed budget and 9-cell trials (worst / expected under the null default"
          " curve / expected with T=2 cells 1 sd better); n = seeds judged per rate (fresh"
          " confirmation seeds for single/union/ref2) by the worst-case rule; adaptive n = the most"
          " seeds the remainder of 165 buys after the simulated 9-cell selection stage; * = over the"
          " budget even at 2 seeds")
    for d in designs:
        e0, na, n5 = expected_trials(d, 2000, a.seed + 7)
        e1 = expected_trials(d, 2000, a.seed + 7, 1.0)[0]
        over = "*" if worst_trials(d) > BUDGET else " "
        print(f"{d['key']:24s} n={d['n']:2d} worst {worst_trials(d):4d}{over}exp {e0:6.1f} / {e1:6.1f}"
              f"  adaptive n mean {na:4.1f} (5th pct {n5:2.0f})  | {d['label']}")
    print()
    hdr = "case".ljust(34) + "".join(f"{d['key'][:14]:>16s}" for d in designs)
    print("## False supported / false contradicted (%, SE)")
    print(hdr)
    worst = {d["key"]: [0, 0] for d in designs}
    for name, kind, _c in NULLS:
        x = worlds[name]
        row_s, row_c = name[:33].ljust(34), "".ljust(34)
        for d in designs:
            s, c = d["run"](x)
            ps, pc = s.mean(), c.mean()
            if not name.startswith("extra"):
                worst[d["key"]][0] = max(worst[d["key"]][0], ps)
            if kind == "null" and not name.startswith("extra"):
                worst[d["key"]][1] = max(worst[d["key"]][1], pc)
            row_s += f"{'s ' + pct(ps, R):>16s}"
            row_c += f"{('c ' + pct(pc, R)) if kind == 'null' else '(c right)':>16s}"
        print(row_s)
        print(row_c, flush=True)
    print("worst wrong verdict".ljust(34) + "".join(
        f"{100 * max(worst[d['key']]):15.1f} " for d in designs))
    print("\n## Power at 1 sd (B better): one comparison; primary (two independent) = p^2")
    row1, row2 = "one comparison".ljust(34), "primary condition".ljust(34)
    for d in designs:
        s, c = d["run"](pw)
        p = s.mean()
        row1 += f"{pct(p, R):>16s}"
        row2 += f"{100 * p * p:8.1f} ({100 * 2 * p * se(p, R):.1f})".rjust(16)
        d["power"] = p
    print(hdr)
    print(row1)
    print(row2)
    print("\n## P(contradicted), B 2 sd worse, B's runs at >= 4e-3 diverging (coupled draws)")
    print(hdr)
    for p, c in MONO:
        x = draw(c, R, S, a.seed + 2)
        row = f"diverge {int(100 * p)}%".ljust(34)
        for d in designs:
            row += f"{pct(d['run'](x)[1].mean(), R):>16s}"
        print(row, flush=True)
    print(f"\n# run time {time.time() - t0:.0f} s")


def sweep(a):
    """Power at 1 sd and the worst level over the nulls as the seeds judged grow (for 'what would
    reach the targets'); trials = the 9-cell worst case at that n."""
    t0 = time.time()
    R, S = a.reps, a.nseeds
    pw = draw(POWER, R, S, a.seed + 1)
    worlds = [(name, kind, draw(c, R, S, a.seed)) for name, kind, c in NULLS]
    print(f"# reps {R}: power at 1 sd / primary / worst wrong verdict over the nulls (case)"
          " / 9-cell worst-case trials")
    for key in a.only.split(",") if a.only else ["D1 single sel3 st1", "D3 ref2 sel3 st1",
                                                   "D3 ref2 sel2 st1", "D4 EC shared st1"]:
        for n in (4, 6, 8, 10, 12, 14, 16):
            if n + 3 > S:
                continue
            d = [d for d in make_designs(nc_override=n) if d["key"] == key]
            if not d:
                continue
            d = d[0]
            d["n"] = n
            run = rebuild(d, n)
            p = run(pw)[0].mean()
            wl, wc = 0, ""
            for name, kind, x in worlds:
                s, c = run(x)
                v = max(s.mean(), c.mean() if kind == "null" else 0)
                if v > wl and not name.startswith("extra"):
                    wl, wc = v, name
            print(f"{key:22s} n={n:2d} power {100 * p:5.1f} primary {100 * p * p:5.1f} worst level "
                  f"{100 * wl:4.1f} ({wc}) trials {worst_trials(d, n)}", flush=True)
    print(f"# run time {time.time() - t0:.0f} s")


ADAPTIVE_KEYS = ["D1 single s3 st1 sh", "D2 union s2 st1 sh", "D2 union s3 st1 sh",
                 "D2 union-d s2 st1 sh", "D2 union-d s2 st1 sh 2look",
                 "D3 ref2 s2 st1 sh", "D3 ref2 s3 st1 sh", "D4 EC shared st1"]


def adaptive(a):
    """Each design with the adaptive seed rule.  n's law comes from 4,000 simulated 9-cell selection
    stages (every cell on the default curve, T=2 cells 1 sd better for the power row, no effect for
    the levels); the pair's draws are taken independent of n (the pair's own part in the 9-cell
    selection is ignored).  Each metric is sum_n P(n) metric(n) on common draws."""
    t0 = time.time()
    R, S = a.reps, a.nseeds
    pw = draw(POWER, R, S, a.seed + 1)
    pws = draw(POWER_SHIFT, R, S, a.seed + 1)
    worlds = [(name, kind, draw(c, R, S, a.seed)) for name, kind, c in NULLS]
    mono = [(p, draw(c, R, S, a.seed + 2)) for p, c in MONO]
    keys = a.only.split(",") if a.only else ADAPTIVE_KEYS
    print(f"# budget {BUDGET} trials; alpha {ALPHA} (fresh-seed designs); reps {R}; adaptive seed rule; level/power in % (MC SE of the mixture, approx.)")
    for key in keys:
        d0 = [d for d in make_designs() if d["key"] == key][0]
        out = {}
        for tag, eff in (("null", 0.0), ("power", 1.0)):
            n_ad, tr = expected_trials(d0, 4000, a.seed + 7, eff, full=True)
            vals, cnt = np.unique(np.minimum(n_ad, S - d0["sel"]), return_counts=True)
            out[tag] = (vals, cnt / cnt.sum(), tr)
        vals, w, tr = out["power"]
        p = sum(wi * rebuild(d0, int(v))(pw)[0].mean() for v, wi in zip(vals, w) if v >= 2)
        print(f"\n## {key}: n mean {np.dot(vals, w):.2f} (range {vals.min()}-{vals.max()}); 9-cell"
              f" trials mean {tr.mean():.1f}, max {tr.max()} (null: mean {out['null'][2].mean():.1f})")
        p2 = sum(wi * rebuild(d0, int(v))(pws)[0].mean() for v, wi in zip(vals, w) if v >= 2)
        print(f"power at 1 sd {pct(p, R)}   primary {100 * p * p:.1f} ({100 * 2 * p * se(p, R):.1f})"
              f"   (extra: B's optimum at 8e-3: {pct(p2, R)})")
        vals, w, _ = out["null"]
        runs = {int(v): rebuild(d0, int(v)) for v in vals if v >= 2}
        worst = 0
        for name, kind, x in worlds:
            res = [runs[int(v)](x) for v in vals if v >= 2]
            ww = [wi for v, wi in zip(vals, w) if v >= 2]
            ps = sum(wi * r[0].mean() for wi, r in zip(ww, res))
            pc = sum(wi * r[1].mean() for wi, r in zip(ww, res))
            if not name.startswith("extra"):
                worst = max(worst, ps, pc if kind == "null" else 0)
            print(f"  {name[:33]:34s} sup {pct(ps, R)}  con " +
                  (pct(pc, R) if kind == "null" else "(right)"))
        print(f"  worst wrong verdict (the brief's cases, not the extra) {100 * worst:.1f}")
        row = "  2 sd worse, div 0/5/10/25/50/100%: P(con) "
        for pdv, x in mono:
            res = [runs[int(v)](x) for v in vals if v >= 2]
            ww = [wi for v, wi in zip(vals, w) if v >= 2]
            row += f"{100 * sum(wi * r[1].mean() for wi, r in zip(ww, res)):5.1f} "
        print(row, flush=True)
    print(f"# run time {time.time() - t0:.0f} s")


def primary_first(a):
    """union-d s2 st1 sh with the adaptive rule, the remainder (and `give` base seeds) spent on the
    primary condition's two comparisons.  Power of a primary comparison, of another comparison,
    the primary condition, and the worst level over the brief's nulls at either seed count."""
    t0 = time.time()
    R, S = a.reps, a.nseeds
    d0 = [d for d in make_designs() if d["key"] == "D2 union-d s2 st1 sh"][0]
    pw = draw(POWER, R, S, a.seed + 1)
    worlds = [(name, kind, draw(c, R, S, a.seed)) for name, kind, c in NULLS]
    print(f"# budget {BUDGET}; alpha {ALPHA}; reps {R}; D2 union-d s2 st1 sh, primary-first seed rule")
    cache = {}

    def run(n):
        if n not in cache:
            cache[n] = rebuild(d0, int(min(n, S - d0["sel"])))
        return cache[n]

    def mix(ns, f):
        vals, cnt = np.unique(ns, return_counts=True)
        return sum(c / cnt.sum() * f(run(int(v))) for v, c in zip(vals, cnt))
    for give in (0, 1, 2):
        base, prim, tr = expected_trials(d0, 4000, a.seed + 7, 1.0, full="primary", give=give)
        pp = mix(prim, lambda r: r(pw)[0].mean())
        po = mix(base, lambda r: r(pw)[0].mean())
        b0, p0, tr0 = expected_trials(d0, 4000, a.seed + 7, 0.0, full="primary", give=give)
        worst, wc = 0, ""
        for name, kind, x in worlds:
            if name.startswith("extra"):
                continue
            for ns in (b0, p0):
                v = max(mix(ns, lambda r: r(x)[0].mean()),
                        mix(ns, lambda r: r(x)[1].mean()) if kind == "null" else 0)
                if v > worst:
                    worst, wc = v, name
        print(f"give {give}: base n mean {base.mean():.2f}, primary n mean {prim.mean():.2f}; trials "
              f"mean {tr.mean():.1f} max {tr.max()}; power: primary comparison {pct(pp, R)}, "
              f"other {pct(po, R)}, primary condition {100 * pp * pp:.1f}; worst level "
              f"{100 * worst:.1f} ({wc})", flush=True)
    print(f"# run time {time.time() - t0:.0f} s")


def rebuild(d, n):
    """The design's run function at n seeds judged."""
    for dd in make_designs(nc_override=n):
        if dd["key"] == d["key"]:
            return dd["run"]


if __name__ == "__main__":
    main()
