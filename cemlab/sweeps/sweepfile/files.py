"""Finding and reading the sweep folder's files: ``sweeps/<name>.yaml`` and ``scales.yaml``.

:func:`sweeps_dir` is the folder; :func:`load_scales` reads and checks ``scales.yaml`` (every
size's model config is validated); a sweep file is read by ``cemlab.sweeps.sweepfile.load.load_sweep``.
Every problem raises ``SweepError`` naming the file, the key and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cemlab.config import RunConfig
from cemlab.sweeps.sweepfile.errors import format_validation_error
from cemlab.sweeps.sweepfile.layers import merge_dicts, nest
from cemlab.sweeps.sweepfile.schema import TOP_AXES, Axes, ScaleSpec, SweepError
from cemlab.tasks import TASKS


def sweeps_dir() -> Path:
    """The project's sweep folder: ``$CEMLAB_SWEEPS_DIR``, else ``./sweeps`` when it holds a
    ``scales.yaml``, else the ``sweeps`` folder of the repository this package lives in."""
    env = os.environ.get("CEMLAB_SWEEPS_DIR")
    if env:
        return Path(env).expanduser().resolve()
    local = Path.cwd() / "sweeps"
    if (local / "scales.yaml").is_file():
        return local.resolve()
    return Path(__file__).resolve().parents[3] / "sweeps"


def scales_path_for(sweep_path: Path | None) -> Path:
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


class _DuplicateKey(Exception):
    def __init__(self, key, line: int, first: int):
        super().__init__(key, line, first)
        self.key, self.line, self.first = key, line, first


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``, except that a key given twice in one mapping is an error (YAML keeps
    the last one silently, so a second ``task:`` would quietly replace the first)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        try:
            if key in seen:
                raise _DuplicateKey(key, line, seen[key])
            seen[key] = line
        except TypeError:  # an unhashable key: YAML's own error follows
            continue
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping; :class:`SweepError` naming the file for a file that is not
    UTF-8 text, not YAML, or gives a key twice in one mapping (with both lines)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not a UTF-8 text file (byte {e.start}: {e.reason}); a sweep or scales "
                         f"file is YAML text saved as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as e:
        raise SweepError(f"{path}: line {e.line}: key {e.key!r} is given twice in the same mapping (first at line "
                         f"{e.first}); keep one of them") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: the top level must be a mapping (keys figure, axes, variants, ...)")
    return data


#: Checked scales files by (path, content, registered tasks): a report or a driver reads the same
#: file dozens of times, and checking every size's config costs about 27 ms each time.
_SCALES_CACHE: dict[tuple[str, bytes, tuple], dict[str, ScaleSpec]] = {}


def load_scales(path: str | Path | None = None) -> dict[str, ScaleSpec]:
    """Read ``scales.yaml`` (default: the sweep folder's) and check every size's model config."""
    p = Path(path) if path else sweeps_dir() / "scales.yaml"
    if not p.is_file():
        raise SweepError(f"{p}: scales file not found; set CEMLAB_SWEEPS_DIR to a folder with scales.yaml")
    key = (str(p.resolve()), p.read_bytes(), tuple((n, id(t)) for n, t in TASKS.items()))
    if key not in _SCALES_CACHE:
        _SCALES_CACHE.clear()  # one file at a time is what a process reads
        _SCALES_CACHE[key] = _check_scales(p)
    return dict(_SCALES_CACHE[key])


def _check_scales(p: Path) -> dict[str, ScaleSpec]:
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
        _check_task_sections(p, name, raw)
        try:
            scales[name] = ScaleSpec.model_validate(raw)
        except ValidationError as e:
            raise SweepError(format_validation_error(e, f"{p}", prefix=(name,), model=ScaleSpec)) from None
        sized = [task for task, t in TASKS.items() if t.sized]  # the tasks whose sweeps list sizes
        for size, spec in scales[name].sizes.items():
            for task in sized:
                cfg = merge_dicts(nest(scales[name].section(task).base, f"{p}: {name}.{task}.base"),
                                  {"model": {**spec.model, "name": size}, "train": spec.train})
                try:
                    RunConfig.model_validate(cfg)
                except ValidationError as e:
                    raise SweepError(format_validation_error(e, f"{p}", prefix=(name, "sizes", size),
                                                             model=RunConfig)) from None
    return scales


def _check_task_sections(path: Path, scale: str, raw: Any) -> None:
    """Each task's section of a scale against the model its task names (``Task.scale_model``), so
    that an error names the key as the file has it (``tiny.gp.resources.workers``)."""
    if not isinstance(raw, dict):
        return
    for key, section in raw.items():
        if key not in ScaleSpec.model_fields and key in TASKS:
            model = TASKS.get(key).scale_model
            try:
                model.model_validate(section if section is not None else {})
            except ValidationError as e:
                raise SweepError(format_validation_error(e, f"{path}", prefix=(scale, key), model=model)) from None


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
    _check_sizes(spec, scales)


def _check_sizes(spec, scales: dict[str, ScaleSpec]) -> None:
    """Every size the sweep plans at a scale (its own list for that scale, else the one of the
    scale it is ``like``, else ``axes.size``) is defined at that scale, at every scale of the
    scales file: a typo in a size is named when the file is read, not at the scale that meets it."""
    for name, scale in scales.items():
        own = spec.entry("scales", name) or {}
        key = f"scales.{name}.size" if "size" in own else "axes.size"
        for size in own.get("size", spec.axes.size or []):
            if size not in scale.sizes:
                raise SweepError(f"{spec.source}: {key}: size {size!r} is not defined at scale {name!r}; choose "
                                 f"among {sorted(scale.sizes)} or define it under {name}.sizes in {scales_path_for(spec.path)}")
