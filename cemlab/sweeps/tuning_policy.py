"""The tuning policy: how a *family* (the cells equal but for the learning rate and the seed) searches
its learning rate. One interface, called by the three places that need the rule:

- the sweep's bracketing steps (``cemlab.report.looks.interim_look_store.sweep_bracket``, which the
  sweep's ``stages.bracketing`` is handed): which rates each family gets next;
- the report's edge rule (``cemlab.report.stats.bracketing``): whether a family's optimum is
  bracketed, or why it stopped, so that a verdict against an under-tuned cell does not stand;
- ``cemlab plan`` (``tuning_section.family_extra`` / ``family_least``, ``sweeps.plan``,
  ``ladder_plan.RungPlan``): the rates a family adds at least and at most.

In: what a family tried and how each rate scored (:class:`Tried`: per rate the median log validation
metric over the seeds read, +inf where half of them or more diverged, NaN where none has an outcome).
Out: :class:`Next`: the rates to add, or the family's state, ``bracketed`` (its best rate interior, or a
diverged rate beyond its best end) or ``stopped`` with the reason (a bound, the step budget).

A policy is a named entry of :data:`POLICIES` (a plugin may add one, ``docs/extending.md``); a sweep
file names it in ``tuning.policy`` (default :class:`Bracketing`). A family's policy is built in one place,
``cemlab.sweeps.sweepfile.family_policy``: the grid's, or, for a family carried up a ladder
(``ladder.carry``), its own start's. Pure Python: no store, no report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from cemlab.models.registry import Registry

#: Edges of a family's rates (:func:`edge_of`): its best rate is the lowest / highest it tried, it has
#: one rate, no rate has an outcome, or every rate diverged (half its seeds or more); "" is bracketed.
LOWEST, HIGHEST, ONE_RATE, NO_RUN = "lowest", "highest", "one rate", "no finished run"
DIVERGED_ALL = "diverged at every rate"
#: A family's state after :meth:`Policy.judge`.
STEP, BRACKETED, STOPPED = "step", "bracketed", "stopped"
#: Relative tolerance when rates (3 significant digits) are compared.
REL = 1e-9


def round_lr(lr: float) -> float:
    """A learning rate to 3 significant digits (sampled rates get short ids and exact hashes; a step's rate)."""
    return float(f"{lr:.3g}")


def edge_of(lrs, scores) -> tuple[float, str]:
    """``(best rate, edge)`` of a family tried at ``lrs`` with per-rate ``scores``: edge '' where the best
    rate is interior (bracketed; a rate scored +inf, mostly diverged, is worse than every finished one,
    so a divergence beyond the best rate brackets that end), else ``LOWEST`` / ``HIGHEST`` /
    ``ONE_RATE`` / ``NO_RUN`` / ``DIVERGED_ALL``. A tie for the best goes to the lower rate. The one
    definition of "bracketed" (docs/verdicts.md, "Bracketing")."""
    pairs = sorted((float(r), float(s)) for r, s in zip(lrs, scores))
    if not pairs:
        return math.nan, NO_RUN
    finite = [(s, i) for i, (_, s) in enumerate(pairs) if math.isfinite(s)]
    if not finite:
        return math.nan, DIVERGED_ALL if any(math.isinf(s) for _, s in pairs) else NO_RUN
    i = min(finite)[1]
    if len(pairs) == 1:
        return pairs[0][0], ONE_RATE
    return pairs[i][0], LOWEST if i == 0 else HIGHEST if i == len(pairs) - 1 else ""


def steps_taken(grid, lrs) -> int:
    """The rates of ``lrs`` that are not the grid's (each step beyond the grid adds one): what
    :attr:`Tried.steps` counts for a family that has the rates ``lrs``."""
    return sum(1 for x in lrs if not any(abs(x - g) <= REL * g for g in grid))


@dataclass(frozen=True)
class Tried:
    """What a family tried: its rates (any order) and each rate's score (see the module docstring)."""

    rates: tuple[float, ...]
    scores: tuple[float, ...]
    #: Steps already taken beyond the grid (each added one rate or more).
    steps: int = 0


@dataclass(frozen=True)
class Next:
    """A policy's answer for one family: the rates to add now (empty unless ``state`` is ``step``), its
    best rate and edge (:func:`edge_of`), and why it stopped (``stopped``: a bound, the step budget)."""

    state: str
    rates: tuple[float, ...] = ()
    best: float = math.nan
    edge: str = ""
    reason: str = ""


class Policy(Protocol):
    """A tuning policy for one grid (its rates) at one scale."""

    #: The grid's rates, increasing: every family starts from them.
    grid: tuple[float, ...]

    def judge(self, tried: Tried) -> Next:
        """The rates ``tried`` should get next, or that it is bracketed, or why it stopped."""

    def reachable(self) -> list[float]:
        """Every rate the policy may give a family of this grid, increasing (the grid's included)."""

    def least(self, grid: list[float]) -> int:
        """Rates a family with the grid rates ``grid`` is certain to add once they finish."""

    def most(self, grid: list[float]) -> int:
        """Rates such a family may add at most."""

    def start(self, center: float) -> tuple[float, ...]:
        """The rates a family starts from when a guess of its optimum is carried in (a ladder rung
        above the first, ``cemlab.sweeps.carry``); the grid where the guess is NaN."""


@dataclass(frozen=True)
class Bracketing:
    """Step one rate beyond the best end, at the grid's ratio, until the best rate is interior (or a
    diverged rate lies beyond it), within ``bounds`` (inclusive) and at most ``max_steps`` steps per
    family (a budget cap, said when it stops a family). A family extends one end only: once its best is
    at the low end, adding lower rates cannot make its highest rate best. A family that diverged at
    every rate steps down (a lower rate is where a diverging model finishes, if anywhere)."""

    grid: tuple[float, ...]
    ratio: float
    bounds: tuple[float, float]
    max_steps: int

    def reachable(self) -> list[float]:
        low, high = min(self.grid), max(self.grid)
        out = set(self.grid)
        for k in range(1, self.max_steps + 1):
            out.update(r for r in (round_lr(low / self.ratio ** k), round_lr(high * self.ratio ** k))
                       if self.bounds[0] <= r <= self.bounds[1])
        return sorted(out)

    def beyond(self, lrs, edge: str) -> list[float]:
        """The reachable rates beyond ``edge`` ('lowest' or 'highest') of ``lrs``, nearest first."""
        if edge not in (LOWEST, HIGHEST):
            raise ValueError(f"edge={edge!r}: give one of {LOWEST}, {HIGHEST}")
        rates = self.reachable()
        if edge == LOWEST:
            return sorted((r for r in rates if r < min(lrs) * (1 - REL)), reverse=True)
        return sorted(r for r in rates if r > max(lrs) * (1 + REL))

    def judge(self, tried: Tried) -> Next:
        best, edge = edge_of(tried.rates, tried.scores)
        if edge == "":
            return Next(BRACKETED, best=best, edge=edge)
        if edge in (ONE_RATE, NO_RUN):
            return Next(STOPPED, best=best, edge=edge, reason=edge)
        toward = LOWEST if edge == DIVERGED_ALL else edge
        if tried.steps >= self.max_steps:
            return Next(STOPPED, best=best, edge=edge, reason=f"max_steps ({self.max_steps}) spent")
        nxt = self.beyond(tried.rates, toward)
        if not nxt:
            return Next(STOPPED, best=best, edge=edge,
                        reason=f"the bound {self.bounds[0 if toward == LOWEST else 1]:g} reached")
        return Next(STEP, (nxt[0],), best=best, edge=edge)

    def least(self, grid: list[float]) -> int:
        """One for a family of two grid rates with a reachable rate beyond each end (the better of two
        rates is always an end, so its first step is certain), none otherwise."""
        return int(len(grid) == 2 and self.max_steps > 0 and all(self.beyond(grid, e) for e in (LOWEST, HIGHEST)))

    def most(self, grid: list[float]) -> int:
        """Its reachable rates beyond its lower end or beyond its upper end, whichever are more."""
        return max(len(self.beyond(grid, e)) for e in (LOWEST, HIGHEST))

    def start(self, center: float) -> tuple[float, ...]:
        """The guess and one rate either side at the grid's ratio: the fewest rates whose best can be
        interior, so a right guess is bracketed without a step. Moved inward, whole steps, to lie
        inside the bounds; the grid where the guess is NaN."""
        if not math.isfinite(center):
            return tuple(self.grid)
        k = 0
        while k < 8 and round_lr(center * self.ratio ** (k - 1)) < self.bounds[0] * (1 - REL):
            k += 1
        while k > -8 and round_lr(center * self.ratio ** (k + 1)) > self.bounds[1] * (1 + REL):
            k -= 1
        return tuple(round_lr(center * self.ratio ** (k + j)) for j in (-1, 0, 1))


#: ``tuning.policy`` names -> a factory ``(grid, ratio, bounds, max_steps) -> Policy``.
POLICIES: Registry = Registry("tuning policy")
POLICIES.register("bracketing")(Bracketing)
