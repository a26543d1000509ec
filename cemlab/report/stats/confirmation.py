"""A tuned comparison judged on fresh seeds (the *union* rule): each cell's learning rate chosen on
the selection seeds, then the favoured side at its chosen rate tested against the reference at every
rate of the union of the compared cells' chosen rates, on the confirmation seeds only.

Why the union: a reference whose tuning went worse by chance (its chosen rate noisy on a plateau,
the better rate found by the other cell) must still lose at the rate the other cell found; testing
it only at its own chosen rate lets selection noise read as an effect (docs/tuned-design-study.md,
Table 2). A union rate at which every selection run of the cell to be beaten diverged is not
required (that cell would never be run there by choice; its divergence is shown, not tested). The
cell's own chosen rate is always required. The method and its measured error rates:
``docs/verdicts.md``, "Tuned comparisons".

The tests stay those of ``decision.every_choice_p`` and ``bounds.every_choice_bound`` (intersection-
union over the required choices, one-sided t per choice); :class:`UnionChoice` only says which
choices each direction requires: the positions that may be picked for a direction are fixed at
their chosen candidate (so no Bonferroni factor), the others range over the union.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class UnionChoice:
    """Per position of a comparison: the candidate chosen on the selection seeds (``chosen``) and
    the candidates it must beat or be beaten at (``union``: those at a union rate, less those whose
    every selection run diverged; the chosen one always in), with the seeds that chose
    (``selection``) and the union's rates (``rates``)."""

    chosen: tuple[int, ...]
    union: tuple[tuple[int, ...], ...]
    selection: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()

    def required(self, coefs: Sequence[float], direction: str) -> list[tuple]:
        """The choices (one candidate index per position) a test of ``direction`` ('below' or
        'above' the tolerance) must pass: the positions that may be picked for it (``c_i > 0`` for
        'below', ``c_i < 0`` for 'above', as in ``decision.every_choice_p``) at their chosen
        candidate, every other position at each candidate of its union."""
        sign = 1 if direction == "below" else -1
        sets = [(self.chosen[i],) if c * sign > 0 else self.union[i] for i, c in enumerate(coefs)]
        return list(itertools.product(*sets))

    def restrict(self, table: Mapping[tuple, object], coefs: Sequence[float], direction: str, fill) -> dict:
        """``table`` (choice -> p-value or differences) on the required choices of ``direction``; a
        required choice it lacks (a cell never run at a union rate on the confirmation seeds) gets
        ``fill`` (a p-value of 1, no differences): it fails the test, never drops out of it."""
        return {c: table.get(c, fill) for c in self.required(coefs, direction)}

    def describe(self, n_choices: Sequence[int]) -> str:
        """The rule in words for a comparison's ``choice`` column."""
        sel = seeds_text(self.selection)
        rates = ", ".join(f"{r:g}" for r in self.rates)
        return (f"each cell at the rate with the lowest median validation on seeds {sel} (of "
                f"{' x '.join(map(str, n_choices))} candidates); judged on the other seeds: the favoured cell at "
                f"its chosen rate against the other at every rate of the union {{{rates}}}")


def seeds_text(seeds: Sequence[int]) -> str:
    """``0-1`` for consecutive seeds, else ``0, 2, 5``."""
    s = sorted(int(x) for x in seeds)
    if len(s) > 1 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


def selection_score(val: Mapping, test: Mapping, seeds: Sequence[int]) -> tuple[float, bool]:
    """A candidate's score on the selection ``seeds`` (lower is better) and whether every run it has
    there diverged: the median of its log validation metric, a worst outcome (``test`` at +inf: a
    divergence, a non-finite or exploded metric) ranked last (+inf), its log test metric where no
    validation was logged (as ``bracketing.rate_score``); NaN where it has no run there."""
    vals, dead = [], []
    for s in seeds:
        t = _get(test, s)
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        worst = not math.isfinite(t)
        v = _get(val, s)
        v = t if v is None or math.isnan(v) else v
        vals.append(math.inf if worst or not math.isfinite(v) else float(v))
        dead.append(worst)
    if not vals:
        return math.nan, False
    return float(np.median(vals)), all(dead)


def _get(m: Mapping, key):
    try:
        v = m[key]
    except (KeyError, IndexError):
        return None
    return float(v)


def choose(rates: Sequence[Sequence[float]], scores: Sequence[Sequence[float]],
           dead: Sequence[Sequence[bool]], selection: Sequence[int] = (), rtol: float = 1e-6) -> UnionChoice:
    """The :class:`UnionChoice` of a comparison from each position's candidates: their learning rates
    (``rates[i][j]``), selection scores (``selection_score``) and whether every selection run diverged
    (``dead[i][j]``). Each position chooses its lowest score (ties: the first, in candidate order;
    no score at all: the first candidate); the union is the chosen rates of every position."""
    chosen = []
    for sc in scores:
        arr = np.asarray(sc, dtype=float)
        ok = ~np.isnan(arr)
        chosen.append(int(np.flatnonzero(ok)[np.argmin(arr[ok])]) if ok.any() else 0)
    union_rates = sorted({float(rates[i][c]) for i, c in enumerate(chosen)})
    union = []
    for i, rs in enumerate(rates):
        at = [j for j, r in enumerate(rs)
              if j == chosen[i] or (any(math.isclose(r, u, rel_tol=rtol) for u in union_rates) and not dead[i][j])]
        union.append(tuple(at))
    return UnionChoice(tuple(chosen), tuple(union), tuple(int(s) for s in selection), tuple(union_rates))
