"""Learning rates carried up a ladder: where each family (a cell, all but its rate and seed) starts
its search at a rung, from what the rungs below found.

A rung below says, per family, its best rate on the selection seeds and whether the tuning policy
found it bracketed (``cemlab.sweeps.tuning_policy.edge_of``: interior, or a diverged rate beyond it)
or stopped at an end. Each rung below gives one *point* (tokens per parameter, rate):

- bracketed: its best rate (a found optimum);
- stopped at its highest / lowest rate: one step beyond that end (the optimum lies past it, and the
  nearest rate there is the least the evidence asks for);
- every rate diverged, or no finished run: no point.

The *carried prediction* (:func:`predict`) at a rung with ``tokens`` per parameter, by the rung's
``rule`` (``RULES``; the sweep file's ``ladder.carry_rule``, default ``nearest``):

- no point: none (the family starts from the scale's grid, as the first rung does);
- ``nearest``: the nearest rung's point (the optimum persists across training lengths);
- ``trend``: with fewer than two found optima (bracketed points) the nearest rung's point; with two
  or more the power law through them, log lr = a + b log tokens by least squares over the found optima
  only (the form Bjorck et al., "Scaling Optimal LR Across Token Horizons", ICLR 2025, fit across token
  horizons), at ``tokens``; its slope kept within [-1, 1] per doubling (a fit through two noisy rungs
  must not throw the guess off the lattice's reach).

Why ``nearest`` is the default: on the recursion ablation's ladder, rung 5 started from the trend
through rungs 0.3125 and 1.25, and 2 of its 9 cells found the rate predicted (median error 1 octave,
Llama 2); the nearest rung's optimum was each cell's found optimum at all 9 (docs/ladder.md).

The prediction is put on the grid's lattice (the grid's rates times whole powers of its ratio, so that
compared cells meet at the same rates) and inside the tuning bounds; the family then starts at the
policy's rates around it (``Policy.start``) and steps on from there wherever the guess was wrong.

Pure Python: the sweep's carry stage and the ladder page call the same rule, so the page's
"carried" column is what the sweep started from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from cemlab.sweeps.tuning_policy import HIGHEST, LOWEST, round_lr

#: Largest |slope| of the fitted power law, in octaves of rate per octave of tokens.
MAX_SLOPE = 1.0
#: How a rung's prediction is made from the rungs below (module docstring); the first is the default.
RULES = ("nearest", "trend")


@dataclass(frozen=True)
class Found:
    """What a rung below found for a family: its tokens per parameter, best rate on the selection
    seeds and edge (``tuning_policy.edge_of``: '' bracketed, else why not)."""

    tokens: float
    best: float
    edge: str


def point(found: Found, ratio: float) -> float:
    """The rate a rung below points at (module docstring): its best rate when bracketed, one step
    beyond the end it stopped at, NaN where it found nothing."""
    if not (math.isfinite(found.best) and found.best > 0):
        return math.nan
    if found.edge == "":
        return found.best
    if found.edge == HIGHEST:
        return found.best * ratio
    if found.edge == LOWEST:
        return found.best / ratio
    return math.nan


def predict(below: Sequence[Found], tokens: float, ratio: float, rule: str = RULES[0]) -> float:
    """The carried prediction at a rung of ``tokens`` per parameter from the rungs ``below`` (any
    order) by ``rule`` (``RULES``), before it is put on the lattice (:func:`on_lattice`); NaN where no
    rung below points."""
    if rule not in RULES:
        raise ValueError(f"carry rule {rule!r}: use one of {', '.join(RULES)}")
    pts = [(f.tokens, point(f, ratio), f.edge == "") for f in below]
    pts = [(t, r, found) for t, r, found in pts if math.isfinite(r) and t > 0]
    if not pts:
        return math.nan
    optima = [(math.log2(t), math.log2(r)) for t, r, found in pts if found]
    if rule == "nearest" or len(optima) < 2 or len({x for x, _ in optima}) < 2:
        nearest = min(pts, key=lambda p: abs(math.log2(p[0]) - math.log2(tokens)))
        return nearest[1]
    mx = sum(x for x, _ in optima) / len(optima)
    my = sum(y for _, y in optima) / len(optima)
    slope = sum((x - mx) * (y - my) for x, y in optima) / sum((x - mx) ** 2 for x, _ in optima)
    slope = max(-MAX_SLOPE, min(MAX_SLOPE, slope))
    return 2.0 ** (my + slope * (math.log2(tokens) - mx))


def on_lattice(rate: float, grid: Sequence[float], ratio: float, bounds: tuple[float, float]) -> float:
    """``rate`` moved to the nearest rate of the grid's lattice (a grid rate times a whole power of
    ``ratio``, 3 significant digits) inside ``bounds``; NaN stays NaN."""
    if not math.isfinite(rate) or rate <= 0:
        return math.nan
    anchor = min(grid)
    k = round(math.log(rate / anchor) / math.log(ratio))
    lo = math.ceil(math.log(bounds[0] / anchor) / math.log(ratio) - 1e-9)
    hi = math.floor(math.log(bounds[1] / anchor) / math.log(ratio) + 1e-9)
    return round_lr(anchor * ratio ** max(lo, min(hi, k)))


def lattice(grid: Sequence[float], ratio: float, bounds: tuple[float, float]) -> list[float]:
    """Every rate of the grid's lattice inside ``bounds``, increasing (what a carried rung may run:
    its start and its steps lie on it)."""
    anchor = min(grid)
    lo = math.ceil(math.log(bounds[0] / anchor) / math.log(ratio) - 1e-9)
    hi = math.floor(math.log(bounds[1] / anchor) / math.log(ratio) + 1e-9)
    return [round_lr(anchor * ratio ** k) for k in range(lo, hi + 1)]


def carried(below: Sequence[Found], tokens: float, grid: Sequence[float], ratio: float,
            bounds: tuple[float, float], rule: str = RULES[0]) -> float:
    """The carried prediction on the lattice and inside the bounds (:func:`predict`, :func:`on_lattice`)."""
    return on_lattice(predict(below, tokens, ratio, rule), grid, ratio, bounds)
