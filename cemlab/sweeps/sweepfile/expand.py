"""Expanding a sweep file at a scale into its grid of fully resolved :class:`Trial`.

``SweepSpec.expand(scale)`` multiplies the sizes, variants and axes into a deterministic list of
trials (:func:`expand_spec`), each with a validated ``RunConfig`` built from config layers, later wins:
scale ``<task>.base`` < the size's ``model``/``train`` < sweep ``base`` < variant ``set`` < the axes
(lr, seed) < command-line overrides (:func:`with_overrides`) < tracking names. A trial's id is
``<size>__<label>__lr<lr>__s<seed>``; its config hash is its identity in the store.

``search: optuna``: a cell's sampled learning rate is :func:`trial_with_lr` (same naming, its own
hash); :func:`sampled_trials` finds a cell's sampled trials among the runs of a store.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from cemlab.config import RunConfig, parse_override
from cemlab.sweeps.sweepfile.errors import explain_config_error, format_validation_error
from cemlab.sweeps.sweepfile.files import scales_path_for, check_scale_overrides
from cemlab.sweeps.sweepfile.ladder_section import excluded
from cemlab.sweeps.sweepfile.layers import leaves, merge_dicts, nest, render
from cemlab.sweeps.sweepfile.schema import (AXIS_TARGETS, TOP_AXES, Axes, LrSearch, ScaleSpec, SweepError, TaskScale, Trial,
                                  Variant)
from cemlab.tasks import format_lr, get_task
from cemlab.tracking import schema

if TYPE_CHECKING:
    from cemlab.tracking.runs import RunRecord, RunStore

#: Where command-line overrides are said to come from in error messages.
CLI_SOURCE = "command line"


def with_overrides(spec, scale: str, scales: dict[str, ScaleSpec],
                    overrides: list[str]) -> tuple[Any, list[tuple[str, dict[str, Any]]]]:
    """For the sweep file ``spec`` (a ``SweepSpec``): split ``key=value`` overrides into axis values (a copy of ``spec`` whose ``scales[scale]``
    lists them) and config layers ``(text, nested dict)`` applied last to every trial."""
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
                    raise SweepError(format_validation_error(e, f"{CLI_SOURCE}: {text!r}", model=Axes)) from None
            axis_values[key] = values
            continue
        for axis, target in AXIS_TARGETS.items():
            if tuple(path) == target and axis in spec.top_axes():
                raise SweepError(f"{CLI_SOURCE}: {text!r} sets {key}, which the sweep's {axis!r} axis sets for each "
                                 f"trial; override the axis instead: {axis}=[{value}]")
        layers.append((f"{CLI_SOURCE}: {text}", nest({key: value}, CLI_SOURCE)))
    if not axis_values:
        return spec, layers
    out = spec.model_copy(deep=True)
    out._path = spec._path
    out._cli_axes = frozenset(axis_values)
    out.scales = {**out.scales, scale: {**(spec.entry("scales", scale) or {}), **axis_values}}  # a like scale: its values
    try:
        check_scale_overrides(out, scales)
    except SweepError as e:  # name the command line, not the sweep file
        raise SweepError(str(e).replace(f"{spec.source}: scales.{scale}.", f"{CLI_SOURCE}: ")
                         .replace(spec.source, CLI_SOURCE).replace(f"scales.{scale}.", "")) from None
    return out, layers


def _slug(text: str) -> str:
    s = re.sub(r"\s+", "_", text.strip())
    s = re.sub(r"[^A-Za-z0-9._-]", "-", s)
    return s.strip("_-") or "x"


def expand_spec(spec, scale_name: str, scale: ScaleSpec,
            cli_layers: list[tuple[str, dict[str, Any]]] | None = None) -> list[Trial]:
    src = spec.source
    scales_src = str(scales_path_for(spec._path))
    overrides = spec.entry("scales", scale_name) or {}
    task_scale: TaskScale = scale.section(spec.task)
    top = {k: list(overrides.get(k, v)) for k, v in spec.top_axes().items()}
    if get_task(spec.task).sized:
        for s in top["size"]:
            if s not in scale.sizes:
                raise SweepError(
                    f"{src}: axes.size: size {s!r} is not defined at scale {scale_name!r}; define it under "
                    f"{scale_name}.sizes in {scales_src} or choose among {sorted(scale.sizes)}")

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
                        if scale.exclude and excluded({**values, "group": variant.group}, scale.exclude):
                            continue  # a ladder rung leaves this cell out (ladder.exclude)
                        trial = _make_trial(spec, scale_name, scale, task_scale, vi, variant, values,
                                            src, scales_src, search, cli_layers or [])
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


def _make_trial(spec, scale_name: str, scale: ScaleSpec, task_scale: TaskScale, vi: int,
                variant: Variant, values: dict[str, Any], src: str, scales_src: str,
                search: LrSearch | None = None, cli_layers: list[tuple[str, dict[str, Any]]] = ()) -> Trial:
    where = f"variants[{vi}] (group {variant.group})"
    label = render(variant.label, values)
    size = values.get("size")

    # Layers, later wins; provenance remembers which file/key set each leaf for error messages.
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"{scales_src}: {scale_name}.{spec.task}.base", nest(task_scale.base, scales_src)),
    ]
    if size is not None:
        s = scale.sizes[size]
        layers.append((f"{scales_src}: {scale_name}.sizes.{size}",
                       {"model": {**s.model, "name": size}, "train": dict(s.train)}))
    layers.append((f"{src}: base", nest(spec.base, src)))
    layers.append((f"{src}: {where}.set", nest(render(variant.set, values), src)))
    axis_layer: dict[str, Any] = {"task": spec.task}
    for axis, (sec, key) in AXIS_TARGETS.items():
        if axis in values:
            axis_layer.setdefault(sec, {})[key] = values[axis]
    layers.append((f"{src}: axes", axis_layer))
    layers.extend(cli_layers)

    data: dict[str, Any] = {}
    provenance: dict[tuple, str] = {}
    for name, layer in layers:
        data = merge_dicts(data, layer)
        for path, _ in leaves(layer):
            provenance[path] = name

    # Trial id and tracking names (tracking is left out of the config hash).
    trial_id = _trial_id(size, label, values)
    axes: dict[str, Any] = {"size": size} if size is not None else {}
    axes.update(group=variant.group, variant=label)
    if "lr" in values:
        axes["lr"] = values["lr"]
    axes["seed"] = values["seed"]
    axes.update({k: v for k, v in values.items() if k not in TOP_AXES})
    tags = _tracking_tags(spec, scale_name, trial_id, variant.group, label, size, axes, search, cli_layers)
    if scale.rung is not None:
        tags[schema.RUNG] = f"{scale.rung:g}"
    data["tracking"] = merge_dicts(data.get("tracking", {}),
                                   {"experiment": f"cemlab/{spec.name}", "run_name": trial_id, "tags": tags})

    context = f"{src}: {where} at scale {scale_name!r} ({_describe(values)})"
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as e:
        raise SweepError(explain_config_error(e, context, provenance)) from None
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
    resources = task_scale.resources
    return Trial(sweep=spec.name, figure=spec.figure, scale=scale_name, trial_id=trial_id, group=variant.group,
                 variant=label, size=size or "", axes=axes, config=config, config_hash=h, task=spec.task,
                 resources=resources, search=search, seeds_given="seed" in spec._cli_axes)


def _tracking_tags(spec, scale_name: str, trial_id: str, group: str, label: str, size: str | None,
                   axes: dict[str, Any], search: LrSearch | None,
                   cli_layers: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The MLflow tags of a trial's run: sweep, figure, scale, trial, group, variant, task, its
    search cell and overrides, and one tag per axis."""
    tags = {schema.SWEEP: spec.name, schema.FIGURE: spec.figure, schema.SCALE: scale_name,
            schema.TRIAL_ID: trial_id, schema.GROUP: group, schema.VARIANT: label,
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
    return tags


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


def sampled_trials(store: "RunStore", cell: Trial) -> list[tuple[Trial, list["RunRecord"]]]:
    """A ``search: optuna`` grid cell (a ``Trial`` of ``expand``) as its sampled trials in ``store``
    (a ``cemlab.tracking.runs.RunStore``), each with its runs (newest first), by learning rate;
    ``[(cell, [])]`` when the cell has no run. A sampled trial is the one :func:`trial_with_lr` makes
    for the run's learning rate (tag ``cemlab.axis.lr``), taken only if its config hash is the
    run's: runs of an older version of the sweep file are not mixed in."""
    out = []
    for h, runs in store.search_cell_runs(cell.sweep, cell.scale, cell.trial_id).items():
        lr = runs[0].tags.get(schema.axis_tag("lr"))
        if lr is None:
            continue
        trial = trial_with_lr(cell, float(lr))
        if trial.config_hash == h:
            out.append((trial, runs))
    out.sort(key=lambda p: p[0].axes["lr"])
    return out or [(cell, [])]


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
