"""A sweep's *ladder*: the same grid trained for several lengths, so that a verdict can be read at
each and its change with training seen (``ladder:`` in a sweep file; ``cemlab sweep NAME --ladder``).

A rung is a number of training tokens per parameter of the matched Llama baseline (as the paper
counts parameters for its Chinchilla budget, ``cemlab.train.plan``), at **one** model width: every
rung is the base scale's ``size`` with ``train.tokens`` set to ``rung x parameters`` (the rung at 20
is ``train.tokens: chinchilla`` itself), and every other setting the same, so that the rungs differ
in training length only. The learning-rate schedule is a share of each run's steps (warm-up
``train.warmup_frac`` of them, then cosine decay to the last step), so it stretches with the rung
as the paper's does with its budget.

Each rung is a scale of its own, made here from the base scale (:func:`rung_scales`), named
``<base>-tpp<rung>`` (``workstation-tpp1.25``): its trials are ordinary trials (their own config
hashes, resumable, deduplicated), its sweep has its own parent run, log folder, looks and report,
and its runs carry the tag ``cemlab.rung`` (``cemlab.tracking.schema.RUNG``). What a rung takes from
the base scale's entries in the sweep file (the axis values and the bracketing steps; never the
seed budget, the alpha split or the confirmation budget) is one rule, :func:`rung_entries`. ::

    ladder:
      scale: workstation          # the scale every rung starts from (models, data, batch)
      size: 86m                   # the one width of every rung (a size of that scale)
      rungs: [0.3125, 1.25, 5, 20]   # tokens per parameter, increasing
      axes: {precond: [dplr]}     # axis values at every rung (optional; else the base scale's)
      set: {train.batch_size: 16}    # config keys set at every rung (optional)
      resources: {cpus_per_worker: 1}  # a trial's resources at every rung (optional)
      max_seeds: {0.3125: 8, 1.25: 8}  # the seed budget of a rung (needs the file's seeding:)
      exclude: {20: [{T: 2, eta: 0.5}]}  # cells a rung leaves out: every cell matching all the pairs
      carry: false                # true: a rung above the first starts each family from its carried rates

With ``carry: true`` every rung above the first starts each *family* (a cell, all but its rate and
seed) from the rates around the optimum the rungs below found for it (``cemlab.sweeps.carry``: the
carried prediction; ``Policy.start``: it and one rate either side) instead of the scale's lr axis,
and its bracketing steps go on from those rates (``cemlab.sweeps.sweepfile.family_policy``). The
first rung, and a family the rungs below found nothing for, start from the lr axis. The rungs below
are read from the store (their scales' runs), else from a committed report folder given as
``cemlab sweep ... --carry-from DIR``; a rung whose rung below is in neither is refused before any
trial. Default false: every rung starts from the lr axis.

Refused before any trial, naming the key: rungs not increasing, a rung of 0 or below, a size the
base scale lacks, an ``exclude`` or ``max_seeds`` naming a rung the ladder lacks or an axis value
the grid does not have, ``train.tokens`` or the size set by ``set`` (they are what the rungs vary
and fix). Whether a rung is long enough for its warm-up and short enough for its corpus is checked
where the data is known (``cemlab.sweeps.ladder_plan``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from cemlab.sweeps.sweepfile.errors import format_validation_error
from cemlab.sweeps.sweepfile.layers import merge_dicts, nest
from cemlab.sweeps.sweepfile.schema import Resources, Scalar, ScaleSpec, SizeSpec, StrictSpec, SweepError, counts


#: ``ladder.max_seeds``, ``max_steps``, ``budget``, ``fresh`` and ``primary_seeds``: counts by rung (``schema.counts``).
RungSeedBudgets = counts(2, "max_seeds", "{1.25: 8}", keys=float, per="rung")
RungSteps = counts(0, "max_steps", "{20: 3}", keys=float, per="rung")
RungTrialBudgets = counts(1, "budget", "{20: 77}", keys=float, per="rung", unit=" of trials")
RungFresh = counts(1, "fresh", "{20: 22}", keys=float, per="rung", unit=" of trials")
RungPrimarySeeds = counts(2, "primary_seeds", "{20: 2}", keys=float, per="rung",
                          why=" (a paired t-test needs two seeds)")


class Ladder(StrictSpec):
    """``ladder:`` of a sweep file (see the module docstring)."""

    scale: str = Field(min_length=1, description="The scale every rung starts from, e.g. workstation.")
    size: str = Field(min_length=1, description="The one model width of every rung: a size of that scale.")
    rungs: list[float] = Field(description="Tokens per parameter of the matched Llama, increasing (at least 2).")
    axes: dict[str, list[Scalar]] = Field(default_factory=dict,
                                          description="Axis values at every rung (as a scale's entry under scales:).")
    set: dict[str, Any] = Field(default_factory=dict, description="Config keys (dotted) set at every rung.")
    resources: Resources | None = Field(default=None, description="A trial's resources at every rung.")
    max_seeds: RungSeedBudgets = Field(default_factory=dict, description="Seed budget per rung (seeding: looks).")
    max_steps: RungSteps = Field(default_factory=dict, description="Bracketing steps per rung (tuning.max_steps "
                                 "there); a rung not named: the base scale's.")
    budget: RungTrialBudgets = Field(default_factory=dict, description="Per rung, the trials of its whole job at "
                                     "most (confirmation.budget there: a selection stage, then fresh seeds at the "
                                     "chosen rates); needs the file's confirmation: section.")
    fresh: RungFresh = Field(default_factory=dict, description="Per rung, the fewest trials its confirmation "
                             "stage gets (confirmation.fresh there): the budget is raised to the selection's "
                             "trials + fresh where the bracketing steps spent more.")
    primary_seeds: RungPrimarySeeds = Field(default_factory=dict, description="Per rung, the fresh seeds the "
                                            "confirmation's primary condition gets first (confirmation.primary_seeds "
                                            "there).")
    exclude: dict[float, list[dict[str, Scalar]]] = Field(
        default_factory=dict, description="Per rung, cells left out: each entry's axis values all match.")
    carry: bool = Field(default=False, description="A rung above the first starts each family from the rates "
                                                    "around the optimum the rungs below found (cemlab.sweeps.carry).")
    carry_rule: dict[float, Literal["nearest", "trend"]] = Field(
        default_factory=dict, description="Per rung, how the rungs below predict its rate: nearest (the nearest "
                                          "rung's optimum; a rung not named) or trend (a power law in tokens "
                                          "through their optima), e.g. {5: trend}.")

    def rule_at(self, rung: float) -> str:
        """How the rungs below ``rung`` predict its rate (``carry_rule``; default ``nearest``, the first of
        ``cemlab.sweeps.carry.RULES``)."""
        return self.carry_rule.get(rung, "nearest")

    @field_validator("rungs")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if len(v) < 2:
            raise ValueError(f"a ladder needs at least 2 rungs to compare, got {v}; e.g. rungs: [0.3125, 1.25, 5, 20]")
        bad = [x for x in v if not x > 0]
        if bad:
            raise ValueError(f"a rung is tokens per parameter and must be above 0, got {bad[0]:g}; "
                             f"e.g. rungs: [0.3125, 1.25, 5, 20]")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"rungs must increase (cheapest first), got {v}; sort them and list each once")
        return v

    @field_validator("set")
    @classmethod
    def _not_varied(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if key in ("train.tokens", "model.name") or key.startswith("tracking."):
                raise ValueError(f"set.{key}: the ladder sets this itself (the rung's tokens, the ladder's size, "
                                 f"the trial's names); remove it")
        return v

    def below(self, rung: float) -> float | None:
        """The rung below ``rung`` (None for the first)."""
        lower = [r for r in self.rungs if r < rung * (1 - 1e-9)]
        return lower[-1] if lower else None

    def carries(self, rung: float) -> bool:
        """Whether ``rung`` starts its families from carried rates: ``carry`` and a rung above the first."""
        return self.carry and self.below(rung) is not None

    def rung_name(self, rung: float) -> str:
        """The scale name of ``rung``: ``<base>-tpp<rung>``."""
        return f"{self.scale}-tpp{rung:g}"

    def names(self) -> dict[str, float]:
        """Scale name -> rung, cheapest first."""
        return {self.rung_name(r): r for r in self.rungs}

    def find(self, text: str, source: str) -> float:
        """The rung that ``text`` names (its tokens per parameter, or its scale name); else a
        ``SweepError`` naming the rungs there are."""
        names = self.names()
        if text in names:
            return names[text]
        try:
            x = float(text)
        except ValueError:
            x = None
        for r in self.rungs:
            if x is not None and abs(r - x) <= 1e-9 * max(1.0, abs(r)):
                return r
        raise SweepError(f"{source}: --rung {text!r}: the ladder has no such rung; choose one of "
                         f"{', '.join(f'{r:g}' for r in self.rungs)} (tokens per parameter, ladder.rungs)")


def check_ladder(ladder: Ladder, source: str, scales: dict[str, ScaleSpec], axes: dict[str, list]) -> None:
    """What the schema cannot see: the base scale and size exist, the rungs named by ``max_seeds``
    and ``exclude`` are rungs, and an exclusion names axes and values of the grid (``axes``: axis
    name -> every value it takes in the file)."""
    where = f"{source}: ladder"
    if ladder.scale not in scales:
        raise SweepError(f"{where}.scale: unknown scale {ladder.scale!r}; choose one of {sorted(scales)}")
    if scales[ladder.scale].like:
        raise SweepError(f"{where}.scale: {ladder.scale!r} is a variant of {scales[ladder.scale].like!r}; name a scale "
                         f"that is not a variant (the rungs are variants of it)")
    if ladder.size not in scales[ladder.scale].sizes:
        raise SweepError(f"{where}.size: {ladder.size!r} is not a size of scale {ladder.scale!r}; choose one of "
                         f"{sorted(scales[ladder.scale].sizes)}")
    for axis, vals in ladder.axes.items():
        if axis == "size" or axis not in axes:
            raise SweepError(f"{where}.axes.{axis}: " + ("the ladder's one size is ladder.size" if axis == "size" else
                             f"not an axis of this sweep; axes: {sorted(a for a in axes if a != 'group')}"))
        if not vals:
            raise SweepError(f"{where}.axes.{axis} is empty; list at least one value or remove it")
    for key in ("max_seeds", "max_steps", "budget", "fresh", "primary_seeds", "exclude", "carry_rule"):
        for r in getattr(ladder, key):
            if r not in ladder.rungs:
                raise SweepError(f"{where}.{key}.{r:g}: not a rung of this ladder; use one of "
                                 f"{', '.join(f'{x:g}' for x in ladder.rungs)}")
    for r in ladder.budget:
        if r in ladder.max_seeds:
            raise SweepError(f"{where}.budget.{r:g} and {where}.max_seeds.{r:g}: a rung adds seeds either by looks "
                             f"(seeding) or by the confirmation stage, not both; remove one")
    for key, what in (("primary_seeds", "primary seeds"), ("fresh", "fresh trials")):
        for r in getattr(ladder, key):
            if r not in ladder.budget:
                raise SweepError(f"{where}.{key}.{r:g}: rung {r:g} has no confirmation stage (ladder.budget); "
                                 f"give it a budget or remove its {what}")
    for r, entries in ladder.exclude.items():
        for i, entry in enumerate(entries):
            for axis, value in entry.items():
                if axis not in axes:
                    raise SweepError(f"{where}.exclude.{r:g}[{i}].{axis}: not an axis of this sweep; axes: "
                                     f"{sorted(axes)}")
                if not any(_same(value, v) for v in axes[axis]):
                    raise SweepError(f"{where}.exclude.{r:g}[{i}].{axis}: {value!r} is not a value of that axis "
                                     f"({axes[axis]}); the exclusion would leave nothing out")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    return str(a) == str(b)


def excluded(values: dict[str, Any], entries: list[dict[str, Any]]) -> bool:
    """Whether a cell with axis ``values`` matches one of the exclusion ``entries`` (all its pairs)."""
    return any(all(k in values and _same(values[k], v) for k, v in e.items()) for e in entries)


def rung_tokens(rung: float, params: int) -> int | str:
    """``train.tokens`` of a rung for a matched Llama of ``params`` parameters: ``chinchilla`` at 20
    tokens per parameter (so that the top rung's trials are the base scale's own Chinchilla trials
    when nothing else differs), else ``round(rung x params)``."""
    from cemlab.train.plan import CHINCHILLA_TOKENS_PER_PARAM

    if rung == CHINCHILLA_TOKENS_PER_PARAM:
        return "chinchilla"
    return max(1, int(round(rung * params)))


def rung_entries(ladder: Ladder, setting: str, table: dict[str, Any]) -> dict[str, Any]:
    """What a ladder rung takes from its base scale (``ladder.scale``) in the sweep file: the one rule.

    ``table`` is one per-scale setting of the sweep file (scale name -> entry) and ``setting`` its
    key; the result is the rungs' entries of it (rung scale name -> entry; a rung without one is left
    out). Setting by setting:

    * ``scales`` (the per-scale axis values): the base scale's, under ``ladder.axes``, with the one
      size ``ladder.size``;
    * ``tuning.max_steps``: the rung's own, ``ladder.max_steps``, else the base scale's: a rung
      brackets as its base scale does unless the ladder says otherwise (``tuning.bounds`` and
      ``tuning.policy`` hold at every scale);
    * ``seeding.max_seeds``: the rung's own budget, ``ladder.max_seeds``, never the base scale's: a
      rung it does not name runs its seed axis once (``seeding.batch`` holds at every scale);
    * ``seeding.alpha_split``: none: a rung's looks judge at the even split, alpha / K;
    * ``confirmation.budget``, ``confirmation.fresh`` and ``confirmation.primary_seeds``: the rung's
      own, ``ladder.budget``, ``ladder.fresh`` and ``ladder.primary_seeds``, never the base scale's
      (its budget is for its own trials): a rung they do not name has no confirmation stage
      (``confirmation.alpha`` and ``primary`` hold at every scale);
    * any other (``optuna.samples``: a ladder sweep is a grid): none.

    A rung's scale settings (models, the task's section, resources) are the base scale's as
    :func:`rung_scales` makes them. A rung scale has no ``like``, so this rule is all it takes from
    the base scale's entries; ``SweepSpec.per_scale`` adds its result to the file's tables (an entry
    the file gives a rung itself wins), and every reader of a per-scale setting goes through that.
    """
    base = table.get(ladder.scale)
    if setting == "scales":
        return {ladder.rung_name(r): {**(base or {}), **ladder.axes, "size": [ladder.size]} for r in ladder.rungs}
    own = {"seeding.max_seeds": ladder.max_seeds, "tuning.max_steps": ladder.max_steps,
           "confirmation.budget": ladder.budget, "confirmation.fresh": ladder.fresh,
           "confirmation.primary_seeds": ladder.primary_seeds}.get(setting, {})
    out = {ladder.rung_name(r): base for r in ladder.rungs} if setting == "tuning.max_steps" and base is not None else {}
    return {**out, **{ladder.rung_name(r): n for r, n in own.items()}}


def rung_scales(ladder: Ladder, scales: dict[str, ScaleSpec], task: str, params: int) -> dict[str, ScaleSpec]:
    """One scale per rung (name -> scale), made from the base scale: only the ladder's size, its
    ``train.tokens`` the rung's (``params``: the matched Llama's parameters at that size), the
    ladder's ``set`` and ``resources`` over the task's section. Each carries its rung and exclusions
    (``ScaleSpec.rung``, ``ScaleSpec.exclude``). No ``like``: what a rung takes from its base
    scale's entries in the sweep file is :func:`rung_entries`'s rule."""
    base = scales[ladder.scale]
    size = base.sizes[ladder.size]
    section = base.section(task)
    merged_base = merge_dicts(nest(section.base, "ladder"), nest(ladder.set, "ladder.set"))
    new_section = section.model_copy(update={
        "base": merged_base, **({"resources": ladder.resources} if ladder.resources is not None else {})})
    out = {}
    for r in ladder.rungs:
        sizes = {ladder.size: SizeSpec(model=dict(size.model), train={**size.train, "tokens": rung_tokens(r, params)})}
        scale = base.model_copy(update={
            "like": None, "sizes": sizes, "tasks": {**base.tasks, task: new_section},
            "description": f"ladder rung: {r:g} tokens per parameter of the matched Llama at {ladder.scale} "
                           f"size {ladder.size}"})
        scale.rung = r
        scale.exclude = list(ladder.exclude.get(r, []))
        out[ladder.rung_name(r)] = scale
    return out


def ladder_params(spec, scales: dict[str, ScaleSpec]) -> int:
    """Parameters of the matched Llama baseline at the ladder's size (what a rung's tokens per
    parameter multiply; ``cemlab.train.plan``, as the Chinchilla budget counts them). ``spec``: the
    ``SweepSpec`` (untyped: ``cemlab.sweeps.sweepfile.load`` imports this module)."""
    from cemlab.config import RunConfig
    from cemlab.train.plan import make_plan

    ladder = spec.ladder
    scale = scales[ladder.scale]
    size = scale.sizes[ladder.size]
    src = f"{spec.source}: ladder"
    data = merge_dicts(nest(scale.section(spec.task).base, src), {"model": {**size.model, "name": ladder.size},
                                                                   "train": dict(size.train)})
    data = merge_dicts(data, nest({**ladder.set, "train.tokens": "chinchilla", "task": spec.task}, src))
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        raise SweepError(format_validation_error(e, f"{src}.set", model=RunConfig)) from None
    return make_plan(cfg).budget_params
