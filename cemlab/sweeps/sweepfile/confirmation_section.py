"""The ``confirmation:`` section of a sweep file: each cell's learning rate chosen on the grid's own
seeds, then fresh seeds at the chosen rates, with the seed count set by a trial budget.

At a scale the section names, the grid's seed axis is the *selection* stage: the grid and its
bracketing steps (``tuning:``; at such a scale a rate a cell adds is added to every cell it is
compared with, so that compared cells share their rates) run on those seeds only. Each cell's
chosen rate is then its lowest median validation metric over them (a divergence last). The
*confirmation* stage (``cemlab.sweeps.stages.confirmation``) runs each cell at its own chosen rate
and at the chosen rate of every cell it is compared with, on fresh seeds: ``n = floor((budget -
trials run so far) / C)`` of them, ``C`` the distinct (cell, rate) pairs needed; what the budget has
left buys whole extra seeds for the cells of the ``primary`` claim's primary condition, at the
union of their pair's chosen rates. With ``fresh`` the stage gets at least that many trials whatever
the selection spent: where its bracketing steps spent more than ``budget - fresh``, the budget is
raised to the trials so far plus ``fresh`` (the plan's ``budget`` then holds when the steps cost what
was expected, and the confirmation is never starved by them). With ``primary_seeds`` the primary condition's pairs get that many
fresh seeds first, whatever the selection chose, and the other pairs share the rest (at most as
many each): its verdict then never has fewer seeds because a variant diverged. The rule reads which rates were chosen and how many trials ran,
never a verdict. The report judges each tuned comparison on the fresh seeds by the union rule at
``alpha`` (``cemlab.report.stats.confirmation``). The design and its measured error rates and power:
``docs/verdicts.md`` and ``docs/tuned-design-study.md``.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from cemlab.sweeps.sweepfile.schema import ALPHA, ScaleSpec, StrictSpec, SweepError, counts


#: ``confirmation.budget`` and ``confirmation.primary_seeds``: counts by scale (``schema.counts``).
TrialBudgets = counts(1, "budget", "{tiny: 165}", block="confirmation", unit=" of trials")
FreshTrials = counts(1, "fresh", "{tiny: 36}", unit=" of trials")
PrimarySeeds = counts(2, "primary_seeds", "{tiny: 8}", why=" (a paired t-test needs two seeds)")


class Confirmation(StrictSpec):
    """``confirmation:``: a selection stage on the grid's seeds, then fresh seeds at the chosen rates."""

    budget: TrialBudgets = Field(description="Per scale name, the trials of the whole job at most (selection "
                                             "and confirmation), e.g. {tiny: 165}.")
    fresh: FreshTrials = Field(default_factory=dict, description="Per scale name, the fewest trials the "
                               "confirmation stage gets, e.g. {tiny: 36}: where the selection stage spent more than "
                               "budget - fresh, the budget is raised to its trials + fresh. A scale not named: the "
                               "budget alone.")
    alpha: float = Field(default=0.045, description="The two-sided level of each tuned comparison's decision (each "
                                                    f"one-sided test at alpha / 2), at most the sweep's {ALPHA:g}.")
    primary: str | None = Field(default=None, description="The claim whose primary condition's cells get the seeds "
                                                          "the budget has left, e.g. t2-beats-t1.")
    primary_seeds: PrimarySeeds = Field(default_factory=dict, description="Per scale name, the fresh seeds the "
                                        "primary condition's cells get first, whatever the selection chose, e.g. "
                                        "{tiny: 8}; the other cells then share what the budget has left, at most as "
                                        "many. A scale not named: the primary condition gets what is left over.")

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float) -> float:
        if not 0 < v <= ALPHA:
            raise ValueError(f"alpha: {v} must lie in (0, {ALPHA:g}] (two-sided; each one-sided test at alpha / 2), "
                             f"e.g. alpha: 0.045")
        return v

    def budget_at(self, scale: str, like: str | None = None) -> int | None:
        """The trial budget at ``scale`` (or at the scale it is ``like``); None where neither is named."""
        return self.budget.get(scale, self.budget.get(like) if like else None)


def check_confirmation(spec, scales: dict[str, ScaleSpec]) -> None:
    """``confirmation``: known scales, no scale that also adds seeds by looks (``seeding.max_seeds``),
    a ``primary`` among the file's claims, and claims to judge. ``spec``: the ``SweepSpec`` (untyped:
    ``cemlab.sweeps.sweepfile.load`` imports this module)."""
    conf = spec.confirmation
    if conf is None:
        return
    src = spec.source
    if spec.search == "optuna":
        raise SweepError(f"{src}: confirmation: chooses each cell's rate from a grid; a search: optuna sweep samples "
                         f"its learning rate instead: remove confirmation (or use search: grid)")
    if not spec.claims:
        raise SweepError(f"{src}: confirmation: spends fresh seeds on the cells the file's claims compare, and it "
                         f"lists no claims: list them (claims: [...]) or remove confirmation")
    if conf.primary_seeds and conf.primary is None:
        raise SweepError(f"{src}: confirmation.primary_seeds: gives seeds to the primary condition of "
                         f"confirmation.primary, which is not set: name the claim (primary: ...) or remove primary_seeds")
    for key in ("primary_seeds", "fresh"):
        for name in getattr(conf, key):
            if name not in scales:
                raise SweepError(f"{src}: confirmation.{key}.{name}: unknown scale; choose one of {sorted(scales)}")
    for name in conf.fresh:
        if conf.budget_at(name, scales[name].like) is None:
            raise SweepError(f"{src}: confirmation.fresh.{name}: scale {name!r} has no confirmation stage "
                             f"(confirmation.budget); give it a budget or remove its fresh trials")
    if conf.primary is not None and conf.primary not in spec.claims:
        raise SweepError(f"{src}: confirmation.primary: {conf.primary!r} is not among the file's claims "
                         f"{spec.claims}; name one of them or leave primary out")
    for name in conf.budget:
        if name not in scales:
            raise SweepError(f"{src}: confirmation.budget.{name}: unknown scale; choose one of {sorted(scales)}")
        if spec.seeding is not None and name in spec.seeding.max_seeds:
            raise SweepError(f"{src}: confirmation.budget.{name} and seeding.max_seeds.{name}: a scale adds seeds "
                             f"either by looks (seeding) or by the confirmation stage, not both; remove one")


def raised_budget(budget: int, fresh: int | None, spent: int) -> int:
    """A confirmation's trial budget once its selection stage ran ``spent`` trials: ``budget``, raised
    to ``spent + fresh`` where the selection spent past ``budget - fresh`` (``confirmation.fresh``,
    its fewest trials; None: no floor). The sweep (``SweepSpec.confirmation_budget``) and its
    plan (``cemlab.sweeps.plan.Plan.confirmation_trials``) both count by it."""
    return budget if fresh is None else max(budget, spent + fresh)
