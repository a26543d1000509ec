"""Stage 1b of a ladder rung with ``ladder.carry``: each family starts from its carried rates.

At a rung above the first of a ladder that carries (``Ladder.carries``), right after the grid is
expanded and the store is up, and before any trial: the report reads what the rungs below found per
*family* (a cell, all but its rate and seed): its best rate on the selection seeds and its edge, judged
as the bracketing stage judges (``cemlab.report.looks.carry_look.sweep_found``, handed in by ``cemlab
sweep`` as ``carrier``: the sweep layer never imports the report). :func:`start` then predicts each
family's optimum at this rung (``cemlab.sweeps.carry.carried`` by the rung's ``ladder.carry_rule``: on
the grid's lattice, inside the bounds) and replaces its grid trials by the trials at the policy's start rates around it
(``Policy.start``: the guess and one rate either side) at the grid's seeds: ordinary trials of the sweep
file, named and hashed as if it listed those rates (the grid expanded with ``lr=[...]``). A family the
rungs below found nothing for keeps the grid. Each trial carries its family's prediction
(``Trial.carried``), so the bracketing steps go on from its own start (``family_policy``).

The carried starts are recorded on the invocation (``Invocation.carried``), in ``summary.json`` and as
the parent run's tag ``cemlab.carried`` (JSON). The rung below is refused missing, before any trial,
naming the fix (run it first, or give ``--carry-from DIR``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

from cemlab.sweeps.carry import Found, carried
from cemlab.sweeps.gpu_slots import with_share
from cemlab.sweeps.stages.invocation import record_tag
from cemlab.sweeps.sweepfile.family_policy import carries
from cemlab.sweeps.sweepfile.schema import SweepError, Trial
from cemlab.sweeps.sweepfile.tuning_section import family_of

#: The parent run's tag with each family's carried start (JSON list).
CARRIED_TAG = "cemlab.carried"

#: ``carrier(spec, scale, trials, overrides, uri) -> {family_of(trial): [Found, ...]}``: what the rungs
#: below ``scale`` found per family of the grid ``trials`` (every rung below the store, or the folder
#: ``cemlab sweep --carry-from`` gave, has; raises ``SweepError`` naming the fix where the rung just
#: below is in neither).
Carrier = Callable[..., "dict[tuple, list[Found]]"]


def begin(spec, scale: str, trials: list[Trial], overrides: list[str] | None, uri: str,
          carrier: Carrier | None, share: float | None = None) -> tuple[list[Trial], list[dict]]:
    """The stage (module docstring): ``trials`` and [] where ``scale`` does not carry, else the rung's
    carried trials (each holding a GPU at ``share`` of one, ``gpu_slots.with_share``) and their record
    (:func:`start`) from what ``carrier`` reads of the rungs below."""
    if not carries(spec, scale):
        return trials, []
    if carrier is None:
        raise SweepError(f"{spec.source}: ladder.carry at {scale}: no judge of the rungs below was handed in "
                         f"(run it with cemlab sweep)")
    out, starts = start(spec, scale, trials, carrier(spec, scale, trials, overrides, uri), overrides)
    return with_share(out, share), starts


def start(spec, scale: str, trials: list[Trial], below: dict[tuple, Sequence[Found]],
          overrides: list[str] | None = None) -> tuple[list[Trial], list[dict]]:
    """The rung's trials with each family's grid trials replaced by those at its carried start
    (module docstring), and per family what it started from: ``family`` (its axes), ``carried`` (the
    prediction, None where the rungs below found nothing), ``rates`` (its start), ``below`` (each rung
    below's tokens, best rate and edge)."""
    if any(t.axes.get("lr") is None for t in trials):
        raise SweepError(f"{spec.source}: ladder.carry at {scale}: the grid has no lr axis to carry")
    if any("lr" == o.partition("=")[0].strip() for o in overrides or []):
        raise SweepError(f"{spec.source}: ladder.carry at {scale}: an lr axis from the command line would replace "
                         f"the carried rates; drop lr=[...] (or set ladder.carry: false)")
    policy = spec.tuning_policy(scale, trials)
    if policy is None:
        raise SweepError(f"{spec.source}: ladder.carry at {scale}: the rung brackets nothing (tuning.max_steps of "
                         f"{spec.ladder.scale}), so a carried start could not step on from a wrong guess; give the "
                         f"base scale bracketing steps or set ladder.carry: false")
    tokens, ratio, bounds = spec.rungs()[scale], spec.rate_ratio(scale, trials), tuple(spec.tuning.bounds)
    grid, rule = tuple(policy.grid), spec.ladder.rule_at(tokens)
    plan: dict[tuple, tuple[float, tuple[float, ...]]] = {}
    for fam in dict.fromkeys(family_of(t) for t in trials):
        guess = carried(list(below.get(fam, ())), tokens, grid, ratio, bounds, rule)
        plan[fam] = (guess, policy.start(guess) if math.isfinite(guess) else grid)
    rates = sorted({r for g, rs in plan.values() if math.isfinite(g) for r in rs})
    wide = spec.expand(scale, overrides=[*(overrides or []), f"lr=[{','.join(f'{r:g}' for r in rates)}]"]) if rates else []
    seeds = {int(t.axes["seed"]) for t in trials if "seed" in t.axes}
    out = [t for t in trials if not math.isfinite(plan[family_of(t)][0])]   # a family that keeps the grid
    for t in wide:
        guess, own = plan.get(family_of(t), (math.nan, ()))
        if math.isfinite(guess) and int(t.axes.get("seed", 0)) in seeds and _among(float(t.axes["lr"]), own):
            out.append(dataclasses.replace(t, carried=guess))
    order = {fam: i for i, fam in enumerate(plan)}   # grid order: family, then rate, then seed
    out.sort(key=lambda t: (order[family_of(t)], float(t.axes["lr"]), int(t.axes.get("seed", 0))))
    starts = [dict(family=dict(fam), carried=None if not math.isfinite(g) else g, rates=list(rs),
                   below=[dict(tokens=f.tokens, best_lr=None if not math.isfinite(f.best) else f.best, edge=f.edge)
                          for f in below.get(fam, ())])
              for fam, (g, rs) in plan.items()]
    return out, starts


def _among(x: float, rates: Sequence[float]) -> bool:
    return any(abs(x - r) <= 1e-9 * r for r in rates)


def record(inv, starts: list[dict]) -> None:
    """The carried starts on the invocation (``Invocation.carried``, written to ``summary.json``) and on
    the parent run (``CARRIED_TAG``, without what the rungs below found when the tag would be long);
    nothing where none was carried."""
    if not starts:
        return
    inv.carried = list(starts)
    record_tag(inv, CARRIED_TAG, inv.carried, lambda cs: [{k: v for k, v in c.items() if k != "below"} for c in cs])
