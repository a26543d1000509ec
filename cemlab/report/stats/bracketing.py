"""Whether a cell's learning-rate optimum is *bracketed*: its best rate, on the validation metric,
lies strictly inside the rates it was tried at (``cemlab.sweeps.tuning_policy.edge_of``, the tuning
policy's one definition), read in three places: the sweep's
bracketing looks (``interim_look_store.sweep_bracket``: a cell best at an edge gets the rate beyond
it), the verdicts (``pairing.compare``: a verdict stands only where the cells that could erase it
are bracketed) and the report's tuning table (``figures.lr_tuning``).

A rate's score is the median over the cell's seeds of the log validation metric (the test metric
where no validation was logged), a worst outcome at +inf ranked last (``divergence.outcomes``): the
statistic the effect shown chooses each seed's rate by (``claims.shown_effect``). A rate at which
half the seeds or more diverged scores +inf, worse than every rate whose runs mostly finished, so a
divergence beyond the best rate brackets that end; a divergence on a minority of the seeds moves the
score no further than a bad finished run would, so a variant's own occasional divergence at its best
rate cannot push its best to an edge, out of bracketing, and its comparison out of a decision. The
best rate is the lowest score; it is bracketed when it is neither the lowest nor the highest rate
tried (docs/verdicts.md, "Bracketing").
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from cemlab.report.stats.divergence import outcomes
# The ``edge`` values and ``edge_of``, the one definition of "bracketed", are the tuning policy's, which
# the sweep's bracketing steps and ``cemlab plan`` call too (re-exported here for the report's readers).
from cemlab.sweeps.tuning_policy import DIVERGED_ALL, HIGHEST, LOWEST, NO_RUN, ONE_RATE, edge_of  # noqa: F401


def tuning_family(cell: str) -> str:
    """A cell id without its learning rate: the cells a tuned comparison chooses its rate among."""
    try:
        axes = json.loads(cell)
    except ValueError:
        return cell
    axes.pop("lr", None)
    return json.dumps(axes, sort_keys=True, default=str)


def rate_score(test_logs, val_logs) -> float:
    """A rate's score from its seeds' log metrics (arrays; +inf a worst outcome, NaN no value): the
    median log validation metric, the median log test metric where no validation was logged; NaN
    without any value."""
    for x in (np.asarray(val_logs, dtype=float), np.asarray(test_logs, dtype=float)):
        x = np.sort(x[~np.isnan(x)])
        if len(x):
            n = len(x)
            return float(x[n // 2]) if n % 2 else float(x[n // 2 - 1] / 2 + x[n // 2] / 2)
    return math.nan


def family_edges(trials: pd.DataFrame) -> pd.DataFrame:
    """Per tuning family of ``trials`` (the report's trial table; ``tuning_family`` of its ``cell``): the rates it has (``lrs``, those with an outcome at some seed), their scores, the
    best rate and its edge (``edge_of``), and the family's seeds. Failed runs have no value."""
    cols = ["family", "lrs", "scores", "best_lr", "edge", "seeds"]
    if trials.empty:
        return pd.DataFrame(columns=cols)
    t = outcomes(trials)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = t.assign(_test=np.log(t["value"].astype(float)),
                     _val=np.log(t["val"].astype(float)) if "val" in t else math.nan,
                     _family=t["cell"].map(tuning_family))
    rows = []
    for fam, g in t.groupby("_family", sort=False):
        lrs, scores = [], []
        for lr, r in g.groupby(g["lr"].astype(float), sort=True):
            score = rate_score(r["_test"], r["_val"])
            if not math.isnan(score):
                lrs.append(float(lr))
                scores.append(score)
        best, edge = edge_of(lrs, scores)
        rows.append(dict(family=fam, lrs=lrs, scores=scores, best_lr=best, edge=edge,
                         seeds=sorted(int(s) for s in g["seed"].dropna().unique())))
    return pd.DataFrame(rows, columns=cols)


def edge_text(variant: str, lrs, best: float, edge: str) -> str:
    """What a page says of a cell that is not bracketed, e.g. ``cem-attn T2 dplr eta=1: best at its
    highest rate 0.004 of 0.002, 0.004``."""
    rates = ", ".join(f"{x:g}" for x in sorted(lrs))
    if edge in (LOWEST, HIGHEST):
        return f"{variant}: best at its {edge} rate {best:g} of {rates}"
    return f"{variant}: {edge}" + (f" ({rates})" if rates else "")


def position_edges(cands: list, logs: list, seeds=None) -> list[str]:
    """Per position of a tuned comparison, '' where every tuning family among its candidates (a cell
    at each of its learning rates) has a bracketed optimum on the seeds read, else the cells at an
    edge (``edge_of`` on each rate's ``rate_score``; ``edge_text``). A cell tried at one rate only
    was not tuned and has nothing to bracket (a position that picks among cells, e.g. of several
    preconditioners, each at one rate). ``seeds``: read each cell's edge on these seeds only (the ones
    its sweep's bracketing look read, so that a seed added later, a divergence among them included,
    cannot move a cell to an edge after the look that could still have extended it); None: all."""
    keep = None if seeds is None else {int(x) for x in seeds}
    out = []
    for cs, pos in zip(cands, logs):
        fams: dict[str, list] = {}
        for c, (t, v) in zip(cs, pos):
            if keep is not None:
                t, v = t[t.index.isin(keep)], v[v.index.isin(keep)]
            fams.setdefault(tuning_family(str(c.get("cell", ""))), []).append((float(c.get("lr", math.nan)),
                                                                               rate_score(t, v), c))
        notes = []
        for items in fams.values():
            lrs = [lr for lr, _, _ in items]
            best, edge = edge_of(lrs, [sc for _, sc, _ in items])
            if edge and edge not in (ONE_RATE, DIVERGED_ALL):   # one rate: not tuned, nothing to bracket
                c = items[0][2]
                notes.append(edge_text(" ".join(str(c.get(k, "")) for k in ("variant", "size") if c.get(k, "")),
                                       lrs, best, edge))
        out.append("; ".join(notes))
    return out


def untuned_sides(evidence, coefs, side: str, edges) -> tuple:
    """The evidence with every side voided (p = 1) that a cell at an edge of its rates could erase,
    and the sides voided. A verdict that a cell is worse stands only if the losing cell is bracketed
    (the winner under-tuned only widens the gap; the loser under-tuned can close it): for an effect
    ``sum_i c_i log m_i`` decided below the tolerance the cells with c_i < 0 lose, above it those
    with c_i > 0; ``negligible`` (and both sides of an equivalence) needs every cell bracketed
    (docs/verdicts.md, "Bracketing")."""
    if not edges or not any(edges) or evidence is None:
        return evidence, ()

    def blocked(sign: int) -> bool:   # a cell of this coefficient sign (0: any) is not bracketed
        return any(e and (c * sign > 0 if sign else c != 0) for c, e in zip(coefs, edges))

    if side == "within":
        claim = against = blocked(0)
    else:
        s = -1 if side == "below" else 1
        claim, against = blocked(s), blocked(-s)
    negligible = blocked(0)
    blocks = tuple(w for w, b in (("supported", claim), ("contradicted", against), ("negligible", negligible)) if b)
    return replace(evidence, p_claim=1.0 if claim else evidence.p_claim,
                   p_against=1.0 if against else evidence.p_against,
                   p_negligible=1.0 if negligible else evidence.p_negligible), blocks
