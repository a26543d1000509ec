"""The parts of a sweep file and of the scales file (pydantic models; every mapping forbids unknown
keys), and the :class:`Trial` a sweep expands into. The sweep file itself is
``cemlab.sweeps.sweepfile.load.SweepSpec``, whose docstring shows the whole schema.

Optuna is imported inside :func:`make_sampler`, so ``cemlab --help`` and ``cemlab plan``, which
import this module, do not load it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PrivateAttr, SerializeAsAny, field_validator, model_validator

from cemlab.config import MAX_LR, RunConfig
from cemlab.tasks import TASKS
from cemlab.tasks.scale import Resources, StrictSpec, TaskScale  # noqa: F401  (a trial's resources; a task's scale section)
from cemlab.sweeps.tuning_policy import POLICIES, round_lr

#: Scale used when none is given (``make sweep`` / ``cemlab sweep`` / ``cemlab plan``).
DEFAULT_SCALE = "tiny"
#: Axes every sweep may have at the top level and the config field each one sets.
TOP_AXES = ("size", "lr", "seed")
AXIS_TARGETS = {"lr": ("train", "lr"), "seed": ("train", "seed")}

Scalar = bool | int | float | str
SearchKind = Literal["grid", "optuna"]


class SweepError(ValueError):
    """A sweep file or the scales file is invalid; the message names the file, the key and the fix."""


class SizeSpec(StrictSpec):
    """What a size name (``86m`` ...) means at one scale: model fields (or ``{preset: 86m}``) and
    optional per-size training settings (typically ``tokens``)."""

    model: dict[str, Any] = Field(description="ModelConfig fields, or {preset: <name>} plus overrides.")
    train: dict[str, Any] = Field(default_factory=dict, description="TrainConfig fields for this size.")


class ScaleSpec(StrictSpec):
    """One scale: the concrete meaning of the size names, and per-task settings and resources.

    ``like: <scale>`` makes a variant of another scale (e.g. the same models on another corpus): it
    starts from that scale's settings, merged key by key under its own, and takes the sweep files'
    per-scale axis values of that scale unless a sweep file names this one.

    Every other key of a scale is a task's section, named by the task (``lm:``, ``gp:``, or a
    plugin's task) and checked by the model that task names (``Task.scale_model``); they are kept
    in ``tasks`` by task name, and :meth:`section` gives a task's (its defaults where the scale has
    none)."""

    like: str | None = Field(default=None, description="A scale this one is a variant of (one level).")
    description: str = ""
    sizes: dict[str, SizeSpec] = Field(default_factory=dict)
    tasks: dict[str, SerializeAsAny[TaskScale]] = Field(default_factory=dict,
                                                        description="The tasks' sections, by task name.")
    #: A ladder rung's tokens per parameter, and the cells it leaves out (``cemlab.sweeps.sweepfile.ladder_section``;
    #: None and [] for the scales of scales.yaml, where they cannot be set).
    _rung: float | None = PrivateAttr(default=None)
    _exclude: list = PrivateAttr(default_factory=list)

    @property
    def rung(self) -> float | None:
        return self._rung

    @rung.setter
    def rung(self, value: float | None) -> None:
        self._rung = value

    @property
    def exclude(self) -> list:
        return self._exclude

    @exclude.setter
    def exclude(self, value: list) -> None:
        self._exclude = list(value)

    @model_validator(mode="before")
    @classmethod
    def _task_sections(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "tasks" in data:
            return data
        own = {k: v for k, v in data.items() if k in cls.model_fields}
        sections = {k: v for k, v in data.items() if k not in cls.model_fields}
        unknown = [k for k in sections if k not in TASKS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is neither a scale setting ({', '.join(n for n in cls.model_fields if n != 'tasks')}) "
                             f"nor a task; a task's section is named by the task: {', '.join(TASKS.names())}")
        return {**own, "tasks": {name: TASKS.get(name).scale_model.model_validate(raw if raw is not None else {})
                                 for name, raw in sections.items()}}

    def section(self, task: str) -> TaskScale:
        """The scale's settings of ``task`` (the task's defaults where the scale has no section for it)."""
        return self.tasks.get(task) or TASKS.get(task).scale_model()


class Axes(StrictSpec):
    """Top-level grid axes. ``size`` is required for language-model sweeps."""

    size: list[str] | None = Field(default=None, min_length=1, description="Size names (see scales.yaml).")
    lr: list[float] | None = Field(default=None, min_length=1, description="Peak learning rates (train.lr).")
    seed: list[int] = Field(default_factory=lambda: [0], min_length=1, description="Seeds (train.seed).")

    @field_validator("size", "lr", "seed")
    @classmethod
    def _unique(cls, v: list | None) -> list | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"values repeat in {v}; list each value once")
        return v

    @field_validator("lr")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(not 0 < x <= MAX_LR for x in v):
            raise ValueError(f"learning rates must be > 0 and at most {MAX_LR:g} (train.lr's limit), got {v}; "
                             f"give peak AdamW rates such as 2.0e-3")
        return v


class Variant(StrictSpec):
    """A family of grid cells: ``set`` applied to the base config, multiplied by its own ``axes``."""

    group: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Variant family, e.g. cem-attn.")
    label: str = Field(min_length=1, description="Legend label; may use {axis} templates.")
    set: dict[str, Any] = Field(default_factory=dict, description="Dotted RunConfig paths -> values or templates.")
    axes: dict[str, list[Scalar]] = Field(default_factory=dict, description="This variant's own axes.")

    @field_validator("axes")
    @classmethod
    def _axes_ok(cls, v: dict[str, list]) -> dict[str, list]:
        for name, values in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"axis name {name!r} must be an identifier (letters, digits, _)")
            if name in TOP_AXES or name in ("group", "variant"):
                raise ValueError(f"axis {name!r} is reserved (a top-level axis); rename this variant axis")
            if not values:
                raise ValueError(f"axis {name!r} is empty; list at least one value or remove it")
            if len({repr(x) for x in values}) != len(values):
                raise ValueError(f"axis {name!r} repeats a value in {values}; list each value once")
        return v


def counts(least: int, key: str, example: str, keys: type = str, **words: str) -> Any:
    """The type of a table of counts by scale (``seeding.max_seeds``, ``tuning.max_steps``,
    ``confirmation.budget`` ...) or by rung (``keys=float``: ``ladder.max_seeds``), checked by
    :func:`whole_numbers` (``words``: its ``block``, ``unit``, ``per`` and ``why``)."""
    return Annotated[dict[keys, int], AfterValidator(partial(whole_numbers, least=least, key=key, example=example,
                                                             **words))]


def whole_numbers(v: dict, least: int, key: str, example: str, block: str | None = None, unit: str = "",
                  per: str = "scale", why: str = "") -> dict:
    """A table of counts by scale or by rung (:func:`counts`): each a whole number of at least ``least``,
    and with ``block`` (the section's name) at least one entry; else a ``ValueError`` naming ``key``
    and giving ``example`` (``{tiny: 1}``): the one check of every such table."""
    if block is not None and not v:
        raise ValueError(f"name at least one scale, e.g. {key}: {example}, or remove the {block} block")
    bad = {k: n for k, n in v.items() if isinstance(n, bool) or not isinstance(n, int) or n < least}
    if bad:
        raise ValueError(f"{key} must be whole numbers{unit} >= {least} per {per}{why}, got {bad}; e.g. {key}: {example}")
    return v


def lr_range(v: tuple[float, float], field: str, example: str) -> tuple[float, float]:
    """A learning-rate range ``[low, high]`` with 0 < low < high <= ``MAX_LR`` (train.lr's limit), or a
    ``ValueError`` naming ``field`` and giving ``example``: the one check of an lr search's range and of
    the tuning bounds."""
    if not 0 < v[0] < v[1] <= MAX_LR:
        raise ValueError(f"{field} must be [low, high] with 0 < low < high <= {MAX_LR:g} (train.lr's limit), "
                         f"got {list(v)}; e.g. {example}")
    return v


class LrSearch(StrictSpec):
    """``search: optuna``: Optuna samples each grid cell's learning rate log-uniformly in ``lr``
    (``samples`` trials per cell), and Tune's ASHA scheduler stops the worse trials early, comparing
    ``metric`` at every validation."""

    lr: tuple[float, float] = Field(description="Log-uniform range [low, high] of train.lr.")
    samples: int | dict[str, int] = Field(description="Trials per grid cell: a number, or one per scale name.")
    metric: str = Field(default="val/loss", min_length=1, description="Metric reported at each validation.")
    mode: Literal["min", "max"] = Field(default="min", description="Whether lower or higher metric is better.")
    grace_period: int = Field(default=1, ge=1, description="Validations before ASHA may stop a trial.")
    reduction_factor: float = Field(default=2, gt=1, description="ASHA keeps ~1/reduction_factor per rung.")
    seed: int = Field(default=0, description="Seed of Optuna's sampler.")
    sampler: Literal["gp", "tpe", "random"] = Field(
        default="gp", description="Optuna sampler: 'gp' (Gaussian process, suits 8-12 samples of one parameter), "
        "'tpe' or 'random'.")
    startup_trials: int | None = Field(
        default=None, ge=1, description="Samples drawn at random (the first is the range's centre) before the "
        "sampler's model guides the rest; None: a quarter of the samples, at least 2.")

    @field_validator("lr")
    @classmethod
    def _range(cls, v: tuple[float, float]) -> tuple[float, float]:
        return lr_range(v, "lr", "[5.0e-4, 8.0e-3]")

    @field_validator("samples")
    @classmethod
    def _samples(cls, v: int | dict[str, int]) -> int | dict[str, int]:
        counts = v.values() if isinstance(v, dict) else [v]
        if not counts or any(n < 1 for n in counts):
            raise ValueError(f"samples must be >= 1 (per scale), got {v}")
        return v

    def center(self) -> float:
        """The geometric centre of the range, to 3 significant digits: the first point tried."""
        return round_lr(math.sqrt(self.lr[0] * self.lr[1]))

    def samples_at(self, scale: str, like: str | None = None) -> int | None:
        """Samples per cell at ``scale`` (or at the scale it is ``like``, when it names none)."""
        if not isinstance(self.samples, dict):
            return self.samples
        return self.samples.get(scale, self.samples.get(like) if like else None)

    def startup(self, samples: int) -> int:
        """Random samples before the model-guided ones, for a cell of ``samples``: fewer than the
        budget, so the sampler's model chooses most of them (Optuna's default, 10, would leave a
        search of 8 samples random)."""
        return self.startup_trials if self.startup_trials is not None else max(2, samples // 4)

    def make_sampler(self, samples: int, seed: int):
        """The Optuna sampler of a cell (imports Optuna)."""
        import optuna

        startup = self.startup(samples)
        if self.sampler == "gp":
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
        if self.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
        return optuna.samplers.RandomSampler(seed=seed)


#: The error rate of one claim's decision (two-sided): the one definition, which the report (``cemlab.report.stats.decision``)
#: and the looks (``cemlab.sweeps.look_levels``) import.
ALPHA = 0.05


def look_alpha(looks: int, alpha: float = ALPHA) -> float:
    """The level each of ``looks`` planned looks of a ``seeding`` sweep without an ``alpha_split``
    (and its report) judges at: ``alpha / looks``, Bonferroni over the looks
    (``cemlab.report.stats.sequential``)."""
    if looks < 1:
        raise ValueError(f"looks={looks}: a sweep has at least one look (its own seeds)")
    return alpha / looks


#: ``seeding.max_seeds`` and ``tuning.max_steps``: counts by scale (:func:`counts`).
SeedBudgets = counts(2, "max_seeds", "{tiny: 6}", block="seeding")
StepBudgets = counts(0, "max_steps", "{tiny: 1}", block="tuning", why=" (bracketing steps per end)")


class Seeding(StrictSpec):
    """``seeding:``: seeds added where a claim's verdict is still open. The sweep first runs the
    seeds of its ``seed`` axis; at each planned *look* the report's own verdicts are computed from
    the store on the seeds run so far, and the cells of the comparisons still inconclusive get the
    next ``batch`` seeds, until nothing is open or ``max_seeds`` is reached. Look ``j`` (0, 1, ...)
    reads the first ``initial + j * batch`` seeds (the last look at most ``max_seeds``), fixed in
    advance. Look ``j``, and the report of a comparison it decided, judges at ``alpha_j``: the
    scale's ``alpha_split`` (one two-sided level per look, summing to the sweep's alpha, fixed in
    the file before any run), else ``alpha / K`` over the ``K`` planned looks; Bonferroni over the
    looks either way (``cemlab.report.stats.sequential``). A scale not named runs its seeds once, without
    looks."""

    max_seeds: SeedBudgets = Field(description="Seeds per cell at most, per scale name, e.g. {tiny: 6}.")
    batch: int = Field(default=3, ge=1, description="Seeds added to each open cell at a look.")
    alpha_split: dict[str, list[float]] = Field(
        default_factory=dict, description="Per scale name, the two-sided level each planned look judges at, one per "
        f"look, summing to the sweep's alpha {ALPHA:g}, e.g. {{tiny: [0.005, 0.045]}}; a scale not named: alpha / K.")

    @field_validator("alpha_split")
    @classmethod
    def _alpha_split(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        for scale, levels in v.items():
            key = f"seeding.alpha_split.{scale}"
            if not levels or any(not (isinstance(a, (int, float)) and 0 < a < ALPHA) for a in levels):
                raise ValueError(f"{key}: {levels} must list one level per planned look, each above 0 and below the "
                                 f"sweep's alpha {ALPHA:g}; e.g. {key}: [0.005, 0.045] for two looks")
            if not math.isclose(sum(levels), ALPHA, rel_tol=1e-9, abs_tol=1e-12):
                even = ", ".join(f"{ALPHA / len(levels):.6g}" for _ in levels)
                raise ValueError(f"{key}: {levels} sums to {sum(levels):.6g}, but the looks share the sweep's alpha "
                                 f"{ALPHA:g} (Bonferroni over the looks): give levels that sum to {ALPHA:g}, e.g. "
                                 f"[{even}] (the even split) or leave {scale} out")
        return v

    def _at(self, table: dict, scale: str, like: str | None):
        return table.get(scale, table.get(like) if like else None)

    def looks(self, scale: str, seeds: list[int], like: str | None = None) -> list[list[int]]:
        """The seeds of every planned look at ``scale`` for a grid whose seed axis is ``seeds``:
        look 0 the axis's own seeds, each later one ``batch`` more (counting up from the largest),
        the last capped at ``max_seeds``. One look (no seeds added) where the scale has no budget."""
        top = self._at(self.max_seeds, scale, like)
        if top is None or top <= len(seeds):
            return [list(seeds)]
        extra = list(range(max(seeds) + 1, max(seeds) + 1 + top - len(seeds)))
        k = 1 + math.ceil(len(extra) / self.batch)
        return [list(seeds) + extra[:j * self.batch] for j in range(k)]

    def alphas(self, scale: str, seeds: list[int], like: str | None = None, alpha: float = ALPHA,
               strict: bool = False) -> list[float]:
        """The two-sided level of every planned look at ``scale`` (``looks``): the scale's
        ``alpha_split`` where it names one with a level per planned look, else ``alpha / K``;
        ``alpha`` alone for one look. A split that lists another number of looks than the plan has
        (a seed axis overridden on the command line can change it) gives way to the even split, a
        rule fixed as firmly before any run (``split_note`` says so); ``strict``: raise
        ``ValueError`` naming the key instead (the file's own seed axis, when it is read)."""
        k = len(self.looks(scale, seeds, like))
        split = self._at(self.alpha_split, scale, like)
        if k == 1:
            return [alpha]
        if split is None:
            return [look_alpha(k, alpha)] * k
        if len(split) != k:
            if not strict:
                return [look_alpha(k, alpha)] * k
            raise ValueError(f"{self._split_key(scale, like)}: {list(split)} gives {len(split)} look(s), but the seed "
                             f"axis {list(seeds)} plans {k} looks at {scale} (max_seeds "
                             f"{self._at(self.max_seeds, scale, like)}, batch {self.batch}): give {k} levels summing "
                             f"to {alpha:g}, or the seed axis the split was planned for")
        return [float(a) for a in split]

    def _split_key(self, scale: str, like: str | None) -> str:
        return f"seeding.alpha_split.{scale if scale in self.alpha_split else like}"

    def split_note(self, scale: str, seeds: list[int], like: str | None = None) -> str:
        """'' when the looks judge at the scale's own split (or it names none); else why they judge at
        the even split: the split was written for another number of looks than this seed axis plans."""
        split = self._at(self.alpha_split, scale, like)
        k = len(self.looks(scale, seeds, like))
        if split is None or k == 1 or len(split) == k:
            return ""
        return (f"{self._split_key(scale, like)} lists {len(split)} levels, but the seed axis {list(seeds)} plans {k} "
                f"looks: each judges at the even split, alpha / {k}")


class Tuning(StrictSpec):
    """``tuning:``: learning rates added beyond a grid's ends (*bracketing*). The grid's ``lr`` axis
    is each cell's first rates; after the grid's own seeds ran, a cell (a *family*: the trials equal
    but for lr and seed) whose best rate is an end of the rates it has gets the next rate beyond that
    end, at the grid's spacing (x ratio or / ratio), for the grid's seeds; repeated, one step at a
    time, until its best rate is interior, the rate beyond lies outside ``bounds`` or the scale's
    ``max_steps`` are spent. Then the seed looks of ``seeding:`` run. A scale not named (nor the
    scale it is ``like``) brackets nothing."""

    max_steps: StepBudgets = Field(description="Bracketing steps per family at most (a budget cap), per scale "
                                                  "name, e.g. {tiny: 1}.")
    bounds: tuple[float, float] = Field(description="Absolute learning-rate bounds [low, high], inclusive.")
    policy: str = Field(default="bracketing", description="The tuning policy (cemlab.sweeps.tuning_policy.POLICIES): "
                                                          "which rates a family gets next.")

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        POLICIES.get(v)   # an unknown name fails naming the policies there are
        return v

    @field_validator("bounds")
    @classmethod
    def _bounds(cls, v: tuple[float, float]) -> tuple[float, float]:
        return lr_range(v, "bounds", "bounds: [5.0e-4, 1.6e-2]")

    def steps(self, scale: str, like: str | None = None) -> int:
        """Bracketing steps per end at ``scale`` (or at the scale it is ``like``, when it names none); 0 if neither."""
        return self.max_steps.get(scale, self.max_steps.get(like, 0) if like else 0)


def lr_ratio(lrs: list[float], rel: float = 1e-6) -> float | None:
    """The constant ratio between consecutive distinct rates of ``lrs`` (evenly spaced on the log
    scale, within ``rel``); None for fewer than 2 rates or an uneven spacing."""
    rates = sorted(set(lrs))
    if len(rates) < 2:
        return None
    ratio = (rates[-1] / rates[0]) ** (1 / (len(rates) - 1))
    if any(not math.isclose(b / a, ratio, rel_tol=rel) for a, b in zip(rates, rates[1:])):
        return None
    return ratio


@dataclass(frozen=True)
class Trial:
    """One grid cell of a sweep at a scale, with its fully resolved and validated run config."""

    sweep: str
    figure: str
    scale: str
    trial_id: str        # stable, readable, filesystem-safe, unique within sweep+scale
    group: str           # variant family
    variant: str         # legend label
    size: str            # size name as in the sweep file ("" for GP sweeps)
    axes: dict           # every grid coordinate: size, group, variant, lr, seed, the variant's axes
    config: RunConfig    # tracking.experiment = cemlab/<sweep>, tags for sweep/figure/scale/trial
    config_hash: str     # config.hash(): equal for identical trials of different sweeps
    task: str = "lm"
    resources: Resources = field(default_factory=Resources)
    search: LrSearch | None = None   # search: optuna: this cell's settings (samples resolved for the scale)
    seeds_given: bool = False   # the command line gave the seed axis (seed=[...]): those seeds, none added
    carried: float | None = None   # ladder carry: the prediction its family starts around (stages.carrying)
