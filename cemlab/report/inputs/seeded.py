"""The trials a report reads for a sweep that added trials while it ran: its grid, plus the seeds its
seed looks added and the rates its bracketing steps added (those with a run in the store), named and
hashed as the sweep file's own (:func:`seeded_grid`; at a ladder rung that carries its rates,
``ladder.carry``, every rate of the lattice its families may have started or stepped at); a look's view restricted to its seeds
(:func:`at_seeds`). The seeds never added are not "missing". Used by the report's context
(``inputs.context``) and by the looks (``cemlab.report.looks``)."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from cemlab.sweeps.carry import lattice
from cemlab.sweeps.sweepfile import tuning_section
from cemlab.sweeps.sweepfile.family_policy import carries


def full_grid(spec, scale: str, trials: list, overrides: list[str] | None = None) -> list:
    """The sweep's trials at ``scale`` with every seed of its last planned look and every learning
    rate its bracketing looks can reach (``SweepSpec.tuning_rates``; its own grid when it plans
    neither): the trials the looks may add, named and hashed as the file's own."""
    looks = spec.looks(scale, trials)
    extra = []
    fresh = confirmation_seeds(spec, scale, trials)
    if len(looks) > 1 or fresh:
        extra.append(f"seed=[{','.join(str(s) for s in (looks[-1] if len(looks) > 1 else looks[0] + fresh))}]")
    rates = reachable_rates(spec, scale, trials)
    if rates:
        extra.append(f"lr=[{','.join(f'{r:g}' for r in rates)}]")
    if not extra:
        return list(trials)
    return spec.expand(scale, overrides=[*(overrides or []), *extra])


def confirmation_seeds(spec, scale: str, trials: list) -> list[int]:
    """Every fresh seed a sweep's confirmation stage could add at ``scale`` (``confirmation:``): after
    the grid's seeds, as many as the budget could buy for one comparison of two cells at one rate
    (the most it can give any cell), or the primary condition's fixed seeds where the file gives them
    (no pair gets more); [] without a budget there."""
    budget = (spec.confirmation_budget(scale, trials, len(trials)) if trials and hasattr(spec, "confirmation_budget")
              else None)
    if budget is None:
        return []
    top = max(seed_of(t) for t in trials)
    fixed = spec.primary_seeds(scale)
    n = fixed if fixed is not None else max(0, budget - len(trials)) // 2
    return list(range(top + 1, top + 1 + n))


def reachable_rates(spec, scale: str, trials: list) -> list[float]:
    """Every rate the sweep's bracketing looks can give a cell at ``scale`` where they can add one
    beyond the grid's (``SweepSpec.tuning_rates``); [] where they cannot."""
    if not trials or not getattr(spec, "tuning", None) or not spec.bracket_steps(scale, trials):
        return []
    if carries(spec, scale):   # a carried ladder rung: each family started on the lattice, anywhere in the bounds
        return lattice(tuning_section.grid_rates(trials), spec.rate_ratio(scale, trials), tuple(spec.tuning.bounds))
    rates = spec.tuning_rates(scale, trials)
    grid = {float(t.axes.get("lr", t.config.train.lr)) for t in trials}
    return rates if set(rates) - grid else []


def cell_of(trial) -> str:
    """A trial's cell, as the report's tables name it (``table.trial_row``)."""
    from cemlab.report.inputs.table import trial_row

    return trial_row(trial, 0)["cell"]


def seed_of(trial) -> int:
    return int(trial.axes.get("seed", trial.config.train.seed))


def sweep_grid(ctx, sweep: str | None = None) -> tuple:
    """``(spec, trials)`` of ``sweep`` (default ``ctx.sweep``) at the report's scale: its parsed file
    and its planned grid, read through ``ctx.grids``; ``(None, [])`` for a context without grids or a
    sweep this project does not have at this scale. The one lookup the looks and the figures share."""
    grids = getattr(ctx, "grids", None)
    if grids is None:
        return None, []
    sweep = sweep or ctx.sweep
    try:
        return grids.spec(sweep), grids.trials(sweep, ctx.scale)
    except ValueError:
        return None, []


def selection_seeds(ctx, sweep: str | None = None) -> list[int] | None:
    """The seeds each cell's rate was chosen on in a sweep with a confirmation stage at the report's
    scale (its grid's seeds: the fresh ones came after, at the chosen rates only); None for a sweep
    without that stage there, or a context that does not know its sweep's grid (``ctx.grids``)."""
    spec, trials = sweep_grid(ctx, sweep)
    if not trials or spec.confirmation_budget(ctx.scale, trials) is None:
        return None
    return sorted({seed_of(t) for t in trials})


def seeded_grid(grids, sweep: str, scale: str, store) -> list:
    """The trials the report reads for ``sweep``: its grid, plus the seeds its looks added and the
    rates its bracketing looks added (those with a run in ``store``), in grid order."""
    planned = grids.trials(sweep, scale)
    spec = grids.spec(sweep)
    if (getattr(spec, "seeding", None) is None and getattr(spec, "tuning", None) is None
            and getattr(spec, "confirmation", None) is None) or not planned:
        return planned
    try:
        full = full_grid(spec, scale, planned, grids.overrides)
    except ValueError:  # overrides that do not fit this sweep: its own grid
        full = full_grid(spec, scale, planned)
    if len(full) == len(planned):
        return planned
    base = {t.config_hash for t in planned} if not carries(spec, scale) else set()   # carried: the runs it has
    store.prefetch(t.config_hash for t in full)
    return [t for t in full if t.config_hash in base or store.runs_for_hash(t.config_hash)]


def at_seeds(trials_of: Callable[[str], pd.DataFrame], seeds: list[int]):
    """``(cells_of, trials_of)`` of the report restricted to ``seeds``."""
    from cemlab.report.inputs.table import aggregate

    keep = set(int(s) for s in seeds)
    cache: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}

    def both(sweep: str):
        if sweep not in cache:
            t = trials_of(sweep)
            t = t[t["seed"].astype(int).isin(keep)] if len(t) else t
            cache[sweep] = (t, aggregate(t))
        return cache[sweep]

    return (lambda s: both(s)[1]), (lambda s: both(s)[0])
