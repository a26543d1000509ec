"""Error messages for sweep and scales files: a pydantic ``ValidationError`` as lines that name the
file, the key path and the fix ("unknown key; did you mean ...?"), and for a trial's run config,
the file and key that set each offending field.
"""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, ValidationError

from cemlab.config import RunConfig
from cemlab.models.config import input_keys


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
    return input_keys(node) if node is not None and hasattr(node, "model_fields") else []


#: The fix of a value out of a field's bounds, from pydantic's error type and its context.
_BOUND_FIX = {"less_than_equal": "at most {le}", "less_than": "below {lt}", "greater_than": "above {gt}",
              "greater_than_equal": "at least {ge}"}


def _key_path(loc: tuple) -> str:
    """``("variants", 0, "axes")`` -> ``variants[0].axes`` (a union's member names, such as
    ``constrained-float``, are left out: they are no key of the file)."""
    out = ""
    for part in loc:
        if isinstance(part, str) and (part.startswith(("constrained-", "literal[")) or part in ("int", "float", "bool", "str")):
            continue
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
    if err["type"] in _BOUND_FIX:
        msg += f"; set it {_BOUND_FIX[err['type']].format(**err.get('ctx', {}))}"
    elif err["type"] == "finite_number":
        msg += "; NaN and infinity are no values here: give a finite number"
    return f"  - {path}: {msg}"


def _relevant(errors: list[dict]) -> list[dict]:
    """Pydantic's errors without the noise of unions: where a value breaks a bound or is not
    finite, the other members' type errors at that key (``Input should be '1/T' or 'learned'``)
    are left out, and a line said twice is said once."""
    bounded = {_key_path(tuple(err["loc"])) for err in errors
               if err["type"] in _BOUND_FIX or err["type"] == "finite_number"}
    out, seen = [], set()
    for err in errors:
        key = _key_path(tuple(err["loc"]))
        if key in bounded and err["type"] not in _BOUND_FIX and err["type"] != "finite_number":
            continue
        if (key, err["type"]) not in seen:
            seen.add((key, err["type"]))
            out.append(err)
    return out


def format_validation_error(e: ValidationError, source: str, prefix: tuple = (), model: type[BaseModel] | None = None) -> str:
    return "\n".join([f"{source}: invalid"] + [_error_line(err, model, prefix) for err in _relevant(e.errors())])


def explain_config_error(e: ValidationError, context: str, provenance: dict[tuple, str],
                          prefix: tuple = ()) -> str:
    """A RunConfig/GPConfig error, with the file and key that set each offending field."""
    lines = [f"{context}: invalid run config"]
    for err in _relevant(e.errors()):
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
