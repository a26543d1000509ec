"""A family's tuning policy: the one place that builds it (``tuning.policy`` of ``cemlab.sweeps.tuning_policy``).

A *family* is a cell with its rate and seed left out (``tuning_section.family_of``). At a scale's grid
every family starts from the grid's rates, so every family has the same policy, the grid's
(``SweepSpec.tuning_policy``). At a ladder rung that carries its rates (``ladder.carry``,
``cemlab.sweeps.stages.carrying``) each family starts from its own rates, the carried prediction and one rate
either side (its trials say so: ``Trial.carried``); its policy is then built from those rates, so that
its steps are counted from them (``steps_taken``) and reach beyond its own ends, at the ratio of the
scale's lr axis. A family the rungs below found nothing for starts from the grid, as at any scale.

Everything that judges or counts a family's tuning asks here: the sweep's bracketing steps
(``interim_look_store.sweep_bracket``), ``cemlab plan`` (``tuning_section.family_extra`` /
``family_least``, ``sweeps.plan``), and the rates the report reads (``SweepSpec.tuning_rates``).
``spec`` is the ``SweepSpec``, untyped (``cemlab.sweeps.sweepfile.load`` imports this module).
"""

from __future__ import annotations

from cemlab.sweeps.sweepfile import tuning_section
from cemlab.sweeps.sweepfile.schema import SweepError, Trial, lr_ratio


def carries(spec, scale: str) -> bool:
    """Whether ``scale`` is a rung of ``spec``'s ladder that starts its families from carried rates
    (``ladder.carry``, a rung above the first)."""
    rung = spec.rungs().get(scale)
    return spec.ladder is not None and rung is not None and spec.ladder.carries(rung)


def file_rates(spec, scale: str) -> list[float]:
    """The rates of the sweep file's own lr axis at ``scale`` (its entry under ``scales:``, a ladder
    rung's by the ladder's rule, else ``axes.lr``), increasing."""
    own = spec.entry("scales", scale) or {}
    return sorted(float(x) for x in own.get("lr", spec.axes.lr or []))


def scale_ratio(spec, scale: str) -> float:
    """The ratio of the file's own lr axis at ``scale`` (:func:`file_rates`): what a carried family steps by."""
    ratio = lr_ratio(file_rates(spec, scale))
    if ratio is None:
        raise SweepError(f"{spec.source}: the lr axis at {scale} {file_rates(spec, scale)} has no ratio (fewer than 2 "
                         f"rates, or uneven on the log scale): a carried start steps at that ratio")
    return ratio


def policy_for(spec, scale: str, trials: list[Trial], rates: list[float] | None = None):
    """The policy of ``trials`` at ``scale`` for a family that starts from ``rates`` (None: the grid's
    shared rates, the file's lr axis where ``trials`` are carried); None where nothing is bracketed
    (``SweepSpec.bracket_steps``). The one constructor: ``POLICIES[tuning.policy](rates, ratio, bounds,
    max_steps)``."""
    from cemlab.sweeps.tuning_policy import POLICIES

    steps = spec.bracket_steps(scale, trials)
    if not steps or not trials:
        return None
    carried = tuning_section.is_carried(trials)
    if rates is None:
        rates = file_rates(spec, scale) if carried else tuning_section.grid_rates(trials)
    ratio = scale_ratio(spec, scale) if carried else spec.rate_ratio(scale, trials)
    return POLICIES.get(spec.tuning.policy)(tuple(sorted(rates)), ratio, tuple(spec.tuning.bounds), steps)


def family_policies(spec, scale: str, trials: list[Trial]) -> dict[tuple, object]:
    """Family (``family_of``) -> its policy: the grid's for every family of an ordinary grid, a carried
    family's own (built from its start rates) where ``trials`` carry; {} where nothing is bracketed."""
    shared = policy_for(spec, scale, trials)
    if shared is None:
        return {}
    if not tuning_section.is_carried(trials):
        return {f: shared for f in tuning_section.family_rates(trials)}
    carried = {tuning_section.family_of(t) for t in trials if t.carried is not None}
    return {f: policy_for(spec, scale, trials, lrs) if f in carried else shared
            for f, lrs in tuning_section.family_rates(trials).items()}


def reachable(spec, scale: str, trials: list[Trial]) -> list[float]:
    """Every rate some family of ``trials`` may get at ``scale``, increasing (its start's included);
    the trials' own rates where nothing is bracketed."""
    policies = family_policies(spec, scale, trials)
    if not policies:
        return tuning_section.grid_rates(trials)
    out: set[float] = set(tuning_section.grid_rates(trials))
    for p in {id(p): p for p in policies.values()}.values():
        out.update(p.reachable())
    return sorted(out)
