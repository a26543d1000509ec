"""The ``tuning:`` section of a sweep file: learning rates added beyond a grid's ends (bracketing).

The section itself is ``cemlab.sweeps.sweepfile.schema.Tuning``; ``SweepSpec`` answers for a scale
and its grid (``bracket_steps``, ``rate_ratio``, ``tuning_policy``, ``tuning_rates``, ``next_rate``)
with the helpers here and the tuning policy (``cemlab.sweeps.tuning_policy``: the one rule);
:func:`check_tuning` refuses, when the file is read, a scale that brackets an lr axis that
cannot be extended (fewer than 2 rates, uneven on the log scale, outside the bounds); the sweep's
stage that adds the rates is ``cemlab.sweeps.stages.bracketing``, and ``cemlab plan`` counts what
it may add (:func:`family_extra`) and what it must (:func:`family_least`). The helpers take the
``SweepSpec`` as ``spec``, untyped here (``cemlab.sweeps.sweepfile.load`` imports this module).
"""

from __future__ import annotations

from cemlab.sweeps.sweepfile.schema import ScaleSpec, SweepError, Trial, lr_ratio


def family_of(trial: Trial) -> tuple:
    """A trial's tuning family: its grid coordinates but lr and seed (a cell whose rate is chosen)."""
    return tuple(sorted((k, str(v)) for k, v in trial.axes.items() if k not in ("lr", "seed")))


def grid_rates(trials: list[Trial]) -> list[float]:
    """The distinct learning rates of ``trials``, increasing."""
    return sorted({float(t.axes["lr"]) for t in trials if t.axes.get("lr") is not None})


def is_carried(trials: list[Trial]) -> bool:
    """Whether ``trials`` are a carried ladder rung's (``Trial.carried``): each family starts from its own
    rates (``family_policy``), not from one grid shared by all."""
    return any(getattr(t, "carried", None) is not None for t in trials)


def family_rates(trials: list[Trial]) -> dict[tuple, list[float]]:
    """Family -> its distinct learning rates in ``trials``, increasing."""
    own: dict[tuple, set[float]] = {}
    for t in trials:
        own.setdefault(family_of(t), set()).add(float(t.axes["lr"]))
    return {f: sorted(lrs) for f, lrs in own.items()}


def family_extra(spec, scale: str, trials: list[Trial]) -> dict[tuple, int]:
    """Family -> how many rates its tuning policy may add to it at most (``Policy.most``); {} without
    bracketing. At a scale with a confirmation stage the steps are shared by compared cells, so a
    family may get rates beyond both ends: every reachable rate it lacks (``Policy.reachable``)."""
    policies = spec.family_policies(scale, trials)
    if not policies:
        return {}
    if shared_steps(spec, scale, trials):
        return {f: sum(1 for r in policies[f].reachable() if not any(abs(r / x - 1) < 1e-6 for x in lrs))
                for f, lrs in family_rates(trials).items()}
    return {f: policies[f].most(lrs) for f, lrs in family_rates(trials).items()}


def shared_steps(spec, scale: str, trials: list[Trial]) -> bool:
    """Whether the bracketing steps at ``scale`` are shared by compared cells (a rate one adds is
    added to every cell it is compared with): at a scale with a confirmation stage."""
    return spec.confirmation_budget(scale, trials) is not None


def family_least(spec, scale: str, trials: list[Trial]) -> dict[tuple, int]:
    """Family -> how many rates its tuning policy adds to it at least, when its grid's runs finish
    (``Policy.least``; a carried family's own policy, ``family_policy``); {} without bracketing."""
    policies = spec.family_policies(scale, trials)
    return {f: policies[f].least(lrs) for f, lrs in family_rates(trials).items()} if policies else {}


def check_tuning(spec, scales: dict[str, ScaleSpec]) -> None:
    """``tuning.max_steps``: known scales; at every scale that brackets (its own steps, its ``like``
    scale's, or a ladder rung's by the ladder's rule: ``SweepSpec.entry``), an lr axis of at least 2 rates, evenly spaced on the log scale,
    inside ``tuning.bounds``."""
    tuning = spec.tuning
    if tuning is None:
        return
    for name in tuning.max_steps:
        if name not in scales:
            raise SweepError(f"{spec.source}: tuning.max_steps.{name}: unknown scale; choose one of {sorted(scales)}")
    for name, scale in scales.items():
        steps = spec.entry("tuning.max_steps", name) or 0
        if not steps:
            continue
        key = f"tuning.max_steps.{name if name in tuning.max_steps else scale.like or spec.ladder.scale}"
        own = spec.entry("scales", name) or {}
        where = f"scales.{name}.lr" if "lr" in own else "axes.lr"
        lrs = [float(x) for x in own.get("lr", spec.axes.lr or [])]
        if len(lrs) < 2:
            raise SweepError(f"{spec.source}: {key}: {steps} bracketing step(s) at {name}, but its lr axis ({where}) "
                             f"has {len(lrs)} rate(s): bracketing extends a grid of at least 2 rates at their "
                             f"spacing; give {where} 2 or more rates, e.g. [2.0e-3, 4.0e-3], or set {key}: 0")
        if lr_ratio(lrs) is None:
            raise SweepError(f"{spec.source}: {key}: {steps} bracketing step(s) at {name}, but its lr axis ({where}) "
                             f"{lrs} is not evenly spaced on the log scale, so it has no ratio to extend at; give "
                             f"rates at a constant ratio (e.g. [1.0e-3, 2.0e-3, 4.0e-3]) or set {key}: 0")
        low, high = tuning.bounds
        outside = [x for x in lrs if not low <= x <= high]
        if outside:
            raise SweepError(f"{spec.source}: {key}: the lr axis ({where}) at {name} has {outside} outside "
                             f"tuning.bounds [{low:g}, {high:g}]; widen the bounds or move the rates inside them")


def unbracketable(spec, trials: list[Trial]) -> str:
    """Why the grid ``trials`` cannot be bracketed ('' when they can): their rates are fewer than 2, not
    evenly spaced on the log scale or outside ``tuning.bounds``. Only an lr axis given on the command line
    can be (the file's own is checked when it is read, :func:`check_tuning`); such a grid brackets nothing,
    as a seed axis from the command line adds no seeds, and ``cemlab plan`` says so."""
    lrs = grid_rates(trials)
    if not trials or spec.tuning is None or is_carried(trials):   # carried: on the lattice, in the bounds
        return ""
    if lr_ratio(lrs) is None:
        return (f"the grid's rates {lrs} are fewer than 2 or not evenly spaced on the log scale (lr from the command "
                f"line?): no rate is added beyond them")
    low, high = spec.tuning.bounds
    if any(not low <= x <= high for x in lrs):
        return f"the grid's rates {lrs} are not all inside tuning.bounds [{low:g}, {high:g}]: no rate is added"
    return ""


def check_grid(spec, scale: str, trials: list[Trial]) -> float:
    """The ratio of ``trials``' rates, or ``SweepError`` when they cannot be bracketed (an lr axis
    given on the command line that :func:`check_tuning` did not see)."""
    lrs = grid_rates(trials)
    ratio = lr_ratio(lrs)
    if ratio is None:
        raise SweepError(f"{spec.source}: tuning.max_steps: {scale} brackets the learning rate, but the grid's rates "
                         f"{lrs} are fewer than 2 or not evenly spaced on the log scale; give lr=[...] at a constant "
                         f"ratio, or pass --no-bracketing")
    low, high = spec.tuning.bounds
    if any(not low <= x <= high for x in lrs):
        raise SweepError(f"{spec.source}: tuning.bounds: the grid's rates {lrs} at {scale} are not all inside "
                         f"[{low:g}, {high:g}]; give rates inside the bounds, or pass --no-bracketing")
    return ratio
