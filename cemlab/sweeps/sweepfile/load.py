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
    figures: [fig2c, fig2d]         # the report's figures drawn from its runs (ids: cemlab.sweeps.feeds.FIGURES)
    claims: [t2-beats-t1]           # the claims its runs judge (ids: cemlab.sweeps.feeds.CLAIMS)
    description: ...
    task: lm                        # lm | gp | a task a plugin registers
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
    seeding:                        # optional: seeds added where a claim's verdict is still open
      max_seeds: {tiny: 6}          # per scale; a scale not named runs its seed axis once
      batch: 3                      # seeds added to each open cell at a look
      alpha_split: {tiny: [0.01, 0.04]}   # optional, per scale: each look's two-sided level, summing
                                    # to 0.05 (default: 0.05 / looks)
    tuning:                         # optional: rates added beyond a cell's best edge (bracketing)
      max_steps: {tiny: 1}          # per scale: steps per end; a scale not named brackets nothing
      bounds: [5.0e-4, 1.6e-2]      # absolute lr bounds, inclusive
    confirmation:                   # optional: rates chosen on the grid's seeds, then fresh seeds at them
      budget: {tiny: 165}           # per scale: trials of the whole job at most
      alpha: 0.045                  # two-sided level of each tuned comparison (one-sided 0.0225)
      primary: t2-beats-t1          # the claim whose primary condition gets the seeds left over
    ladder:                         # optional: rungs of training length (cemlab.sweeps.sweepfile.ladder_section)
      scale: workstation            # every rung is this scale's size, trained for the rung's tokens
      size: 86m
      rungs: [0.3125, 1.25, 5, 20]  # tokens per parameter of the matched Llama, increasing

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
``cemlab.sweeps.sweepfile.expand.trial_with_lr`` makes the trial of a sampled learning rate (same naming, its own hash).

A value that is exactly ``"{T}"`` becomes the axis value itself (an int stays an int); a template
inside a longer string is formatted. Config layers, later wins: scale ``<task>.base`` < the size's
``model``/``train`` < sweep ``base`` < variant ``set`` < the axes (lr, seed) < tracking names.

Every problem (unknown key, wrong type, empty axis, a template naming an unknown axis, a
combination ``RunConfig``/``ModelConfig``/``GPConfig`` rejects, two trials with the same id or
config) raises :class:`SweepError` naming the file, the key path and the fix, before any trial runs.

This module holds the sweep file (:class:`SweepSpec`) and :func:`load_sweep`; its parts and the
scales file are ``cemlab.sweeps.sweepfile.schema``, the sweep folder ``cemlab.sweeps.sweepfile.files``, the grid
``cemlab.sweeps.sweepfile.expand``, config layers and templates ``cemlab.sweeps.sweepfile.layers``, and the error
messages ``cemlab.sweeps.sweepfile.errors``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from cemlab.sweeps.sweepfile.errors import format_validation_error
from cemlab.sweeps import feeds
from cemlab.sweeps.sweepfile.expand import expand_spec, with_overrides
from cemlab.sweeps.sweepfile.files import scales_path_for, check_scale_overrides, list_sweeps, load_scales, read_yaml, sweeps_dir
from cemlab.sweeps.sweepfile.ladder_section import Ladder, check_ladder, ladder_params, rung_entries, rung_scales
from cemlab.sweeps.sweepfile.layers import leaves, nest, template_names
from cemlab.sweeps.sweepfile.schema import (ALPHA, AXIS_TARGETS, DEFAULT_SCALE, TOP_AXES, Axes, LrSearch, Scalar,
                                       ScaleSpec, SearchKind, Seeding, SweepError, Trial, Tuning, Variant, StrictSpec,
                                       lr_ratio)
from cemlab.sweeps.sweepfile import family_policy, tuning_section
from cemlab.sweeps.sweepfile.confirmation_section import Confirmation, check_confirmation, raised_budget
from cemlab.tasks import get_task


class SweepSpec(StrictSpec):
    """One sweep file. Load it with :func:`load_sweep`; ``expand(scale)`` gives the trials."""

    name: str | None = Field(default=None, description="Sweep name (the file name).")
    figure: str = Field(min_length=1, description="Paper figure or table reproduced, e.g. 'Fig 2a'.")
    figures: list[str] = Field(default_factory=list, description="Report figures drawn from its runs, e.g. [fig2a].")
    claims: list[str] = Field(default_factory=list, description="Claims its runs judge, e.g. [attn-small-cost].")
    description: str = ""
    task: str = Field(default="lm", description="The task, by name: lm, gp, or one a plugin registers.")
    base: dict[str, Any] = Field(default_factory=dict)
    axes: Axes = Field(default_factory=Axes)
    variants: list[Variant] = Field(min_length=1)
    scales: dict[str, dict[str, list[Scalar]]] = Field(default_factory=dict)
    search: SearchKind = Field(default="grid", description="grid, or optuna (learning rate searched per cell).")
    optuna: LrSearch | None = Field(default=None, description="Settings of search: optuna.")
    seeding: Seeding | None = Field(default=None, description="Seeds added where a claim's verdict is open.")
    tuning: Tuning | None = Field(default=None, description="Learning rates added beyond a cell's best edge.")
    confirmation: Confirmation | None = Field(default=None, description="Rates chosen on the grid's seeds, then "
                                                                        "fresh seeds at them, up to a trial budget.")
    ladder: Ladder | None = Field(default=None, description="Rungs of training length (cemlab sweep --ladder).")

    _path: Path | None = PrivateAttr(default=None)
    _rungs: dict[str, ScaleSpec] = PrivateAttr(default_factory=dict)
    _cli_axes: frozenset[str] = PrivateAttr(default=frozenset())   # axes the command line set (with_overrides)

    @field_validator("figures", "claims")
    @classmethod
    def _known_ids(cls, v: list[str], info) -> list[str]:
        registry = feeds.FIGURES if info.field_name == "figures" else feeds.CLAIMS
        for x in v:
            if x not in registry:
                valid = registry.names()
                close = difflib.get_close_matches(x, valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown {info.field_name[:-1]} id {x!r}{hint}; choose among {', '.join(valid)}")
        if len(set(v)) != len(v):
            raise ValueError(f"values repeat in {v}; list each id once")
        return v

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        get_task(v)  # an unknown name fails naming the tasks there are
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
        if self.ladder is not None and self.search == "optuna":
            raise ValueError("ladder: compares the grid's cells at every rung; a search: optuna sweep samples its "
                             "learning rate instead: remove ladder (or use search: grid)")
        if self.ladder is not None and self.ladder.max_seeds and self.seeding is None:
            raise ValueError("ladder.max_seeds: a rung's seed budget is spent by the looks of seeding:, which this "
                             "sweep lacks; add a seeding block (e.g. seeding: {max_seeds: {}, batch: 5}) or remove "
                             "ladder.max_seeds")
        if self.seeding is not None:
            if self.search == "optuna":
                raise ValueError("seeding: adds grid seeds where a verdict is open; a search: optuna sweep samples its "
                                 "learning rate instead: remove seeding (or use search: grid)")
            if not self.claims:
                raise ValueError("seeding: adds seeds where a claim's verdict is still open, and this sweep lists no "
                                 "claims: list the claims it judges (claims: [...]) or remove seeding")
        if self.tuning is not None and self.search == "optuna":
            raise ValueError("tuning: extends a grid's lr axis beyond its ends; a search: optuna sweep samples its "
                             "learning rate in optuna.lr instead: remove tuning (or use search: grid)")
        if get_task(self.task).sized and self.axes.size is None:
            raise ValueError("axes.size is missing: a language-model sweep lists its sizes, e.g. size: [86m, 108m]")
        if not get_task(self.task).sized and self.axes.size is not None:
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

    def all_scales(self) -> dict[str, ScaleSpec]:
        """The scales this sweep may run at: those of its scales file, and its ladder's rungs
        (``cemlab.sweeps.sweepfile.ladder_section``: one scale per rung)."""
        return {**load_scales(scales_path_for(self._path)), **self._rungs}

    def rungs(self) -> dict[str, float]:
        """The ladder's rungs, scale name -> tokens per parameter, cheapest first ({} without one)."""
        return {name: scale.rung for name, scale in self._rungs.items()}

    def per_scale(self, setting: str) -> dict[str, Any]:
        """A per-scale setting of this file by scale name: ``scales`` (the axis values) or a section's
        table (``tuning.max_steps``, ``seeding.max_seeds``, ``seeding.alpha_split``,
        ``confirmation.budget``, ``confirmation.primary_seeds``); {} without the section. The ladder's
        rungs have the entries its rule gives them (``ladder_section.rung_entries``: what a rung takes
        from its base scale), under those the file gives itself."""
        section, _, key = setting.rpartition(".")
        owner = getattr(self, section) if section else self
        own = dict(getattr(owner, key)) if owner is not None else {}
        if self.ladder is None or not self._rungs:
            return own
        return {**rung_entries(self.ladder, setting, own), **own}

    def entry(self, setting: str, scale: str) -> Any:
        """The entry of a per-scale setting (:meth:`per_scale`) at ``scale``: its own (a ladder rung's
        by the ladder's rule), else that of the scale it is ``like``; None where neither has one."""
        table = self.per_scale(setting)
        sc = self.all_scales().get(scale)
        like = sc.like if sc is not None else None
        return table.get(scale, table.get(like) if like else None)

    def settings(self, section: str):
        """The file's ``section`` (``tuning``, ``seeding`` or ``confirmation``) as it holds at every scale
        of this sweep: its per-scale tables with the ladder's rungs' entries (:meth:`per_scale`), so that
        its lookups by scale and ``like`` scale answer for a rung too; None without the section."""
        own = getattr(self, section)
        if own is None or self.ladder is None or not self._rungs:
            return own
        return own.model_copy(update={k: self.per_scale(f"{section}.{k}") for k in _PER_SCALE[section]})

    def looks(self, scale: str, trials: list["Trial"]) -> list[list[int]]:
        """The seeds of each planned look at ``scale`` for the grid ``trials`` (its seed axis as
        expanded, overrides included): one look of its own seeds without ``seeding``, and where the
        command line gave the seed axis (``seed=[...]``: those seeds exactly, none added; the file's
        budget applies to its own seed axis, see :meth:`budget_looks`)."""
        seeds = grid_seeds(trials)
        if any(t.seeds_given for t in trials):
            return [seeds]
        return self.budget_looks(scale, seeds)

    def budget_looks(self, scale: str, seeds: list[int]) -> list[list[int]]:
        """The looks this file's ``seeding`` plans at ``scale`` from the grid seeds ``seeds`` (one
        look, ``seeds``, where it adds none)."""
        if self.seeding is None or self.search == "optuna" or not seeds:
            return [list(seeds)]
        return self.settings("seeding").looks(scale, seeds, self._like(scale))

    def look_alphas(self, scale: str, trials: list["Trial"]) -> list[float]:
        """The two-sided level each planned look (``looks``) judges at: the file's
        ``seeding.alpha_split`` for the scale, else alpha / K (alpha itself for one look); the even
        split where a seed axis overridden on the command line plans another number of looks than
        the split lists (``split_note`` says so); alpha itself where the command line gave the seed
        axis (one look, :meth:`looks`)."""
        seeds = grid_seeds(trials)
        if self.seeding is None or self.search == "optuna" or not seeds or any(t.seeds_given for t in trials):
            return [ALPHA]
        return self.settings("seeding").alphas(scale, seeds, self._like(scale))

    def split_note(self, scale: str, trials: list["Trial"]) -> str:
        """Why the looks of ``trials`` judge at the even split although the file gives a split for the
        scale ('' when they do not): ``Seeding.split_note``."""
        seeds = grid_seeds(trials)
        if self.seeding is None or self.search == "optuna" or not seeds or any(t.seeds_given for t in trials):
            return ""
        return self.settings("seeding").split_note(scale, seeds, self._like(scale))

    def confirmation_budget(self, scale: str, trials: list["Trial"] | None = None,
                            spent: int | None = None) -> int | None:
        """The confirmation stage's trial budget at ``scale`` (``confirmation.budget``, else its ``like``
        scale's), at least ``spent`` (the selection's trials) + ``confirmation.fresh``; None without one,
        and for grid ``trials`` whose seed axis the command line gave (those seeds exactly, none added)."""
        if self.confirmation is None or self.search == "optuna" or any(t.seeds_given for t in trials or []):
            return None
        budget = self.entry("confirmation.budget", scale)
        return budget if budget is None or spent is None else raised_budget(budget, self.fresh_trials(scale), spent)

    def fresh_trials(self, scale: str) -> int | None:
        """The confirmation's fewest trials at ``scale`` (``confirmation.fresh``; a rung's by the ladder's rule)."""
        return None if self.confirmation is None else self.entry("confirmation.fresh", scale)

    def primary_seeds(self, scale: str) -> int | None:
        """The confirmation's primary condition's fixed fresh seeds at ``scale`` (a rung's by the ladder's rule)."""
        return None if self.confirmation is None else self.entry("confirmation.primary_seeds", scale)

    def bracket_steps(self, scale: str, trials: list["Trial"] | None = None) -> int:
        """Bracketing steps per end at ``scale`` (``tuning.max_steps``, else its ``like`` scale's; a
        ladder rung's by the ladder's rule, :meth:`per_scale`); 0 without ``tuning``, and 0 for grid
        ``trials`` (when given) whose rates cannot be bracketed (an lr axis from the command line:
        ``tuning_section.unbracketable``)."""
        if self.tuning is None or self.search == "optuna":
            return 0
        steps = self.settings("tuning").steps(scale, self._like(scale))
        if steps and trials is not None and tuning_section.unbracketable(self, trials):
            return 0
        return steps

    def _like(self, scale: str) -> str | None:
        sc = self.all_scales().get(scale)
        return sc.like if sc is not None else None

    def rate_ratio(self, scale: str, trials: list["Trial"]) -> float:
        """The spacing of the grid ``trials``' learning rates (their sorted distinct rates at a constant
        ratio, within 1e-6 relative): what a bracketing step multiplies or divides by. ``SweepError``
        when they have none (fewer than 2 rates, uneven) or, at a scale that brackets, lie outside
        ``tuning.bounds`` (a file's own axis is refused when it is read; an lr axis from the command
        line here)."""
        if tuning_section.is_carried(trials):   # a carried ladder rung: each family its own rates
            return family_policy.scale_ratio(self, scale)
        if self.bracket_steps(scale):
            return tuning_section.check_grid(self, scale, trials)
        ratio = lr_ratio(tuning_section.grid_rates(trials))
        if ratio is None:
            raise SweepError(f"{self.source}: the learning rates of the grid at {scale} "
                             f"{tuning_section.grid_rates(trials)} are fewer than 2 or not evenly spaced on the log "
                             f"scale: they have no ratio")
        return ratio

    def tuning_rates(self, scale: str, trials: list["Trial"]) -> list[float]:
        """Every learning rate bracketing can reach at ``scale`` from the grid ``trials``, increasing:
        the grid's rates and up to ``bracket_steps`` rates beyond each end (low / ratio**k, high *
        ratio**k, each to 3 significant digits, ``schema.round_lr``), those inside ``tuning.bounds``;
        for a carried ladder rung, beyond each family's own start (``family_policy.reachable``).
        The grid's rates alone where the scale, or this grid, brackets nothing (:meth:`bracket_steps`)."""
        return family_policy.reachable(self, scale, trials)

    def tuning_policy(self, scale: str, trials: list["Trial"]):
        """The tuning policy of the grid ``trials`` at ``scale`` (``tuning.policy``, a
        ``cemlab.sweeps.tuning_policy.Policy``: the one rule for the rates a family gets next, whether it
        is bracketed, and what it adds at least and at most), for a family that starts from the grid's
        rates; None where nothing is bracketed (:meth:`bracket_steps`). Each family's own:
        :meth:`family_policies`."""
        return family_policy.policy_for(self, scale, trials)

    def family_policies(self, scale: str, trials: list["Trial"]) -> dict:
        """Family -> its tuning policy (``family_policy.family_policies``: a carried family's from its own start)."""
        return family_policy.family_policies(self, scale, trials)

    def next_rate(self, scale: str, trials: list["Trial"], lrs: list[float], edge: str) -> float | None:
        """The rate beyond ``edge`` ('lowest' or 'highest') of a family that has the rates ``lrs``:
        the nearest of :meth:`tuning_rates` below ``min(lrs)`` or above ``max(lrs)``; None where there
        is none (the bounds or the scale's ``max_steps`` reached, or no bracketing)."""
        policy = self.tuning_policy(scale, trials)
        nxt = policy.beyond(lrs, edge) if policy is not None else []
        return nxt[0] if nxt else None

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
        scales = scales if scales is not None else self.all_scales()
        if scale not in scales:
            raise SweepError(f"{self.source}: unknown scale {scale!r}; choose one of {sorted(scales)} "
                             f"(defined in {scales_path_for(self._path)})")
        spec, layers = (self, []) if not overrides else with_overrides(self, scale, scales, overrides)
        return expand_spec(spec, scale, scales[scale], layers)


#: The per-scale tables of each section (``SweepSpec.settings``).
_PER_SCALE = {"tuning": ("max_steps",), "seeding": ("max_seeds", "alpha_split"),
              "confirmation": ("budget", "primary_seeds", "fresh")}


def grid_seeds(trials: list["Trial"]) -> list[int]:
    """The seeds of a grid's trials, in order."""
    return sorted({int(t.axes.get("seed", t.config.train.seed)) for t in trials})


#: A sweep name: a file name in the sweeps folder, without its ``.yaml`` (no folder, no ``..``).
SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def load_sweep(name_or_path: str | Path) -> SweepSpec:
    """A sweep by name (a file in :func:`sweeps_dir`) or by an explicit path to a ``.yaml`` file,
    validated statically: schema, axis names used by templates, scale names. A name is never a
    path: ``../x`` is refused, not looked up outside the sweeps folder. Config-level checks
    happen in ``expand``."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        if not SWEEP_NAME.fullmatch(str(name_or_path)):
            raise SweepError(f"{str(name_or_path)!r} is not a sweep name: give the name of a sweep file in "
                             f"{sweeps_dir()} (letters, digits, '.', '_', '-'; no folder) or the path of a .yaml "
                             f"file, e.g. {str(name_or_path).rstrip('/')}.yaml")
        p = sweeps_dir() / f"{name_or_path}.yaml"
        if not p.is_file():
            avail = list_sweeps()
            close = difflib.get_close_matches(str(name_or_path), avail, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepError(f"no sweep named {str(name_or_path)!r} in {sweeps_dir()}{hint}; available: {avail}")
    if not p.is_file():
        raise SweepError(f"{p}: sweep file not found")
    p = p.resolve()
    data = read_yaml(p)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SweepError(format_validation_error(e, str(p), model=SweepSpec)) from None
    if spec.name is not None and spec.name != p.stem:
        raise SweepError(f"{p}: name: {spec.name!r} differs from the file name {p.stem!r}; "
                         f"rename the file or set name: {p.stem}")
    spec.name = p.stem
    spec._path = p
    _check_templates(spec)
    scales = load_scales(scales_path_for(p))
    check_scale_overrides(spec, scales)
    _check_seeding(spec, scales)
    if spec.ladder is not None:
        _add_rungs(spec, scales)
    tuning_section.check_tuning(spec, {**scales, **spec._rungs})
    check_confirmation(spec, scales)
    return spec


def _add_rungs(spec: SweepSpec, scales: dict[str, ScaleSpec]) -> None:
    """The ladder's rungs as scales of ``spec`` (``SweepSpec.all_scales``), after its checks; what each
    takes from the base scale's entries in the file is ``ladder_section.rung_entries``'s rule."""
    ladder = spec.ladder
    values: dict[str, list] = {k: list(v) for k, v in spec.top_axes().items()}
    for v in spec.variants:
        for k, vals in v.axes.items():
            values.setdefault(k, []).extend(vals)
    for per_scale in spec.scales.values():
        for k, vals in per_scale.items():
            values.setdefault(k, []).extend(vals)
    values["group"] = [v.group for v in spec.variants]
    check_ladder(ladder, f"{spec.source}", scales, values)
    if ladder.budget and spec.confirmation is None:
        raise SweepError(f"{spec.source}: ladder.budget: a rung's confirmation stage takes its level and primary claim "
                         f"from the file's confirmation: section, which is missing; add one or remove ladder.budget")
    spec._rungs = rung_scales(ladder, scales, spec.task, ladder_params(spec, scales))


def _check_seeding(spec: SweepSpec, scales: dict[str, ScaleSpec]) -> None:
    """``seeding.max_seeds``: known scales, each at least the seeds the grid runs there;
    ``seeding.alpha_split``: known scales with a budget, one level per planned look of the file's
    own seed axis there (the sum is checked with the file: ``Seeding``)."""
    if spec.seeding is None:
        return

    def seeds_at(name: str) -> list:
        return (spec.entry("scales", name) or {}).get("seed", spec.axes.seed)

    for name, top in spec.seeding.max_seeds.items():
        if name not in scales:
            raise SweepError(f"{spec.source}: seeding.max_seeds.{name}: unknown scale; choose one of {sorted(scales)}")
        seeds = seeds_at(name)
        if top < len(seeds):
            raise SweepError(f"{spec.source}: seeding.max_seeds.{name}: {top} is fewer than the {len(seeds)} seeds "
                             f"{seeds} the grid runs at {name}; give at least {len(seeds)} (or fewer seeds)")
    for name in spec.seeding.alpha_split:
        if name not in scales:
            raise SweepError(f"{spec.source}: seeding.alpha_split.{name}: unknown scale; choose one of "
                             f"{sorted(scales)}")
        if spec.seeding.max_seeds.get(name, spec.seeding.max_seeds.get(scales[name].like or "")) is None:
            raise SweepError(f"{spec.source}: seeding.alpha_split.{name}: {name} has no seed budget "
                             f"(seeding.max_seeds.{name}), so it plans one look at the full alpha; remove "
                             f"alpha_split.{name} or give max_seeds.{name}")
        try:
            spec.seeding.alphas(name, [int(s) for s in seeds_at(name)], scales[name].like, strict=True)
        except ValueError as e:
            raise SweepError(f"{spec.source}: {e}") from None


def _check_templates(spec: SweepSpec) -> None:
    src = spec.source
    top = set(spec.top_axes())
    for i, v in enumerate(spec.variants):
        known = top | set(v.axes)
        where = f"variants[{i}] (group {v.group})"
        for key, text in [("label", v.label)] + [(f"set.{k}", val) for k, val in v.set.items()]:
            unknown = template_names(text) - known
            if unknown:
                raise SweepError(
                    f"{src}: {where}.{key}: template names unknown axis {sorted(unknown)}; "
                    f"use one of {sorted(known)} or add the axis to this variant's axes")
        for path, _ in leaves(nest(v.set, src)):
            for axis, target in AXIS_TARGETS.items():
                if axis in top and path == target:
                    raise SweepError(f"{src}: {where}.set.{'.'.join(path)} conflicts with the top-level '{axis}' "
                                     f"axis, which sets {'.'.join(target)}; remove one of them")
        used_in_set = template_names(v.set)
        used_in_label = template_names(v.label)
        for axis in v.axes:
            if axis not in used_in_set:
                raise SweepError(f"{src}: {where}.axes.{axis} is used in no 'set' value, so its cells would "
                                 f"be identical runs; use it in set (e.g. model.attn_steps: \"{{{axis}}}\") or remove it")
            if axis not in used_in_label:
                raise SweepError(f"{src}: {where}.axes.{axis} does not appear in the label {v.label!r}, so its "
                                 f"cells would share a legend label; add {{{axis}}} to the label")
