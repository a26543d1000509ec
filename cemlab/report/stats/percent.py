"""The one way the report writes a relative change in percent (a table, a page, a figure's words)."""

from __future__ import annotations

import math


def percent(x: float, digits: int = 1, log: bool = False, unit: str = "%", missing: str = "n/a") -> str:
    """``x`` as a signed percentage, e.g. ``+19.0%``: ``log``: ``x`` is a log ratio, shown as the relative
    change exp(x) - 1 it is; else ``x`` already is a relative change. ``missing`` for a value that is not
    finite."""
    if x is None or not math.isfinite(x):
        return missing
    return f"{(math.expm1(x) if log else x) * 100:+.{digits}f}{unit}"
