"""The sequential seeding's error rates, by simulation of the report's own decision code through the
main job's whole loop: its grid, its bracketing look and its seed looks, with the plan its sweep file
ships (its looks and its per-look split of alpha), with a learning-rate curve and with runs that
diverge.

**The world.** Per-seed test perplexities of three CEM-attention cells (T=1 eta=1, T=2 eta=1, T=2
eta=1/T: the two conditions of ``t2-beats-t1``), each drawn up front at every rate a cell can have at
``tiny`` (``ALL_RATES``: the grid's 2e-3 and 4e-3 and one step beyond either end), with a seed effect
shared by every cell and rate, a noise of each run's own and a learning-rate curve, quadratic in
log2(lr) (``curve``: by default its optimum a fifth of an octave above 4e-3, 2e-3 worse than 4e-3 by
``RATE_GAP``, 1 sd of a paired difference, as the two-rate world had it). The validation metric is
the test metric. A run may diverge (status ``diverged``, no value): the worst outcome of its cell.

**The loop**, as the sweep runs it: (1) the grid's rates on look 0's seeds (0-2); (2) the bracketing
look: each cell best at an end of its rates on those seeds (``bracketing.family_edges``, as
``interim_look_store.sweep_bracket`` judges it) gets the rate beyond that end for those seeds
(``next_rate``: one step, within ``ALL_RATES``); (3) the seed looks: the report's ``verdicts.evaluate``
through ``cemlab.report.looks.interim_look.LookLoop`` on the first ``n_j`` seeds at look ``j``'s level
(a comparison decided at a look keeps its verdict; the edge rule, ``pairing.compare``, reads that look's
seeds), seeds added at every rate of the cells of inconclusive comparisons, until nothing is open or
the last look. No training, seconds.

Each condition of the claim is one tuned comparison (3 x 3 choices after the bracketing look), so the
loop's verdict of a condition is exactly the *ideal* procedure on that comparison (:func:`ideal`): the
bracketing decision on look 0's seeds (:func:`bracket`: ``bracketing.edge_of`` on each rate's
``bracketing.rate_score``), then look 0 on the first n_0 seeds at alpha_0 and, if open, look 1 on the
first n_1 at alpha_1, each by the same ``decision.comparison_evidence`` over every rate each cell has,
the edge rule (``bracketing.untuned_sides``, each cell's edge on look 0's seeds, as the look read them) and
``decision.decide`` on arrays, a hundred times faster. The suite checks that the two agree draw by draw,
and uses the ideal procedure for the rates that need many draws. The ideal procedure without the
bracketing look and the edge rule (the grid's two rates, as the main job was judged before) runs on the
same draws beside it.

- every true effect zero: each wrong direction (supported, or contradicted) at most alpha / 2 per
  claim condition, within Monte-Carlo error, with the optimum near 4e-3, near 2e-3 and beyond the grid
  (at 8e-3); the same draws judged without the edge rule and at the full alpha at every look (no
  correction) are shown beside it: each only adds decisions;
- a true effect of 1 sd of the paired log difference: power and seeds used through the whole loop,
  printed beside the two-rate design without the edge rule and the fixed 3-seed and 8-seed designs
  (``pytest -s`` shows them);
- divergence unrelated to the variant (every cell's runs at 4e-3 and above diverge at random):
  false-decisive rates still within alpha / 2 plus Monte-Carlo error;
- divergence that is the variant's fault (only T=2 at eta=1 diverges): its condition's verdict goes
  against T=2, never for it; the other condition is unaffected;
- a worse variant that diverges more is not contradicted less: by the scoring of a worst outcome
  alone; through the whole loop it is (the edge rule re-read at look 1), an expected failure kept
  until the rule changes;
- the tables of candidate batches and of candidate splits of alpha over the two looks (power at 1 sd,
  seeds used) from which the main job's plan was chosen (docs/verdicts-history.md), when
  ``CEMLAB_SPLIT_TABLE_REPS`` is set: in the world the main job runs in, bracketing look and edge rule.

``CEMLAB_CALIBRATION_REPS`` sets the draws the look loop and the ideal procedure are compared on
(default 40) and the replications of the ideal procedure (25 times as many: 1000);
docs/verdicts-history.md quotes runs with more.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import astuple

import numpy as np
import pandas as pd
import pytest
from scipy.special import stdtr

from cemlab.paper import SESOI
from cemlab.report.claims import catalog as claims, pairing
from cemlab.report.stats.bracketing import (HIGHEST, LOWEST, ONE_RATE, edge_of, family_edges, rate_score,
                                            tuning_family, untuned_sides)
from cemlab.report.looks.interim_look import LookLoop
from cemlab.report.stats.sequential import ALPHA
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NOT_ENOUGH, SUPPORTED
from cemlab.report.stats.decision import Evidence, comparison_evidence, decide, every_choice_p
from cemlab.report.stats.bounds import WORST, beyond_of, paired_diffs, paired_diffs_by_seed
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import Seeding
from sweep_support import REPO_SWEEPS

SWEEP = "recursion_ablation"
CLAIM = [c for c in claims.CLAIMS if c.id == "t2-beats-t1"]
CELLS = [(1, "1"), (2, "1"), (2, "1/T")]
#: The two conditions and the cells each compares (T=1 first).
CONDITIONS = {"same per-step eta=1": ((1, "1"), (2, "1")), "same total step T*eta=1": ((1, "1"), (2, "1/T"))}
#: The coefficients of each condition's comparison: log(T=2 / T=1), claimed below 0.
COEFS = (-1.0, 1.0)
#: The main job's plan at tiny as its sweep file ships it: 3 seeds, then 3 more where open (two
#: looks), each look at its level of the file's seeding.alpha_split.
_SPEC = load_sweep(REPO_SWEEPS / f"{SWEEP}.yaml")
LOOKS = _SPEC.seeding.looks("tiny", [0, 1, 2])
ALPHAS = _SPEC.seeding.alphas("tiny", [0, 1, 2])
RATES = (2e-3, 4e-3)              # the main job's grid rates at tiny
#: Every rate a cell can have at tiny: the grid's and one bracketing step beyond either end (x2 or /2,
#: the grid's spacing; the main job's bracketing look makes one step, within [5e-4, 1.6e-2]).
ALL_RATES = (1e-3, 2e-3, 4e-3, 8e-3)
BRACKET_STEPS = 1
REPS = int(os.environ.get("CEMLAB_CALIBRATION_REPS", "40"))
IDEAL_REPS = 25 * REPS
SIGMA_CELL = 0.02    # a run's own noise (log perplexity) per seed
SIGMA_SEED = 0.03    # the noise the cells share at a seed (data order, init): pairing removes it
SIGMA_DIFF = SIGMA_CELL * math.sqrt(2)   # sd of a paired log difference
RATE_GAP = SIGMA_DIFF                    # 2e-3 worse than 4e-3 by 1 sd (at the default optimum)
#: The default learning-rate optimum: a fifth of an octave above 4e-3, between the grid's higher rate
#: and the rate beyond it, so that the grid's best is 4e-3 and the bracketing look adds 8e-3 most of the
#: time (and 8e-3 is worse than 4e-3 by 0.43 sd: on 3 seeds it looks best about a fifth of the time).
OPTIMUM = 4e-3 * 2 ** 0.2
#: The curve's curvature (log perplexity per squared octave), fixed by 2e-3 being ``RATE_GAP`` worse
#: than 4e-3 at the default optimum.
CURVATURE = RATE_GAP / (math.log2(2e-3 / OPTIMUM) ** 2 - math.log2(4e-3 / OPTIMUM) ** 2)
#: The optima the null is checked at: the default; near 2e-3 (the bracketing look adds 1e-3); beyond
#: the grid, at 8e-3 (the look adds 8e-3, which is then best: the cell usually stays at an edge).
OPTIMA = {"near 4e-3": OPTIMUM, "near 2e-3": 2e-3 * 2 ** -0.2, "at 8e-3, beyond the grid": 8e-3}
BASE = 150.0                             # test perplexity of the T=1 cell at its optimum
CHANCE = 2048.0                          # the vocabulary size at tiny: a diverged run's value
MARGIN = math.log1p(SESOI)
BEYOND = beyond_of(0.0, "below", MARGIN)


def curve(lr: float, optimum: float = OPTIMUM) -> float:
    """The learning-rate curve: the log perplexity a rate adds over the optimum."""
    return CURVATURE * math.log2(lr / optimum) ** 2


def _cell_id(T: int, eta: str, lr: float) -> str:
    return json.dumps({"T": T, "eta": eta, "lr": lr, "precond": "dplr", "size": "86m", "sweep": SWEEP},
                      sort_keys=True)


#: A cell (T, eta) by its tuning family (``bracketing.tuning_family``: the cell id without its rate).
FAMILY = {tuning_family(_cell_id(*c, RATES[0])): c for c in CELLS}


def trials_frame(values: dict[tuple, np.ndarray]) -> pd.DataFrame:
    """Trials of the cells ``(T, eta, lr)`` -> per-seed test perplexities (NaN: the run diverged),
    as ``table.join_trials`` makes them (the columns the recursion rules read)."""
    rows = []
    for (T, eta, lr), vals in values.items():
        for seed, v in enumerate(vals):
            rows.append(dict(order=len(rows), sweep=SWEEP, figure="Fig 2c", scale="tiny", family="cem-attn",
                             group="cem-attn", variant=f"cem-attn T{T} dplr eta={eta}", size="86m", task="lm",
                             metric="test/ppl", lr=lr, T=T, precond="dplr", kq_diagonal="shared", kernel="",
                             param_matched=False, eta=eta, x0="h", corpus="stdlib", cell=_cell_id(T, eta, lr),
                             seed=seed, val=float(v), status="finished" if math.isfinite(v) else "diverged",
                             run_id=f"r{len(rows)}", value=float(v), chance=CHANCE,
                             params_total=1e5, token_budget=5e5, total_steps=400.0, train_tokens=2e5,
                             flops_per_token=1.0, params_attention=1.0, params_mlp=1.0, params_embedding=1.0,
                             flops_per_example=math.nan))
    return pd.DataFrame(rows)


def draw(rng, effects: dict[tuple, float], n: int, diverge: dict[tuple, float] | None = None,
         optimum: float = OPTIMUM) -> dict[tuple, np.ndarray]:
    """``n`` seeds of every cell at every rate of ``ALL_RATES``, fixed before any look (the loop reads
    the rates it runs, look j the first n_j seeds). ``effects``: (T, eta) -> log effect at every rate;
    ``diverge``: (T, eta, lr) -> probability that a run diverges; ``optimum``: the curve's optimum."""
    shared = rng.normal(0.0, SIGMA_SEED, n)
    out = {}
    for c in CELLS:
        for lr in ALL_RATES:
            v = BASE * np.exp(effects.get(c, 0.0) + curve(lr, optimum) + shared + rng.normal(0.0, SIGMA_CELL, n))
            p = (diverge or {}).get((*c, lr), 0.0)
            out[(*c, lr)] = np.where(rng.random(n) < p, math.nan, v)
    return out


def next_rate(lrs, edge: str) -> float | None:
    """The rate a bracketing step adds to a cell best at an ``edge`` of its rates ``lrs``: the next of
    ``ALL_RATES`` beyond that end (the grid's spacing), None where the cell is bracketed, has no
    finished run, or is at the end of ``ALL_RATES``."""
    lrs = sorted(float(x) for x in lrs)
    if edge not in (LOWEST, HIGHEST) or not lrs:
        return None
    i = int(np.argmin([abs(math.log(r / (lrs[-1] if edge == HIGHEST else lrs[0]))) for r in ALL_RATES]))
    j = i + 1 if edge == HIGHEST else i - 1
    return ALL_RATES[j] if 0 <= j < len(ALL_RATES) else None


def _log(v: np.ndarray) -> np.ndarray:
    """Log perplexities, a diverged run the worst outcome (``bounds.WORST``), as ``divergence.outcomes``
    gives them."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(v), np.log(np.where(np.isfinite(v), v, 1.0)), WORST)


def bracket(logs: dict[tuple, np.ndarray], n0: int, steps: int = BRACKET_STEPS) -> dict[tuple, tuple]:
    """The rates each cell has after the bracketing look (``steps`` steps) on the first ``n0`` seeds:
    the grid's, and per step the rate beyond the end its best rate is at (``bracketing.edge_of`` on each
    rate's ``bracketing.rate_score``, the validation metric being the test metric)."""
    out = {}
    for c in CELLS:
        rates = list(RATES)
        for _ in range(steps):
            edge = edge_of(rates, [rate_score(logs[(*c, lr)][:n0], logs[(*c, lr)][:n0]) for lr in rates])[1]
            nxt = next_rate(rates, edge)
            if nxt is None:
                break
            rates.append(nxt)
        out[c] = tuple(sorted(rates))
    return out


def run_looks(values: dict[tuple, np.ndarray], looks: list[list[int]], alphas) -> tuple[dict, int, dict]:
    """The sweep's whole loop on ``values``: the grid on look 0's seeds, the bracketing look (judged by
    ``bracketing.family_edges`` on the trials, as ``interim_look_store.sweep_bracket`` judges it), then the
    driver's seed looks on every rate each cell has. ``({condition: verdict}, trials used, {cell: rates})``."""
    n0 = len(looks[0])
    rates = {c: list(RATES) for c in CELLS}
    for _ in range(BRACKET_STEPS):
        frame = trials_frame({(*c, lr): values[(*c, lr)][:n0] for c in CELLS for lr in rates[c]})
        added = [(FAMILY[r.family], next_rate(r.lrs, r.edge)) for r in family_edges(frame).itertuples()]
        for c, lr in added:
            if lr is not None:
                rates[c].append(lr)
        if all(lr is None for _, lr in added):
            break
    have = {(*c, lr): n0 for c in CELLS for lr in rates[c]}
    loop = LookLoop(CLAIM, "tiny", SWEEP, looks, alphas, sensitivity=False)
    for j in range(len(looks)):
        frame = trials_frame({k: values[k][:n] for k, n in have.items()})
        look = loop.look(j, lambda s: frame if s == SWEEP else frame.iloc[:0])
        if j == len(looks) - 1 or not look.open_cells:
            break
        opened = {FAMILY[tuning_family(cid)] for cid in look.open_cells}
        for k in have:     # every rate of an open cell gets the next seeds (``interim_look.next_trials``)
            if k[:2] in opened:
                have[k] = len(looks[j + 1])
    return ({v.condition: v.verdict for v in loop.verdicts}, sum(have.values()),
            {c: tuple(sorted(r)) for c, r in rates.items()})


def _seed_logs(logs: dict[tuple, np.ndarray], cell: tuple, rates, n: int) -> list[dict]:
    """Per rate of ``rates``, the cell's first ``n`` log perplexities by seed."""
    return [dict(enumerate(logs[(*cell, lr)][:n])) for lr in rates]


def edge_at(logs: dict[tuple, np.ndarray], cell: tuple, rates, n: int) -> str:
    """The cell's edge on its first ``n`` seeds (``bracketing.edge_of`` on each rate's ``rate_score``):
    '' where bracketed or tried at one rate only (``bracketing.position_edges``: nothing to bracket)."""
    edge = edge_of(rates, [rate_score(logs[(*cell, lr)][:n], logs[(*cell, lr)][:n]) for lr in rates])[1]
    return "" if edge == ONE_RATE else edge


def raw_at(logs: dict[tuple, np.ndarray], rates: dict[tuple, tuple], cond: str, n: int) -> tuple:
    """A condition's one comparison (T=2 below T=1, every choice of the two cells' rates tested) on the
    first ``n`` seeds: its evidence before the edge rule, what ``verdicts.evaluate`` computes with the
    report's own scoring of a divergence (``bounds.paired_diffs``), and each cell's edge on look 0's seeds
    (those the bracketing look read: ``ClaimData.edge_seeds``, as ``LookLoop`` sets it)."""
    cells = CONDITIONS[cond]
    diffs = paired_diffs([_seed_logs(logs, c, rates[c], n) for c in cells], COEFS, BEYOND)
    ev = evidence_of(diffs, tuple(len(rates[c]) for c in cells))
    return ev, [edge_at(logs, c, rates[c], len(LOOKS[0])) for c in cells]   # edges on the bracketing look's seeds


def evidence_of(diffs: dict[tuple, np.ndarray], n_choices: tuple) -> Evidence:
    """``decision.comparison_evidence(diffs, COEFS, n_choices, 0, 'below', MARGIN)`` with the paired
    t-tests of every choice at once (the formula of ``significance.t_pvalues`` on a matrix; the
    combination is ``decision.every_choice_p`` itself): what makes thousands of replications cheap. Where
    the choices do not all pair over the same seeds, or a difference is not finite, the report's own
    function; the draw-by-draw test checks the two agree."""
    keys = list(diffs)
    d = [diffs[k] for k in keys]
    if not d or len({len(x) for x in d}) != 1 or len(d[0]) < 2 or not all(np.isfinite(x).all() for x in d):
        return comparison_evidence(diffs, COEFS, n_choices, 0.0, "below", MARGIN)
    m = np.stack(d)
    n = m.shape[1]
    mean, sd = m.mean(axis=1), m.std(axis=1, ddof=1)
    ok = sd > 1e-12 * np.maximum(1.0, np.abs(mean))

    def p(direction: str, at: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):   # zero spread: no test (NaN), as t_pvalues
            t = (mean - at) / (sd / math.sqrt(n)) * (1 if direction == "below" else -1)
            pv = np.where(ok, stdtr(n - 1, t), math.nan)
        return every_choice_p(dict(zip(keys, pv.tolist())), COEFS, n_choices, direction)

    return Evidence(p("below", 0.0), p("above", 0.0), max(p("below", MARGIN), p("above", -MARGIN)))


def ruled(raw: tuple, edge_rule: bool = True):
    """The evidence of ``raw_at`` with, under ``edge_rule``, every side voided that a cell at an edge of
    its rates on the look's seeds could erase (``bracketing.untuned_sides``, as ``pairing.compare``)."""
    ev, edges = raw
    return untuned_sides(ev, COEFS, "below", edges)[0] if edge_rule else ev


def raw_evidence(values: dict[tuple, np.ndarray], ns, bracketing: bool = True) -> tuple[dict, dict]:
    """``({condition: {n: raw_at(..., n)}}, {cell: rates})`` for each seed count of ``ns``: every cell at
    the rates it has after the bracketing look (:func:`bracket`), or at the grid's two
    (``bracketing=False``: the two-rate design)."""
    logs = {k: _log(v) for k, v in values.items()}
    rates = bracket(logs, len(LOOKS[0])) if bracketing else {c: RATES for c in CELLS}
    return {cond: {n: raw_at(logs, rates, cond, n) for n in sorted(set(ns))} for cond in CONDITIONS}, rates


def judged(values: dict[tuple, np.ndarray], looks: list[list[int]], bracketing: bool = True,
           edge_rule: bool | None = None) -> tuple[dict[str, list], dict[tuple, tuple]]:
    """Per condition the evidence at every look (look j on the first n_j seeds), and the rates each
    cell has: after the bracketing look on look 0's seeds (:func:`bracket`), or the grid's two
    (``bracketing=False``: the two-rate design, without the edge rule unless ``edge_rule``)."""
    raw, rates = raw_evidence(values, [len(s) for s in looks], bracketing)
    rule = bracketing if edge_rule is None else edge_rule
    return {cond: [ruled(r[len(s)], rule) for s in looks] for cond, r in raw.items()}, rates


def sequential(evidence: dict[str, list], alphas) -> dict[str, tuple[str, int]]:
    """Each condition by the sequential procedure on its evidence at each look: look j at alphas[j],
    stopping at the first decisive verdict; per condition (verdict, look)."""
    out = {}
    for cond, evs in evidence.items():
        for j, (ev, a) in enumerate(zip(evs, alphas)):
            word = decide([ev], "all", a)[0]
            if word not in (INCONCLUSIVE, NOT_ENOUGH):
                break
        out[cond] = (word, j)
    return out


def ideal(values: dict[tuple, np.ndarray], looks: list[list[int]], alphas, bracketing: bool = True,
          edge_rule: bool | None = None) -> dict[str, tuple[str, int]]:
    """Each condition by the ideal procedure of the whole loop (:func:`judged`, :func:`sequential`);
    per condition (verdict, look)."""
    return sequential(judged(values, looks, bracketing, edge_rule)[0], alphas)


def seeds_per_cell(stops: dict[str, int], looks: list[list[int]]) -> float:
    """Seeds per cell the ideal procedure ran: a cell gets look j + 1's seeds while a condition that
    reads it is open at look j (T=1 eta=1 is read by both)."""
    last = {c: 0 for c in CELLS}
    for cond, j in stops.items():
        for c in CONDITIONS[cond]:
            last[c] = max(last[c], j)
    return float(np.mean([len(looks[j]) for j in last.values()]))


def trials_used(stops: dict[str, int], rates: dict[tuple, tuple], looks: list[list[int]]) -> int:
    """Trials the ideal procedure ran: each cell's seeds (as :func:`seeds_per_cell`) at each of its rates."""
    last = {c: 0 for c in CELLS}
    for cond, j in stops.items():
        for c in CONDITIONS[cond]:
            last[c] = max(last[c], j)
    return sum(len(looks[j]) * len(rates[c]) for c, j in last.items())


def ideal_rates(effects, looks, alphas, reps: int, seed: int, diverge=None, optimum: float = OPTIMUM,
                designs: dict | None = None):
    """Per condition (P(supported), P(contradicted)) of the ideal procedure of the whole loop, and seeds
    per cell; with ``designs`` (name -> (looks, alphas, bracketing, edge_rule)), the same for each on the
    same draws (each seed count's evidence computed once), as ``{name: (rates, seeds)}`` after them."""
    rng = np.random.default_rng(seed)
    designs = {"loop": (looks, alphas, True, True), **(designs or {})}
    ns = {}
    for lk, _, br, _ in designs.values():
        ns.setdefault(br, set()).update(len(s) for s in lk)
    counts = {d: {c: [0, 0] for c in CONDITIONS} for d in designs}
    seeds = dict.fromkeys(designs, 0.0)
    for _ in range(reps):
        values = draw(rng, effects, len(looks[-1]), diverge, optimum)
        raw = {br: raw_evidence(values, n, br)[0] for br, n in ns.items()}
        for name, (lk, al, br, er) in designs.items():
            got = sequential({c: [ruled(r[len(s)], er) for s in lk] for c, r in raw[br].items()}, al)
            seeds[name] += seeds_per_cell({c: j for c, (_, j) in got.items()}, lk)
            for cond, (w, _) in got.items():
                counts[name][cond][0] += w == SUPPORTED
                counts[name][cond][1] += w == CONTRADICTED
    out = {d: ({c: (s / reps, k / reps) for c, (s, k) in counts[d].items()}, seeds[d] / reps) for d in designs}
    return (*out.pop("loop"), out) if len(designs) > 1 else out["loop"]


def mc_bound(reps: int, rate: float = ALPHA / 2) -> float:
    """``rate`` plus a one-sided 99% Monte-Carlo margin over ``reps`` draws."""
    return rate + 2.33 * math.sqrt(rate * (1 - rate) / reps)


ONE_SD = {(2, "1"): -SIGMA_DIFF, (2, "1/T"): -SIGMA_DIFF}   # T=2 better by 1 sd at both conditions
#: Divergence unrelated to the variant: 10% of every cell's runs at 4e-3 and 8e-3 (the grid's higher
#: rate and the rate beyond it).
HIGH = tuple(r for r in ALL_RATES if r >= max(RATES))
RANDOM_DIVERGENCE = {(*c, lr): 0.10 for c in CELLS for lr in HIGH}
#: Divergence that is the variant's own: T=2 at eta=1 at 4e-3 and 8e-3, every run.
T2_DIVERGES = {(2, "1", lr): 1.0 for lr in HIGH}


def test_the_plan_is_the_one_the_main_jobs_sweep_file_ships():
    assert LOOKS == [[0, 1, 2], [0, 1, 2, 3, 4, 5]]
    assert sum(ALPHAS) == pytest.approx(ALPHA) and len(ALPHAS) == len(LOOKS)
    assert ALPHAS == _SPEC.look_alphas("tiny", _SPEC.expand("tiny"))   # what the sweep and its report use
    assert {float(t.axes.get("lr", t.config.train.lr)) for t in _SPEC.expand("tiny")} == set(RATES)
    # one bracketing step from the grid reaches exactly the simulated rates, within the main job's bounds
    assert sorted({next_rate(RATES, LOWEST), *RATES, next_rate(RATES, HIGHEST)}) == list(ALL_RATES)
    assert all(5e-4 <= r <= 1.6e-2 for r in ALL_RATES)
    assert next_rate(ALL_RATES[1:], HIGHEST) is None and next_rate(RATES, "") is None
    # the curve: 2e-3 is 1 sd worse than 4e-3 at the default optimum (the two-rate world's gap)
    assert curve(2e-3) - curve(4e-3) == pytest.approx(RATE_GAP) and 4e-3 < OPTIMUM < 8e-3


def test_the_look_loop_is_the_ideal_procedure_draw_by_draw():
    """The report's whole loop (the bracketing look by ``bracketing.family_edges`` on the trials, then
    frames, ``verdicts.evaluate`` with its edge rule, kept verdicts, opened cells) and the ideal
    procedure on the same draws give every cell the same rates and every condition the same verdict,
    with every effect zero (the optimum near 4e-3, near 2e-3 and beyond the grid), at 1 sd, with random
    divergence and with the variant's own: what lets the rates below, which need many draws, use the
    ideal procedure. The trials the loop ran are the ideal's too."""
    rng = np.random.default_rng(7)
    worlds = [({}, None, OPTIMUM), (ONE_SD, None, OPTIMUM), ({}, RANDOM_DIVERGENCE, OPTIMUM),
              ({}, T2_DIVERGES, OPTIMUM), ({}, None, OPTIMA["near 2e-3"]), (ONE_SD, None, 8e-3)]
    agree = total = blocked = 0
    added = {}
    for i in range(max(len(worlds), REPS)):
        effects, diverge, optimum = worlds[i % len(worlds)]
        values = draw(rng, effects, len(LOOKS[-1]), diverge, optimum)
        loop, trials, rates = run_looks(values, LOOKS, ALPHAS)
        evidence, ref_rates = judged(values, LOOKS)
        logs = {k: _log(v) for k, v in values.items()}
        for cond, (t1, t2) in CONDITIONS.items():   # the matrix t-tests are the report's own, to rounding
            for s in LOOKS:
                diffs = paired_diffs([_seed_logs(logs, c, ref_rates[c], len(s)) for c in (t1, t2)], COEFS, BEYOND)
                n_choices = (len(ref_rates[t1]), len(ref_rates[t2]))
                fast, slow = evidence_of(diffs, n_choices), comparison_evidence(diffs, COEFS, n_choices, 0.0, "below",
                                                                                MARGIN)
                assert astuple(fast) == pytest.approx(astuple(slow), rel=1e-9, abs=1e-15)
        ref = sequential(evidence, ALPHAS)
        assert rates == ref_rates, (rates, ref_rates)
        agree += sum(loop[c] == ref[c][0] for c in CONDITIONS)
        total += len(CONDITIONS)
        blocked += sum(ref[c][0] != w for c, (w, _) in ideal(values, LOOKS, ALPHAS, edge_rule=False).items())
        for c, r in rates.items():
            added[r] = added.get(r, 0) + 1
        assert trials == trials_used({c: j for c, (_, j) in ref.items()}, ref_rates, LOOKS)
    print(f"\nlook loop = ideal procedure in {agree} of {total} condition verdicts; the edge rule changed {blocked}; "
          f"rates per cell after the bracketing look: " + ", ".join(f"{'/'.join(f'{x:g}' for x in r)}: {k}"
                                                                   for r, k in sorted(added.items())))
    assert agree == total
    assert all(len(r) == len(RATES) + BRACKET_STEPS for r in added)   # every cell got its step: a grid of 2 has an edge


def test_with_every_effect_zero_each_wrong_direction_stays_within_alpha_over_two():
    """Identical cells on the same curve, through the whole loop: each wrong direction at most alpha / 2
    (plus Monte-Carlo error) with the optimum near 4e-3, near 2e-3 and beyond the grid. At the default
    optimum the same draws are judged without the edge rule and with every look at the full alpha: each
    only adds decisions (the edge rule only voids sides; the correction only lowers levels)."""
    designs = {"no edge rule": (LOOKS, ALPHAS, True, False), "uncorrected": (LOOKS, [ALPHA] * len(LOOKS), True, True)}
    print(f"\nall effects zero, {IDEAL_REPS} replications; plan {len(LOOKS[0])} -> {len(LOOKS[-1])} seeds at alpha "
          f"{' + '.join(f'{a:g}' for a in ALPHAS)}, the bracketing look before it")
    for k, (name, optimum) in enumerate(OPTIMA.items()):
        got = ideal_rates({}, LOOKS, ALPHAS, IDEAL_REPS, seed=1 + 10 * k, optimum=optimum,
                          designs=designs if k == 0 else None)
        seq, seeds, other = got if k == 0 else (*got, {})
        print(f"  optimum {name} ({optimum:.3g}), {seeds:.2f} seeds per cell on average:")
        for cond in CONDITIONS:
            sup, con = seq[cond]
            extra = "; ".join(f"{d}: {r[cond][0]:.4f}, {r[cond][1]:.4f}" for d, (r, _) in other.items())
            print(f"    {cond}: false supported {sup:.4f}, false contradicted {con:.4f}"
                  + (f" ({extra})" if extra else "") + f"; nominal {ALPHA / 2:.3f} each")
            assert sup <= mc_bound(IDEAL_REPS) and con <= mc_bound(IDEAL_REPS), (name, cond, sup, con)
            for d, (r, _) in other.items():   # the same draws: only more decisions
                assert r[cond][0] >= sup and r[cond][1] >= con, (d, cond)
        # the loop did add seeds: under the null most comparisons stay open after look 0
        assert seeds > len(LOOKS[0])


def test_power_and_seeds_used_at_a_true_effect_of_one_sd_beside_the_two_rate_and_fixed_designs():
    """T=2 1 sd better at every rate, through the whole loop: P(supported) is printed beside the
    two-rate design without the bracketing look or the edge rule (the grid's rates only, as the main
    job was judged before), and beside fixed 3-seed and 8-seed designs, all on the same draws. What
    must hold: some power, never 'contradicted', no more power than the two-rate design's (the edge
    rule only voids sides, and a third rate only adds a choice to test) within Monte-Carlo error, and
    more than the fixed 3-seed design's. With the optimum beyond the grid the cells usually stay at an
    edge and the loop decides little; that is printed, not asserted."""
    designs = {"two rates": (LOOKS, ALPHAS, False, False), "no edge rule": (LOOKS, ALPHAS, True, False),
               "fixed 3": ([LOOKS[0]], [ALPHA], True, True), "fixed 8": ([LOOKS[-1]], [ALPHA], True, True)}
    seq, seq_seeds, other = ideal_rates(ONE_SD, LOOKS, ALPHAS, IDEAL_REPS, seed=2, designs=designs)
    (two, two_seeds), (fixed, _), (most, _) = other["two rates"], other["fixed 3"], other["fixed 8"]
    free = other["no edge rule"][0]
    beyond, beyond_seeds = ideal_rates(ONE_SD, LOOKS, ALPHAS, IDEAL_REPS, seed=3, optimum=8e-3)
    print(f"\ntrue effect 1 sd (paired log ppl), {IDEAL_REPS} replications: P(supported)")
    for cond in CONDITIONS:
        print(f"  {cond}: whole loop {seq[cond][0]:.3f} (its rates without the edge rule {free[cond][0]:.3f}); "
              f"two rates without the edge rule {two[cond][0]:.3f}; "
              f"fixed {len(LOOKS[0])} seeds (alpha) {fixed[cond][0]:.3f}, fixed {len(LOOKS[-1])} seeds (alpha) "
              f"{most[cond][0]:.3f}; whole loop with the optimum beyond the grid (8e-3) {beyond[cond][0]:.3f}")
    print(f"  seeds per cell: whole loop {seq_seeds:.2f}, two rates {two_seeds:.2f}, optimum beyond {beyond_seeds:.2f}")
    assert len(LOOKS[0]) <= seq_seeds <= len(LOOKS[-1])
    for cond in CONDITIONS:
        assert seq[cond][1] == 0 and fixed[cond][1] == 0 and beyond[cond][1] == 0   # never the wrong way at 1 sd
        assert 0 < seq[cond][0] <= two[cond][0] + 2.33 * math.sqrt(0.25 / IDEAL_REPS)
        assert seq[cond][0] <= free[cond][0]   # the same draws: the edge rule only voids sides
        assert seq[cond][0] > fixed[cond][0]    # more seeds where open buy power despite the split


def test_random_divergence_unrelated_to_the_variant_holds_the_level():
    """10% of every cell's runs at 4e-3 and 8e-3 diverge, whatever the variant: a diverged run is the
    worst outcome of the cell it happened in (and brackets the rate below it). Dropping its rate from
    that cell only (an old rule) compared the cell at its worse rate and read 'contradicted' 30% of the
    time; now each wrong direction stays within alpha / 2 plus Monte-Carlo error."""
    seq, _ = ideal_rates({}, LOOKS, ALPHAS, IDEAL_REPS, seed=4, diverge=RANDOM_DIVERGENCE)
    power, _ = ideal_rates(ONE_SD, LOOKS, ALPHAS, IDEAL_REPS, seed=5, diverge=RANDOM_DIVERGENCE)
    print(f"\nrandom divergence (10% of the runs at 4e-3 and 8e-3, every cell), {IDEAL_REPS} replications:")
    for cond in CONDITIONS:
        print(f"  {cond}: false supported {seq[cond][0]:.4f}, false contradicted {seq[cond][1]:.4f}; at 1 sd "
              f"P(supported) {power[cond][0]:.3f}")
        assert seq[cond][0] <= mc_bound(IDEAL_REPS) and seq[cond][1] <= mc_bound(IDEAL_REPS)
        assert power[cond][1] == 0


def _t2(effect_sd: float, low: float, high: float) -> tuple[dict, dict]:
    """T=2 at eta=1 ``effect_sd`` sd of the paired log difference away from T=1 when it finishes
    (negative: better), diverging with probability ``low`` at the grid's lower rate and below it, and
    ``high`` at its higher rate and above it."""
    return ({(2, "1"): effect_sd * SIGMA_DIFF},
            {(2, "1", lr): (high if lr >= max(RATES) else low) for lr in ALL_RATES})


#: Divergence that is the variant's own, with what the estimand says (docs/verdicts.md, "The estimand"):
#: name -> (T=2's effect in sd when it finishes, its divergence at the grid's lower rate and below and at
#: its higher rate and above, the wrong verdicts). T=2 better when it finishes and diverging rarely is
#: better (the paired outcome leans its way); as good when it finishes and diverging at all is worse;
#: diverging half the time is worse at that rate, so at every rate it is worse, and at 4e-3 and above
#: only its tuned value is its 2e-3 value (the bracketing look adds 1e-3, worse), which equals T=1's
#: best at 4e-3 (1 sd better at a rate 1 sd worse: neither verdict is right).
VARIANT_CASES = {
    "1 sd better, 3% diverge": (-1.0, 0.03, 0.03, (CONTRADICTED,)),
    "1 sd better, 5% diverge": (-1.0, 0.05, 0.05, (CONTRADICTED,)),
    "1 sd better, 10% diverge": (-1.0, 0.10, 0.10, (CONTRADICTED,)),
    "as good, 3% diverge": (0.0, 0.03, 0.03, (SUPPORTED,)),
    "as good, 10% diverge": (0.0, 0.10, 0.10, (SUPPORTED,)),
    "1 sd better, 50% diverge": (-1.0, 0.5, 0.5, (SUPPORTED,)),
    "1 sd better, 50% diverge at 4e-3 and above": (-1.0, 0.0, 0.5, (SUPPORTED, CONTRADICTED)),
    "as good, every run at 4e-3 and above diverges": (0.0, 0.0, 1.0, (SUPPORTED,)),
}


@pytest.mark.parametrize("case", list(VARIANT_CASES))
def test_divergence_that_is_the_variants_own_holds_the_level_for_the_estimand(case):
    """Only T=2 at eta=1 diverges, rarely (3-10%) or often (50%, 100% at 4e-3 and above): each verdict that
    the estimand makes wrong stays within alpha / 2 plus Monte-Carlo error; the other condition, whose
    cells never diverge, stays at its null rates."""
    per_step, total = CONDITIONS
    effect, low, high, wrong = VARIANT_CASES[case]
    eff, div = _t2(effect, low, high)
    got, _ = ideal_rates(eff, LOOKS, ALPHAS, IDEAL_REPS, seed=6, diverge=div)
    sup, con = got[per_step]
    print(f"\nT=2 eta=1 {case}, {IDEAL_REPS} replications: P(supported) {sup:.4f}, P(contradicted) {con:.4f} "
          f"(wrong: {', '.join(wrong)}); {total}: {got[total][0]:.4f} / {got[total][1]:.4f}")
    for word in wrong:
        assert (sup if word == SUPPORTED else con) <= mc_bound(IDEAL_REPS), (case, sup, con)
    if effect == 0:   # T=1 eta=1 is as good as T=2 eta=1/T when it finishes: the total-step condition is a null
        assert got[total][0] <= mc_bound(IDEAL_REPS) and got[total][1] <= mc_bound(IDEAL_REPS)


#: The monotonicity check: T=2 worse by this many sd at every rate, its runs at 4e-3 and above diverging at
#: these rates.
WORSE_SD = 2.0
DIVERGE_RATES = (0.0, 0.05, 0.10, 0.25, 0.50, 1.0)


@functools.lru_cache(maxsize=None)
def coupled_contradictions(reps: int, seed: int = 8) -> dict[bool, dict[float, np.ndarray]]:
    """T=2 at eta=1 ``WORSE_SD`` sd worse than T=1 at every rate, its runs at 4e-3 and 8e-3 diverging at
    each rate of ``DIVERGE_RATES`` on the same draws (a run that diverges at one rate of divergence also
    diverges at every higher one): per edge rule (on, off), per divergence rate, whether each draw's
    same-per-step verdict was 'contradicted' (and, under key ``'supported'``, whether any was supported)."""
    per_step = next(iter(CONDITIONS))
    out = {True: {}, False: {}}
    supported = False
    for p in DIVERGE_RATES:
        rng = np.random.default_rng(seed)
        eff, div = _t2(WORSE_SD, 0.0, p)
        words = {True: [], False: []}
        for _ in range(reps):
            raw = raw_evidence(draw(rng, eff, len(LOOKS[-1]), div), [len(x) for x in LOOKS])[0][per_step]
            for rule in words:
                w = sequential({per_step: [ruled(raw[len(x)], rule) for x in LOOKS]}, ALPHAS)[per_step][0]
                words[rule].append(w)
                supported |= w == SUPPORTED
        for rule, ws in words.items():
            out[rule][p] = np.array([w == CONTRADICTED for w in ws])
    out["supported"] = supported
    return out


def _falls(con: dict[float, np.ndarray]) -> list[tuple]:
    """The steps of ``DIVERGE_RATES`` at which the rate of 'contradicted' falls beyond 2.33 standard
    errors of the paired difference."""
    out = []
    for a, b in zip(DIVERGE_RATES, DIVERGE_RATES[1:]):
        d = con[b].astype(float) - con[a].astype(float)
        se = max(d.std(ddof=1), 1.0 / len(d)) / math.sqrt(len(d))
        if d.mean() < -2.33 * se:
            out.append((a, b, con[a].mean(), con[b].mean()))
    return out


@pytest.mark.xfail(strict=True, reason=(
    "with up to 6 seeds the scoring alone falls (docs/verdicts-history.md, 'What 6 seeds weaken'): a rate "
    "where the variant diverged at every seed scores the constant W, which unpairs that choice"))
def test_a_worse_variants_contradiction_does_not_fall_as_it_diverges_more_by_its_scoring():
    """T=2 at eta=1 2 sd worse than T=1 at every rate; its runs at 4e-3 and 8e-3 diverge with probability
    0, 5, 10, 25, 50 and 100%, on coupled draws, through the bracketing look and the seed looks. Judged
    by the scoring of a worst outcome alone (the edge rule off), the rate of 'contradicted' must not fall
    as the variant diverges more (within the Monte-Carlo error of a paired difference). With the chance
    value (two rates, no bracketing look) it read 99 / 65 / 44 / 13 / 37 / 100%. The rates with the edge
    rule are printed beside (the next test). With 8 seeds, at 5,000 replications, the first step (0% to
    5%) fell by about 0.3 points, beyond the 2.33 standard errors, and so it does in the two-rate world
    without bracketing (99.12% to 98.90%): the t statistic is not monotone in one value (docs/verdicts.md,
    "A divergence is the worst outcome"). With the 6 seeds the main job now has it falls further, and
    the suite's 1,000 replications see it: 89.2 / 88.8 / 87.6 / 87.0 / 89.2 / 83.5% (20,000 replications:
    88.3 / 86.8 / 85.8 / 85.7 / 87.8 / 83.6%). Where the variant diverged at every seed of a rate, that
    choice's differences are the constant W (the worst finished run of the choice) minus the reference's
    runs, so the reference's seed effects enter their spread, and on 6 seeds the t-test of that choice
    often cannot show a loss that 8 seeds could. An expected failure, strict, until the scoring changes
    (a W per seed that keeps the pairing)."""
    got = coupled_contradictions(IDEAL_REPS)
    print(f"\nT=2 eta=1 {WORSE_SD:g} sd worse, {IDEAL_REPS} coupled replications, P(contradicted) at divergence "
          + ", ".join(f"{p:.0%}" for p in DIVERGE_RATES) + ": without the edge rule "
          + " / ".join(f"{got[False][p].mean():.3f}" for p in DIVERGE_RATES) + "; whole loop (with it) "
          + " / ".join(f"{got[True][p].mean():.3f}" for p in DIVERGE_RATES))
    assert not _falls(got[False]), _falls(got[False])


def test_a_worse_variants_contradiction_does_not_fall_as_it_diverges_more_through_the_whole_loop():
    """The same coupled draws through the whole loop, the edge rule on: the rate of 'contradicted' does
    not fall as the variant diverges more. It did while each cell's edge was re-read at every look (a
    run at the variant's interior best rate 4e-3 that diverged among seeds 3-7 made that rate the worst
    at look 1, so the variant was best at an edge, where no step could follow, and its contradiction
    was voided: 85.5% -> 73.7% -> 67.4% at 0 / 5 / 10% divergence); now the edge is read on the seeds
    the bracketing look read (``ClaimData.edge_seeds``), scored by the median (``bracketing.rate_score``).
    With 6 seeds, 20,000 replications see a fall of 0.9 points from 50% to 100% (84.4% -> 83.5%; 67.8% at
    no divergence), the scoring's weakness above; the suite's 1,000 do not. 'supported' never appears,
    with the edge rule or without."""
    got = coupled_contradictions(IDEAL_REPS)
    assert not _falls(got[True])
    assert not got["supported"]


def shown_interval(values: dict[tuple, np.ndarray], cond: str, n: int):
    """The effect shown for a condition's comparison on the first ``n`` seeds, every rate each cell has
    after the bracketing look, and its descriptive 95% mark, as the report draws them
    (``pairing.evidence_and_interval``; the simulated validation metric is the test metric)."""
    logs = {k: _log(v) for k, v in values.items()}
    rates = bracket(logs, len(LOOKS[0]))
    pos = [[(pd.Series(d), pd.Series(d)) for d in _seed_logs(logs, c, rates[c], n)] for c in CONDITIONS[cond]]
    by_seed = paired_diffs_by_seed([[t for t, _ in p] for p in pos], COEFS, BEYOND)
    diffs = {c: np.array([d[s] for s in sorted(d)]) for c, d in by_seed.items()}
    chosen = pairing.chosen_diffs(pos, by_seed)
    return pairing.evidence_and_interval(diffs, chosen, COEFS, tuple(len(rates[c]) for c in CONDITIONS[cond]),
                                         0.0, "below", MARGIN)[1]


def test_the_marks_drawn_beside_an_open_verdict_hold_their_level_under_divergence():
    """Every effect zero, 10% of every cell's runs at 4e-3 and 8e-3 diverging: the grey 95% mark of
    the effect shown excludes zero in at most 5% of the conditions (plus Monte-Carlo error), so it
    cannot tell a reader more than its level beside 'inconclusive' (with the chance value in the
    choice it did in 17% of null draws); the interval that decided is the tests' own dual
    (``test_claims_stats``) and never excludes zero beside 'inconclusive'. A quarter of the replications
    of the other tests: the effect shown chooses each seed's rates through pandas (``pairing.chosen_diffs``,
    some 25 ms a comparison at three rates a cell)."""
    rng = np.random.default_rng(9)
    reps = max(50, IDEAL_REPS // 4)
    excl = beside_open = 0
    for _ in range(reps):
        values = draw(rng, {}, len(LOOKS[-1]), RANDOM_DIVERGENCE)
        verdicts = ideal(values, LOOKS, ALPHAS)
        for cond in CONDITIONS:
            word, j = verdicts[cond]
            iv = shown_interval(values, cond, len(LOOKS[j]))
            out = iv.finite and (iv.low > 0 or iv.high < 0)
            excl += out
            beside_open += out and word == INCONCLUSIVE
    total = reps * len(CONDITIONS)
    print(f"\nnull with 10% random divergence, {total} conditions: the 95% mark excludes 0 in {excl / total:.4f}, "
          f"beside 'inconclusive' in {beside_open / total:.4f}")
    assert excl / total <= mc_bound(total, 0.05)


#: The main job's primary condition of ``t2-beats-t1`` (same per-step eta=1) holds two comparisons,
#: CEM attention and CEM MLP at T=2 against T=1: simulated as two independent sets of the three cells.
SUBLAYERS = ("attention", "MLP")


def ideal_condition(evidence: list[list], alphas) -> str:
    """A claim condition over several comparisons (``evidence[c][j]``: comparison c at look j) by the
    look loop's rule: at each look the open comparisons are judged together by ``decision.decide``
    (intersection-union for support, Holm over k for contradiction), a decisive comparison keeps its
    word, and the condition's verdict combines the kept and current words (``significance.combine``)."""
    from cemlab.report.stats.significance import combine

    kept: dict[int, str] = {}
    for j, a in enumerate(alphas):
        words = decide([ev[j] for ev in evidence], "all", a)[1]
        now = [kept.get(c, w) for c, w in enumerate(words)]
        for c, w in enumerate(words):
            if c not in kept and w in (SUPPORTED, CONTRADICTED, "negligible"):
                kept[c] = w
        verdict = combine(now)
        if verdict not in (INCONCLUSIVE, NOT_ENOUGH):
            return verdict
    return verdict


def primary_power(splits: list, reps: int, seed: int = 10) -> list[tuple[float, float]]:
    """P(supported) at a true 1-sd effect in both sublayers: of the primary condition (both comparisons
    supported), and of the attention comparison alone, by the ideal procedure of the whole loop at each
    of ``splits`` (lists of per-look alphas), on the same draws."""
    cond = next(iter(CONDITIONS))
    both, one = [0] * len(splits), [0] * len(splits)
    rng = np.random.default_rng(seed)
    for _ in range(reps):
        evs = [judged(draw(rng, ONE_SD, len(LOOKS[-1])), LOOKS)[0][cond] for _sub in SUBLAYERS]
        for i, alphas in enumerate(splits):
            both[i] += ideal_condition(evs, alphas) == SUPPORTED
            one[i] += ideal_condition(evs[:1], alphas) == SUPPORTED
    return [(b / reps, o / reps) for b, o in zip(both, one)]


def test_the_power_of_the_main_jobs_primary_condition_at_one_sd():
    """The primary condition needs both sublayers supported: its power at a 1-sd effect is about the
    square of one comparison's (the two are independent), with the shipped split and with the even
    one. docs/verdicts-history.md quotes a longer run."""
    reps = IDEAL_REPS
    (shipped, one), (even, one_even) = primary_power([ALPHAS, [ALPHA / len(LOOKS)] * len(LOOKS)], reps)
    print(f"\nprimary condition (attention and MLP) at 1 sd, {reps} replications: P(supported) {shipped:.3f} with the "
          f"shipped split (one comparison {one:.3f}), {even:.3f} with the even split (one comparison {one_even:.3f})")
    se = math.sqrt(0.25 / reps)
    assert abs(shipped - one * one) <= 4 * se and abs(even - one_even * one_even) <= 4 * se
    assert shipped < one and even <= shipped + 3 * se


#: Candidate splits of the one-sided 2.5% over the two looks: look 0's share (docs/verdicts-history.md).
SHARES = (1 / 2, 1 / 4, 1 / 5, 1 / 10, 1 / 20, 1 / 50)
#: True effects (in sd of the paired log difference) at which the table gives the seeds used.
EFFECTS = (0, 1, 2, 5, 10)


def _looks_of(batch: int, top: int) -> list[list[int]]:
    """The planned looks of a seed budget ``top`` added ``batch`` at a time after the grid's seeds, as the
    sweep plans them (``Seeding.looks``)."""
    return Seeding(max_seeds={"tiny": top}, batch=batch).looks("tiny", LOOKS[0])


def plan_table(reps: int, plans: dict[str, tuple[list[list[int]], list[float]]], seed: int = 20,
               bracketing: bool = True) -> dict[str, dict]:
    """Per candidate plan (name -> (looks, alpha per look)): power at 1 sd (P(supported), mean of the two
    conditions, one value per replication), the null's false-decisive rate and the seeds per cell at
    0, 1, 2, 5 and 10 sd, all on the same draws (common random numbers: the evidence is drawn once per
    replication and effect and judged under every plan), by the ideal procedure; beside it the budget's
    seeds fixed, at alpha. The world the main job runs in: the bracketing look and the edge rule
    (``bracketing=False``: the grid's two rates without either, the world the 8-seed budget's split was
    chosen in before the bracketing look)."""
    rng = np.random.default_rng(seed)
    top = max(len(lk[-1]) for lk, _ in plans.values())
    ns = sorted({len(n) for lk, _ in plans.values() for n in lk})
    rows = {name: dict(looks=lk, alphas=al, power=[], false=[], seeds={e: [] for e in EFFECTS}, fixed=[])
            for name, (lk, al) in plans.items()}
    for _ in range(reps):
        for effect in EFFECTS:
            eff = {(2, "1"): -effect * SIGMA_DIFF, (2, "1/T"): -effect * SIGMA_DIFF}
            raw, _rates = raw_evidence(draw(rng, eff, top), ns, bracketing)
            for r in rows.values():
                lk = r["looks"]
                got = sequential({c: [ruled(x[len(n)], bracketing) for n in lk] for c, x in raw.items()}, r["alphas"])
                r["seeds"][effect].append(seeds_per_cell({c: j for c, (_, j) in got.items()}, lk))
                if effect == 1:
                    r["power"].append(np.mean([w == SUPPORTED for w, _ in got.values()]))
                    fixed = sequential({c: [ruled(x[len(lk[-1])], bracketing)] for c, x in raw.items()}, [ALPHA])
                    r["fixed"].append(np.mean([w == SUPPORTED for w, _ in fixed.values()]))
                if effect == 0:
                    r["false"].append(np.mean([w in (SUPPORTED, CONTRADICTED) for w, _ in got.values()]))
    return rows


def choose_batch(rows: dict[str, dict]) -> str:
    """The batch rule, reading no claim's result: among the batch sizes that reach the budget, each look
    at an even share of alpha, the most power at 1 sd."""
    return max(rows, key=lambda k: np.mean(rows[k]["power"]))


def choose_split(rows: dict[str, dict], tolerance: float = 0.01) -> str:
    """The split rule, fixed before the first table was computed and reading no claim's result: the
    most power at 1 sd; among the splits within ``tolerance`` (one point) of it, the one with the largest
    look-0 share (it stops more comparisons at 3 seeds where effects are large, at no real cost in
    power)."""
    best = max(np.mean(r["power"]) for r in rows.values())
    return max((k for k, r in rows.items() if np.mean(r["power"]) >= best - tolerance),
               key=lambda k: rows[k]["alphas"][0])


def _print_table(rows: dict[str, dict], pick: str, reps: int) -> None:
    print(f"\n{reps} replications per effect (common random numbers); power = P(supported) at 1 sd, mean of the "
          f"two conditions; paired differences to the chosen plan with their standard errors")
    print("| plan | one-sided level per look | power at 1 sd | vs chosen | false decisive at 0 | "
          "seeds per cell at " + " / ".join(map(str, EFFECTS)) + " sd |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        d = np.asarray(r["power"]) - np.asarray(rows[pick]["power"])
        print(f"| {name} | {' + '.join(f'{a / 2:.4g}' for a in r['alphas'])} | {np.mean(r['power']):.1%} "
              f"(SE {np.std(r['power']) / math.sqrt(reps):.1%}) | {d.mean():+.2%} (SE {d.std() / math.sqrt(reps):.2%}) "
              f"| {np.mean(r['false']) / 2:.2%} per direction | "
              + " / ".join(f"{np.mean(r['seeds'][e]):.2f}" for e in EFFECTS) + " |")
    top = len(rows[pick]["looks"][-1])
    print(f"| fixed {top} seeds | {ALPHA / 2:g} | {np.mean(rows[pick]['fixed']):.1%} | | | {top} |")
    print(f"chosen: {pick}")


@pytest.mark.skipif("CEMLAB_SPLIT_TABLE_REPS" not in os.environ,
                    reason="the tables of candidate batches and splits (docs/verdicts-history.md): "
                           "set CEMLAB_SPLIT_TABLE_REPS")
def test_the_shipped_batch_and_split_are_the_rules_choices_from_the_tables():
    """The main job's seed budget (``seeding.max_seeds``, fixed by the time rule of docs/verdicts-history.md) is
    reached in batches chosen by the batch rule (even split: ``plan_table``, ``choose_batch``), and
    alpha is split over that plan's two looks by the split rule (``choose_split``), both in the world the
    main job runs in (the bracketing look, the edge rule), on the same draws."""
    reps = int(os.environ["CEMLAB_SPLIT_TABLE_REPS"])
    top = len(LOOKS[-1])
    batches = {f"batch {b}: " + ", ".join(str(len(x)) for x in _looks_of(b, top)): _looks_of(b, top)
               for b in range(top - len(LOOKS[0]), 0, -1)}
    rows = plan_table(reps, {k: (lk, [ALPHA / len(lk)] * len(lk)) for k, lk in batches.items()})
    pick = choose_batch(rows)
    _print_table(rows, pick, reps)
    assert rows[pick]["looks"] == LOOKS
    splits = {f"look 0's share {s:g}": (LOOKS, [ALPHA * s, ALPHA * (1 - s)]) for s in SHARES}
    rows = plan_table(reps, splits, seed=21)
    pick = choose_split(rows)
    _print_table(rows, pick, reps)
    assert rows[pick]["alphas"] == pytest.approx(ALPHAS)


@pytest.mark.skipif("CEMLAB_PREVIOUS_PLAN_REPS" not in os.environ,
                    reason="the previous calibration's exact rate (docs/verdicts-history.md): "
                           "set CEMLAB_PREVIOUS_PLAN_REPS")
def test_the_previous_plans_rates_were_noise_around_their_exact_value():
    """The calibration before issue 43 (one learning rate per cell, 3 then 8 seeds, each look at
    alpha / 2): its "3.0% in a longer run" of 2,000 replications was Monte-Carlo noise. The ideal
    two-look procedure through ``decision.comparison_evidence`` and ``decision.decide``, many draws."""
    reps = int(os.environ["CEMLAB_PREVIOUS_PLAN_REPS"])
    rng = np.random.default_rng(43)
    counts = {c: [0, 0] for c in CONDITIONS}
    for _ in range(reps):
        shared = rng.normal(0.0, SIGMA_SEED, 8)
        logs = {c: np.log(BASE) + shared + rng.normal(0.0, SIGMA_CELL, 8) for c in CELLS}
        for cond, (ref, fav) in CONDITIONS.items():
            for n in (3, 8):
                d = logs[fav][:n] - logs[ref][:n]
                w = decide([comparison_evidence({(): d}, (), (), 0.0, "below", MARGIN)], "all", ALPHA / 2)[0]
                if w not in (INCONCLUSIVE, NOT_ENOUGH):
                    break
            counts[cond][0] += w == SUPPORTED
            counts[cond][1] += w == CONTRADICTED
    se = math.sqrt(0.025 * 0.975 / reps)
    print(f"\nthe previous plan (one rate, alpha/2 per look), {reps} draws (standard error {se:.3%}): " + "; ".join(
        f"{c}: false supported {s / reps:.3%}, false contradicted {k / reps:.3%}" for c, (s, k) in counts.items()))
    for s, k in counts.values():
        assert s / reps <= mc_bound(reps) and k / reps <= mc_bound(reps)
