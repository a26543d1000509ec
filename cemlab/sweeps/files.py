"""Finding and reading the sweep folder's files: ``sweeps/<name>.yaml`` and ``scales.yaml``.

:func:`sweeps_dir` is the folder; :func:`load_scales` reads and checks ``scales.yaml`` (every
size's model config is validated); a sweep file is read by ``cemlab.sweeps.spec.load_sweep``.
Every problem raises ``SweepError`` naming the file, the key and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cemlab.config import RunConfig
from cemlab.sweeps.errors import format_validation_error
from cemlab.sweeps.layers import merge_dicts, nest
from cemlab.sweeps.schema import TOP_AXES, Axes, ScaleSpec, SweepError


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
        return list(read_yaml(sweeps_dir() / "scales.yaml"))
    except SweepError:
        return []


def read_yaml(path: Path) -> dict[str, Any]:
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
    data = read_yaml(p)
    for name, raw in list(data.items()):
        parent = raw.get("like") if isinstance(raw, dict) else None
        if parent is None:
            continue
        if parent not in data or not isinstance(data[parent], dict) or data[parent].get("like"):
            raise SweepError(f"{p}: {name}.like: {parent!r} must name a scale of this file that is not itself a "
                             f"variant (choose among {sorted(k for k, v in data.items() if not v.get('like'))})")
        data[name] = merge_dicts(data[parent], raw)
    scales: dict[str, ScaleSpec] = {}
    for name, raw in data.items():
        try:
            scales[name] = ScaleSpec.model_validate(raw)
        except ValidationError as e:
            raise SweepError(format_validation_error(e, f"{p}", prefix=(name,), model=ScaleSpec)) from None
        for size, spec in scales[name].sizes.items():
            cfg = merge_dicts(nest(scales[name].lm.base, f"{p}: {name}.lm.base"),
                               {"model": {**spec.model, "name": size}, "train": spec.train})
            try:
                RunConfig.model_validate(cfg)
            except ValidationError as e:
                raise SweepError(format_validation_error(e, f"{p}", prefix=(name, "sizes", size),
                                                  model=RunConfig)) from None
    return scales


def check_scale_overrides(spec, scales: dict[str, ScaleSpec]) -> None:
    """The per-scale axis values of the sweep file ``spec`` (a ``SweepSpec``): known scales and axes, valid values."""
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
                    raise SweepError(format_validation_error(e, src, prefix=("scales", scale), model=Axes)) from None
