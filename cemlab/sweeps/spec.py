"""Sweep files and scales: the paper's experiments as grids of fully resolved trials.

A *sweep file* (``sweeps/<name>.yaml``) describes one experiment of the paper (a figure or table)
in the paper's own terms: model sizes by their paper names (``86m`` ... ``256m``), learning rates,
seeds and a list of *variants* (Llama baseline, CEM attention with T steps, ...). A *scale*
(``sweeps/scales.yaml``: ``smoke``, ``tiny``, ``paper``) says what a size name means concretely
(dimensions), the token budget, batch, data and the resources of one trial. ``expand(scale)``
multiplies the two into a deterministic list of :class:`Trial`, each with a validated ``RunConfig``.

Sweep file schema (every mapping forbids unknown keys)::

    name: recursion_ablation        # optional; must equal the file name when given
    figure: "Fig 2c+2d"             # the paper figure or table it reproduces (a label)
    figures: [fig2c, fig2d]         # the report's figures drawn from its runs (ids: cemlab.paper.FIGURES)
    claims: [t2-beats-t1]           # the claims its runs judge (ids: cemlab.paper.CLAIMS)
    description: ...
    task: lm                        # lm | gp
    base: {model: {...}, train: {...}}   # RunConfig fields shared by every trial (nested or dotted keys)
    axes:                           # the grid axes shared by every variant
      size: [86m, 108m]             # lm only: size names of the scale (model dims, tokens)
      lr: [2.0e-3]                  # -> train.lr
      seed: [0]                     # -> train.seed (default [0])
    variants:                       # each is multiplied by the axes above and by its own axes
      - group: cem-attn             # family (legend colour): llama, cem-attn, cem-mlp, cem, reuse-mlp, ...
        label: "cem-attn T{T} {precond}"   # legend label, templated by any axis
        set: {model.attention: cem, model.attn_steps: "{T}", model.attn_precond: "{precond}"}
        axes: {T: [1, 2], precond: [diag, dplr]}
    scales:                         # per-scale axis values (replace the file's values at that scale)
      tiny: {size: [86m, 108m], lr: [2.0e-3]}

Learning-rate search instead of an lr grid (``search: optuna``; no ``axes.lr`` then)::

    search: optuna
    optuna:
      lr: [5.0e-4, 8.0e-3]          # log-uniform range [low, high]
      samples: {smoke: 3, tiny: 6, paper: 12}   # trials per grid cell (or one number for every scale)
      metric: val/loss              # what ASHA and Optuna compare (reported at every validation), min
      grace_period: 1               # validations every trial gets before ASHA may stop it
      reduction_factor: 2           # ASHA keeps about 1/reduction_factor of the trials at each rung
      sampler: gp                   # Optuna sampler: gp (default; suits 8-12 samples), tpe or random
      startup_trials: 2             # random samples before the model guides (default: samples/4, >= 2)

Every other axis stays a grid: the runner gives each grid cell its own Optuna searcher and ASHA
scheduler (Tune's ``OptunaSearch`` takes no grid axes and never prunes). ``expand`` returns one
trial per cell at the range's geometric centre, which is also the searcher's first point;
:func:`trial_with_lr` makes the trial of a sampled learning rate (same naming, its own hash).

A value that is exactly ``"{T}"`` becomes the axis value itself (an int stays an int); a template
inside a longer string is formatted. Config layers, later wins: scale ``<task>.base`` < the size's
``model``/``train`` < sweep ``base`` < variant ``set`` < the axes (lr, seed) < tracking names.

Every problem (unknown key, wrong type, empty axis, a template naming an unknown axis, a
combination ``RunConfig``/``ModelConfig``/``GPConfig`` rejects, two trials with the same id or
config) raises :class:`SweepError` naming the file, the key path and the fix, before any trial runs.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import math
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from cemlab import paper
from cemlab.config import RunConfig
from cemlab.tracking import schema

#: Scale used when none is given (``make sweep`` / ``cemlab sweep`` / ``cemlab plan``).
DEFAULT_SCALE = "tiny"
#: Axes every sweep may have at the top level and the config field each one sets.
TOP_AXES = ("size", "lr", "seed")
AXIS_TARGETS = {"lr": ("train", "lr"), "seed": ("train", "seed")}

Scalar = bool | int | float | str
SearchKind = Literal["grid", "optuna"]


class SweepError(ValueError):
    """A sweep file or the scales file is invalid; the message names the file, the key and the fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------
# Scales
# ---------------------------------------------------------------------------------------------


class Resources(_Strict):
    """What one trial asks the scheduler for: ``workers`` processes (DDP ranks), each with
    ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs."""

    workers: int = Field(default=1, ge=1, description="Training processes per trial (DDP ranks).")
    cpus_per_worker: float = Field(default=1, gt=0, description="CPUs per worker (also its torch threads).")
    gpus_per_worker: float = Field(default=0, ge=0, description="GPUs per worker.")

    @property
    def cpus(self) -> float:
        return self.workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        return self.workers * self.gpus_per_worker


class SizeSpec(_Strict):
    """What a size name (``86m`` ...) means at one scale: model fields (or ``{preset: 86m}``) and
    optional per-size training settings (typically ``tokens``)."""

    model: dict[str, Any] = Field(description="ModelConfig fields, or {preset: <name>} plus overrides.")
    train: dict[str, Any] = Field(default_factory=dict, description="TrainConfig fields for this size.")


class TaskScale(_Strict):
    """Settings of one task (``lm`` or ``gp``) at one scale."""

    resources: Resources = Field(default_factory=Resources)
    base: dict[str, Any] = Field(default_factory=dict, description="RunConfig fields of every trial of this task.")


class ScaleSpec(_Strict):
    """One scale: the concrete meaning of the size names, and per-task settings and resources.

    ``like: <scale>`` makes a variant of another scale (e.g. the same models on another corpus): it
    starts from that scale's settings, merged key by key under its own, and takes the sweep files'
    per-scale axis values of that scale unless a sweep file names this one."""

    like: str | None = Field(default=None, description="A scale this one is a variant of (one level).")
    description: str = ""
    sizes: dict[str, SizeSpec] = Field(default_factory=dict)
    lm: TaskScale = Field(default_factory=TaskScale)
    gp: TaskScale = Field(default_factory=TaskScale)


# ---------------------------------------------------------------------------------------------
# Sweep files
# ---------------------------------------------------------------------------------------------


class Axes(_Strict):
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
        if v is not None and any(x <= 0 for x in v):
            raise ValueError(f"learning rates must be > 0, got {v}")
        return v


class Variant(_Strict):
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


class LrSearch(_Strict):
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
        if not 0 < v[0] < v[1]:
            raise ValueError(f"lr must be [low, high] with 0 < low < high, got {list(v)}")
        return v

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


def round_lr(lr: float) -> float:
    """A learning rate to 3 significant digits (sampled rates get short ids and exact hashes)."""
    return float(f"{lr:.3g}")


class SweepSpec(_Strict):
    """One sweep file. Load it with :func:`load_sweep`; ``expand(scale)`` gives the trials."""

    name: str | None = Field(default=None, description="Sweep name (the file name).")
    figure: str = Field(min_length=1, description="Paper figure or table reproduced, e.g. 'Fig 2a'.")
    figures: list[str] = Field(default_factory=list, description="Report figures drawn from its runs, e.g. [fig2a].")
    claims: list[str] = Field(default_factory=list, description="Claims its runs judge, e.g. [attn-small-cost].")
    description: str = ""
    task: Literal["lm", "gp"] = "lm"
    base: dict[str, Any] = Field(default_factory=dict)
    axes: Axes = Field(default_factory=Axes)
    variants: list[Variant] = Field(min_length=1)
    scales: dict[str, dict[str, list[Scalar]]] = Field(default_factory=dict)
    search: SearchKind = Field(default="grid", description="grid, or optuna (learning rate searched per cell).")
    optuna: LrSearch | None = Field(default=None, description="Settings of search: optuna.")

    _path: Path | None = PrivateAttr(default=None)

    @field_validator("figures", "claims")
    @classmethod
    def _known_ids(cls, v: list[str], info) -> list[str]:
        valid = paper.FIGURES if info.field_name == "figures" else paper.CLAIMS
        for x in v:
            if x not in valid:
                close = difflib.get_close_matches(x, valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown {info.field_name[:-1]} id {x!r}{hint}; choose among {', '.join(valid)}")
        if len(set(v)) != len(v):
            raise ValueError(f"values repeat in {v}; list each id once")
        return v

    @model_validator(mode="after")
    def _check(self) -> "SweepSpec":
        if self.search == "optuna":
            if self.optuna is None:
                raise ValueError("search: optuna needs an 'optuna' block, e.g. optuna: {lr: [5.0e-4, 8.0e-3], samples: 6}")
            if self.axes.lr is not None:
                raise ValueError("axes.lr: with search: optuna the learning rate is searched in optuna.lr; "
                                 "remove axes.lr (or use search: grid)")
        elif self.optuna is not None:
            raise ValueError("optuna: this block is only read with search: optuna; add search: optuna or remove it")
        if self.task == "lm" and self.axes.size is None:
            raise ValueError("axes.size is missing: a language-model sweep lists its sizes, e.g. size: [86m, 108m]")
        if self.task == "gp" and self.axes.size is not None:
            raise ValueError("axes.size: a GP sweep has no model sizes; set gp.latent_dim in base instead")
        return self

    # -- helpers ----------------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def source(self) -> str:
        return str(self._path) if self._path else f"sweep {self.name!r}"

    def top_axes(self) -> dict[str, list]:
        """Top-level axes that this sweep defines, in grid order."""
        return {k: getattr(self.axes, k) for k in TOP_AXES if getattr(self.axes, k) is not None}

    def axis_names(self) -> set[str]:
        names = set(self.top_axes())
        for v in self.variants:
            names.update(v.axes)
        return names

    # -- expansion --------------------------------------------------------------------------
    def expand(self, scale: str = DEFAULT_SCALE, scales: dict[str, ScaleSpec] | None = None,
               overrides: list[str] | None = None) -> list["Trial"]:
        """All trials of this sweep at ``scale``, in a deterministic order (size, variant, the
        variant's axes, lr, seed). Raises :class:`SweepError` before anything runs.

        ``overrides``: the command line's ``key=value`` (``cemlab sweep``/``plan``): a dotted
        config key (``train.tokens=2048``) is set in every trial after the scale and the sweep
        file, validated like ``cemlab train``'s; an axis name (``seed=[0,1,2]``, ``T=[1,2]``)
        replaces that axis's values. Overridden trials have their own config hashes."""
        scales = scales if scales is not None else load_scales(_scales_path_for(self._path))
        if scale not in scales:
            raise SweepError(f"{self.source}: unknown scale {scale!r}; choose one of {sorted(scales)} "
                             f"(defined in {_scales_path_for(self._path)})")
        spec, layers = (self, []) if not overrides else _with_overrides(self, scale, scales, overrides)
        return _expand(spec, scale, scales[scale], layers)


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


# ---------------------------------------------------------------------------------------------
# Finding and loading files
# ---------------------------------------------------------------------------------------------


def sweeps_dir() -> Path:
    """The project's sweep folder: ``$CEMLAB_SWEEPS_DIR``, else ``./sweeps`` when it holds a
    ``scales.yaml``, else the ``sweeps`` folder of the repository this package lives in."""
    env = os.environ.get("CEMLAB_SWEEPS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    local = Path.cwd() / "sweeps"
    if (local / "scales.yaml").is_file():
        return local.resolve()
    return Path(__file__).resolve().parents[2] / "sweeps"


def _scales_path_for(sweep_path: Path | None) -> Path:
    if sweep_path is not None and (sweep_path.parent / "scales.yaml").is_file():
        return sweep_path.parent / "scales.yaml"
    return sweeps_dir() / "scales.yaml"


def list_sweeps(directory: str | Path | None = None) -> list[str]:
    """Names of the sweep files in the sweep folder (``scales.yaml`` excluded), sorted."""
    d = Path(directory) if directory else sweeps_dir()
    return sorted(p.stem for p in d.glob("*.yaml") if p.name != "scales.yaml")


def scale_names() -> list[str]:
    """The scale names of the sweep folder's ``scales.yaml``, in file order (for ``--scale``'s
    choices and shell completion); empty when there is no such file."""
    try:
        return list(_read_yaml(sweeps_dir() / "scales.yaml"))
    except SweepError:
        return []


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: the top level must be a mapping (keys figure, axes, variants, ...)")
    return data


def load_scales(path: str | Path | None = None) -> dict[str, ScaleSpec]:
    """Read ``scales.yaml`` (default: the sweep folder's) and check every size's model config."""
    p = Path(path) if path else sweeps_dir() / "scales.yaml"
    if not p.is_file():
        raise SweepError(f"{p}: scales file not found; set CEMLAB_SWEEPS_DIR to a folder with scales.yaml")
    data = _read_yaml(p)
    for name, raw in list(data.items()):
        parent = raw.get("like") if isinstance(raw, dict) else None
        if parent is None:
            continue
        if parent not in data or not isinstance(data[parent], dict) or data[parent].get("like"):
            raise SweepError(f"{p}: {name}.like: {parent!r} must name a scale of this file that is not itself a "
                             f"variant (choose among {sorted(k for k, v in data.items() if not v.get('like'))})")
        data[name] = _merge_dicts(data[parent], raw)
    scales: dict[str, ScaleSpec] = {}
    for name, raw in data.items():
        try:
            scales[name] = ScaleSpec.model_validate(raw)
        except ValidationError as e:
            raise SweepError(_format_pydantic(e, f"{p}", prefix=(name,), model=ScaleSpec)) from None
        for size, spec in scales[name].sizes.items():
            cfg = _merge_dicts(_nest(scales[name].lm.base, f"{p}: {name}.lm.base"),
                               {"model": {**spec.model, "name": size}, "train": spec.train})
            try:
                RunConfig.model_validate(cfg)
            except ValidationError as e:
                raise SweepError(_format_pydantic(e, f"{p}", prefix=(name, "sizes", size),
                                                  model=RunConfig)) from None
    return scales


def load_sweep(name_or_path: str | Path) -> SweepSpec:
    """A sweep by name (a file in :func:`sweeps_dir`) or by path, validated statically: schema,
    axis names used by templates, scale names. Config-level checks happen in ``expand``."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.is_file():
        p = sweeps_dir() / f"{name_or_path}.yaml"
        if not p.is_file():
            avail = list_sweeps()
            close = difflib.get_close_matches(str(name_or_path), avail, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepError(f"no sweep named {str(name_or_path)!r} in {sweeps_dir()}{hint}; available: {avail}")
    if not p.is_file():
        raise SweepError(f"{p}: sweep file not found")
    p = p.resolve()
    data = _read_yaml(p)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SweepError(_format_pydantic(e, str(p), model=SweepSpec)) from None
    if spec.name is not None and spec.name != p.stem:
        raise SweepError(f"{p}: name: {spec.name!r} differs from the file name {p.stem!r}; "
                         f"rename the file or set name: {p.stem}")
    spec.name = p.stem
    spec._path = p
    _check_templates(spec)
    _check_scale_overrides(spec, load_scales(_scales_path_for(p)))
    return spec


# ---------------------------------------------------------------------------------------------
# Static checks
# ---------------------------------------------------------------------------------------------


def _template_names(value: Any) -> set[str]:
    """The ``{names}`` a value's templates use (recursing into lists and dicts)."""
    if isinstance(value, str):
        try:
            return {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(value) if f}
        except ValueError:
            return set()  # unbalanced braces: a literal string
    if isinstance(value, dict):
        return set().union(*(_template_names(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_template_names(v) for v in value)) if value else set()
    return set()


def _check_templates(spec: SweepSpec) -> None:
    src = spec.source
    top = set(spec.top_axes())
    for i, v in enumerate(spec.variants):
        known = top | set(v.axes)
        where = f"variants[{i}] (group {v.group})"
        for key, text in [("label", v.label)] + [(f"set.{k}", val) for k, val in v.set.items()]:
            unknown = _template_names(text) - known
            if unknown:
                raise SweepError(
                    f"{src}: {where}.{key}: template names unknown axis {sorted(unknown)}; "
                    f"use one of {sorted(known)} or add the axis to this variant's axes")
        for path, _ in _leaves(_nest(v.set, src)):
            for axis, target in AXIS_TARGETS.items():
                if axis in top and path == target:
                    raise SweepError(f"{src}: {where}.set.{'.'.join(path)} conflicts with the top-level '{axis}' "
                                     f"axis, which sets {'.'.join(target)}; remove one of them")
        used_in_set = _template_names(v.set)
        used_in_label = _template_names(v.label)
        for axis in v.axes:
            if axis not in used_in_set:
                raise SweepError(f"{src}: {where}.axes.{axis} is used in no 'set' value, so its cells would "
                                 f"be identical runs; use it in set (e.g. model.attn_steps: \"{{{axis}}}\") or remove it")
            if axis not in used_in_label:
                raise SweepError(f"{src}: {where}.axes.{axis} does not appear in the label {v.label!r}, so its "
                                 f"cells would share a legend label; add {{{axis}}} to the label")


def _check_scale_overrides(spec: SweepSpec, scales: dict[str, ScaleSpec]) -> None:
    src = spec.source
    names = spec.axis_names()
    for scale, overrides in spec.scales.items():
        if scale not in scales:
            raise SweepError(f"{src}: scales.{scale}: unknown scale; choose one of {sorted(scales)}")
        for axis, values in overrides.items():
            if axis not in names:
                raise SweepError(f"{src}: scales.{scale}.{axis}: this sweep has no axis {axis!r}; "
                                 f"its axes are {sorted(names)}")
            if not values:
                raise SweepError(f"{src}: scales.{scale}.{axis} is empty; list at least one value or remove it")
            if axis in TOP_AXES:
                try:
                    Axes.model_validate({axis: values})
                except ValidationError as e:
                    raise SweepError(_format_pydantic(e, src, prefix=("scales", scale), model=Axes)) from None


# ---------------------------------------------------------------------------------------------
# Command-line overrides
# ---------------------------------------------------------------------------------------------

#: Where command-line overrides are said to come from in error messages.
CLI_SOURCE = "command line"


def _with_overrides(spec: SweepSpec, scale: str, scales: dict[str, ScaleSpec],
                    overrides: list[str]) -> tuple[SweepSpec, list[tuple[str, dict[str, Any]]]]:
    """Split ``key=value`` overrides into axis values (a copy of ``spec`` whose ``scales[scale]``
    lists them) and config layers ``(text, nested dict)`` applied last to every trial."""
    from cemlab.config import parse_override

    axes = spec.axis_names()
    axis_values: dict[str, list] = {}
    layers: list[tuple[str, dict[str, Any]]] = []
    for text in overrides:
        try:
            path, value = parse_override(text)
        except ValueError as e:
            raise SweepError(f"{CLI_SOURCE}: {e}") from None
        key = ".".join(path)
        if len(path) == 1:
            if key not in axes:
                sections = [f"{k}." for k in RunConfig.model_fields]
                close = difflib.get_close_matches(key, sorted(axes) + sections, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise SweepError(f"{CLI_SOURCE}: {text!r}: {key!r} is neither an axis of {spec.name} nor a config key; "
                                 f"{hint}axes: {sorted(axes)}; config keys look like train.tokens=2048")
            if spec.search == "optuna" and key == "lr":
                raise SweepError(f"{CLI_SOURCE}: {text!r}: {spec.name} searches the learning rate with Optuna; "
                                 f"it has no lr axis to override")
            values = value if isinstance(value, list) else [value]
            if key in TOP_AXES:  # typed as the sweep file's (YAML reads 1e-3 as a string)
                try:
                    values = getattr(Axes.model_validate({key: values}), key)
                except ValidationError as e:
                    raise SweepError(_format_pydantic(e, f"{CLI_SOURCE}: {text!r}", model=Axes)) from None
            axis_values[key] = values
            continue
        for axis, target in AXIS_TARGETS.items():
            if tuple(path) == target and axis in spec.top_axes():
                raise SweepError(f"{CLI_SOURCE}: {text!r} sets {key}, which the sweep's {axis!r} axis sets for each "
                                 f"trial; override the axis instead: {axis}=[{value}]")
        layers.append((f"{CLI_SOURCE}: {text}", _nest({key: value}, CLI_SOURCE)))
    if not axis_values:
        return spec, layers
    out = spec.model_copy(deep=True)
    out._path = spec._path
    out.scales = {**out.scales, scale: {**out.scales.get(scale, {}), **axis_values}}
    try:
        _check_scale_overrides(out, scales)
    except SweepError as e:  # name the command line, not the sweep file
        raise SweepError(str(e).replace(f"{spec.source}: scales.{scale}.", f"{CLI_SOURCE}: ")
                         .replace(spec.source, CLI_SOURCE).replace(f"scales.{scale}.", "")) from None
    return out, layers


# ---------------------------------------------------------------------------------------------
# Expansion
# ---------------------------------------------------------------------------------------------


def _nest(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"model.attn_steps": 2, "train": {"lr": 1}}`` -> nested dicts (dotted keys split)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = str(key).split(".")
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise SweepError(f"{where}: {key!r} puts a field under {p!r}, which already has a value")
            node = nxt
        leaf = parts[-1]
        if isinstance(value, dict):
            value = _nest(value, where)
            if isinstance(node.get(leaf), dict):
                value = _merge_dicts(node[leaf], value)
        node[leaf] = value
    return out


def _merge_dicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Deep merge; ``b`` wins. Neither input is modified."""
    out = copy.deepcopy(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge_dicts(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _leaves(d: dict[str, Any], prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.extend(_leaves(v, prefix + (k,)))
        else:
            out.append((prefix + (k,), v))
    return out


def _render(value: Any, values: dict[str, Any]) -> Any:
    """Fill ``{axis}`` templates: ``"{T}"`` alone keeps the value's type, otherwise str.format."""
    if isinstance(value, str):
        m = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", value)
        if m:
            return values[m.group(1)]
        if not _template_names(value):
            return value
        return value.format(**values)
    if isinstance(value, dict):
        return {k: _render(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, values) for v in value]
    return value


def format_lr(lr: float) -> str:
    """``0.002`` -> ``2e-3``; ``0.0015`` -> ``1.5e-3`` (compact, filesystem-safe)."""
    mant, exp = f"{lr:.6e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def _slug(text: str) -> str:
    s = re.sub(r"\s+", "_", text.strip())
    s = re.sub(r"[^A-Za-z0-9._-]", "-", s)
    return s.strip("_-") or "x"


def _expand(spec: SweepSpec, scale_name: str, scale: ScaleSpec,
            cli_layers: list[tuple[str, dict[str, Any]]] | None = None) -> list[Trial]:
    src = spec.source
    scales_src = str(_scales_path_for(spec._path))
    overrides = spec.scales.get(scale_name, spec.scales.get(scale.like, {}) if scale.like else {})
    task_scale: TaskScale = getattr(scale, spec.task)
    top = {k: list(overrides.get(k, v)) for k, v in spec.top_axes().items()}
    if spec.task == "lm":
        for s in top["size"]:
            if s not in scale.sizes:
                raise SweepError(
                    f"{src}: axes.size: size {s!r} is not defined at scale {scale_name!r}; define it under "
                    f"{scale_name}.sizes in {scales_src} or choose among {sorted(scale.sizes)}")
    gp_model = _gp_config_model() if spec.task == "gp" else None

    trials: list[Trial] = []
    ids: dict[str, str] = {}
    hashes: dict[str, str] = {}
    sizes = top.get("size", [None])
    lrs = top.get("lr", [None])
    search = None
    if spec.search == "optuna":
        samples = spec.optuna.samples_at(scale_name, scale.like)
        if samples is None:
            raise SweepError(f"{src}: optuna.samples gives no number for scale {scale_name!r}; add "
                             f"{scale_name}: N to it or give one number for every scale")
        search = spec.optuna.model_copy(update={"samples": samples})
        lrs = [spec.optuna.center()]
    seeds = top["seed"]
    for size in sizes:
        for vi, variant in enumerate(spec.variants):
            own = {k: list(overrides.get(k, vals)) for k, vals in variant.axes.items()}
            for combo in itertools.product(*own.values()):
                own_values = dict(zip(own.keys(), combo))
                for lr in lrs:
                    for seed in seeds:
                        values: dict[str, Any] = {"size": size} if size is not None else {}
                        if lr is not None:
                            values["lr"] = lr
                        values.update(seed=seed, **own_values)
                        trial = _make_trial(spec, scale_name, scale, task_scale, vi, variant, values,
                                            src, scales_src, gp_model, search, cli_layers or [])
                        if trial.trial_id in ids:
                            raise SweepError(
                                f"{src}: variants[{vi}].label: two trials get the id {trial.trial_id!r} at scale "
                                f"{scale_name!r}; make the labels differ by including every axis, e.g. "
                                f"{{{'}, {'.join(own) or 'axis'}}}")
                        if trial.config_hash in hashes:
                            raise SweepError(
                                f"{src}: trials {hashes[trial.config_hash]!r} and {trial.trial_id!r} have identical "
                                f"configs at scale {scale_name!r} (hash {trial.config_hash}); remove one variant "
                                f"or make its 'set' differ")
                        ids[trial.trial_id] = trial.trial_id
                        hashes[trial.config_hash] = trial.trial_id
                        trials.append(trial)
    return trials


def _trial_id(size: str | None, label: str, values: dict[str, Any]) -> str:
    """``<size>__<label>__lr<lr>__s<seed>``: readable, filesystem-safe, unique within a sweep."""
    parts = ([size] if size is not None else []) + [_slug(label)]
    if "lr" in values:
        parts.append(f"lr{format_lr(values['lr'])}")
    parts.append(f"s{values['seed']}")
    return "__".join(parts)


def _make_trial(spec: SweepSpec, scale_name: str, scale: ScaleSpec, task_scale: TaskScale, vi: int,
                variant: Variant, values: dict[str, Any], src: str, scales_src: str, gp_model,
                search: LrSearch | None = None, cli_layers: list[tuple[str, dict[str, Any]]] = ()) -> Trial:
    where = f"variants[{vi}] (group {variant.group})"
    label = _render(variant.label, values)
    size = values.get("size")

    # Layers, later wins; provenance remembers which file/key set each leaf for error messages.
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"{scales_src}: {scale_name}.{spec.task}.base", _nest(task_scale.base, scales_src)),
    ]
    if size is not None:
        s = scale.sizes[size]
        layers.append((f"{scales_src}: {scale_name}.sizes.{size}",
                       {"model": {**s.model, "name": size}, "train": dict(s.train)}))
    layers.append((f"{src}: base", _nest(spec.base, src)))
    layers.append((f"{src}: {where}.set", _nest(_render(variant.set, values), src)))
    axis_layer: dict[str, Any] = {"task": spec.task}
    for axis, (sec, key) in AXIS_TARGETS.items():
        if axis in values:
            axis_layer.setdefault(sec, {})[key] = values[axis]
    layers.append((f"{src}: axes", axis_layer))
    layers.extend(cli_layers)

    data: dict[str, Any] = {}
    provenance: dict[tuple, str] = {}
    for name, layer in layers:
        data = _merge_dicts(data, layer)
        for path, _ in _leaves(layer):
            provenance[path] = name

    # Trial id and tracking names (tracking is left out of the config hash).
    trial_id = _trial_id(size, label, values)
    axes: dict[str, Any] = {"size": size} if size is not None else {}
    axes.update(group=variant.group, variant=label)
    if "lr" in values:
        axes["lr"] = values["lr"]
    axes["seed"] = values["seed"]
    axes.update({k: v for k, v in values.items() if k not in TOP_AXES})
    tags = {schema.SWEEP: spec.name, schema.FIGURE: spec.figure, schema.SCALE: scale_name,
            schema.TRIAL_ID: trial_id, schema.GROUP: variant.group, schema.VARIANT: label,
            schema.TASK: spec.task, schema.ROLE: "trial"}
    if size is not None:
        tags[schema.SIZE] = size
    if search is not None:  # every sampled trial of this cell keeps the cell's id here
        tags[schema.SEARCH_CELL] = trial_id
    if cli_layers:
        tags[schema.OVERRIDES] = " ".join(name.removeprefix(f"{CLI_SOURCE}: ") for name, _ in cli_layers)
    for k, v in axes.items():
        if k not in ("group", "variant"):
            tags[schema.axis_tag(k)] = str(v)
    data["tracking"] = _merge_dicts(data.get("tracking", {}),
                                    {"experiment": f"cemlab/{spec.name}", "run_name": trial_id, "tags": tags})

    context = f"{src}: {where} at scale {scale_name!r} ({_describe(values)})"
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as e:
        raise SweepError(_explain_config_error(e, context, provenance)) from None
    if gp_model is not None:
        try:
            gp_model.model_validate(config.gp or {})
        except ValidationError as e:
            raise SweepError(_explain_config_error(e, context, provenance, prefix=("gp",))) from None
    per_step = config.train.micro_batch_size * task_scale.resources.workers
    if config.train.batch_size % per_step:
        raise SweepError(
            f"{context}: train.batch_size={config.train.batch_size} is not a multiple of train.micro_batch_size="
            f"{config.train.micro_batch_size} x resources.workers={task_scale.resources.workers} (set in "
            f"{scales_src}: {scale_name}.{spec.task}); choose a batch size divisible by {per_step}")
    h = config.hash()
    config.tracking.tags[schema.CONFIG_HASH] = h
    if size is not None:
        config.tracking.tags[schema.MODEL_KIND] = config.model.kind
    return Trial(sweep=spec.name, figure=spec.figure, scale=scale_name, trial_id=trial_id, group=variant.group,
                 variant=label, size=size or "", axes=axes, config=config, config_hash=h, task=spec.task,
                 resources=task_scale.resources, search=search)


def trial_with_lr(trial: Trial, lr: float) -> Trial:
    """The trial of ``trial``'s grid cell at learning rate ``lr`` (an Optuna sample): the same
    config with ``train.lr = lr``, and the id, tags and hash that ``expand`` would give it."""
    lr = float(lr)
    axes = {**trial.axes, "lr": lr}
    trial_id = _trial_id(trial.size or None, trial.variant, axes)
    config = trial.config.model_copy(deep=True)
    config.train.lr = lr
    h = config.hash()
    config.tracking.run_name = trial_id
    config.tracking.tags.update({schema.TRIAL_ID: trial_id, schema.axis_tag("lr"): str(lr), schema.CONFIG_HASH: h})
    return dataclasses.replace(trial, trial_id=trial_id, axes=axes, config=config, config_hash=h)


def _gp_config_model():
    """The GP study's settings model, when that part of cemlab is installed."""
    try:
        from cemlab.gp.config import GPConfig
    except ImportError:
        return None
    return GPConfig


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


# ---------------------------------------------------------------------------------------------
# Error messages
# ---------------------------------------------------------------------------------------------


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """Field names valid at ``loc`` inside ``model`` (for 'did you mean' hints)."""
    node = model
    for part in loc:
        if part.isdigit():  # an index into a list of models: stay at the item type
            continue
        if node is None or not hasattr(node, "model_fields") or part not in node.model_fields:
            return []
        ann = node.model_fields[part].annotation
        node = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)),
                    ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None)
    return list(node.model_fields) if node is not None and hasattr(node, "model_fields") else []


def _key_path(loc: tuple) -> str:
    """``("variants", 0, "axes")`` -> ``variants[0].axes``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _error_line(err: dict, model: type[BaseModel] | None, prefix: tuple = ()) -> str:
    loc = tuple(err["loc"])
    path = _key_path(prefix + loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        valid = _fields_at(model, tuple(str(x) for x in loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        if close:
            msg = f"unknown key; did you mean {close[0]!r}?"
        else:
            msg = "unknown key; " + (f"valid keys here: {', '.join(valid)}" if valid else "remove it")
    elif err["type"] == "missing":
        msg = "required key is missing; add it"
    elif err["type"] == "too_short" and "List" in err["msg"]:
        msg = "empty list; list at least one value or remove the key"
    elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
        msg = f"{msg} (got {err['input']!r})"
    return f"  - {path}: {msg}"


def _format_pydantic(e: ValidationError, source: str, prefix: tuple = (), model: type[BaseModel] | None = None) -> str:
    return "\n".join([f"{source}: invalid"] + [_error_line(err, model, prefix) for err in e.errors()])


def _explain_config_error(e: ValidationError, context: str, provenance: dict[tuple, str],
                          prefix: tuple = ()) -> str:
    """A RunConfig/GPConfig error, with the file and key that set each offending field."""
    lines = [f"{context}: invalid run config"]
    for err in e.errors():
        loc = prefix + tuple(err["loc"])
        lines.append(_error_line({**err, "loc": loc}, RunConfig))
        key = tuple(str(x) for x in loc)
        if key in provenance:  # the key itself is wrong: say which layer set it
            setters = [key]
        else:  # a check over a whole section: the fields its message names
            setters = [p for p in provenance if p[:len(key)] == key
                       and re.search(rf"\b{re.escape(p[-1])}\b", err["msg"])]
        for p in setters:
            lines.append(f"      {'.'.join(p)} is set in {provenance[p]}")
    return "\n".join(lines)
