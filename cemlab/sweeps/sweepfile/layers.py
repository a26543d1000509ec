"""Config layers and axis templates of a sweep file: dotted keys nested (``model.attn_steps: 2``),
layers merged (later wins), ``{axis}`` templates found and filled.
"""

from __future__ import annotations

import copy
import re
import string
from typing import Any

from cemlab.sweeps.sweepfile.schema import SweepError


def nest(flat: dict[str, Any], where: str) -> dict[str, Any]:
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
            value = nest(value, where)
            if isinstance(node.get(leaf), dict):
                value = merge_dicts(node[leaf], value)
        node[leaf] = value
    return out


def merge_dicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Deep merge; ``b`` wins. Neither input is modified."""
    out = copy.deepcopy(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_dicts(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def leaves(d: dict[str, Any], prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.extend(leaves(v, prefix + (k,)))
        else:
            out.append((prefix + (k,), v))
    return out


def template_names(value: Any) -> set[str]:
    """The ``{names}`` a value's templates use (recursing into lists and dicts)."""
    if isinstance(value, str):
        try:
            return {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(value) if f}
        except ValueError:
            return set()  # unbalanced braces: a literal string
    if isinstance(value, dict):
        return set().union(*(template_names(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(template_names(v) for v in value)) if value else set()
    return set()


def render(value: Any, values: dict[str, Any]) -> Any:
    """Fill ``{axis}`` templates: ``"{T}"`` alone keeps the value's type, otherwise str.format."""
    if isinstance(value, str):
        m = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", value)
        if m:
            return values[m.group(1)]
        if not template_names(value):
            return value
        return value.format(**values)
    if isinstance(value, dict):
        return {k: render(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, values) for v in value]
    return value
