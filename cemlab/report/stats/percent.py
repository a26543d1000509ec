"""The one way the report writes a relative change or a level in percent (a table, a page, a figure's words)."""

from __future__ import annotations

import math


def percent(x: float, digits: int = 1, log: bool = False, unit: str = "%", missing: str = "n/a") -> str:
    """``x`` as a signed percentage, e.g. ``+19.0%``: ``log``: ``x`` is a log ratio, shown as the relative
    change exp(x) - 1 it is; else ``x`` already is a relative change. ``missing`` for a value that is not
    finite."""
    if x is None or not math.isfinite(x):
        return missing
    return f"{(math.expm1(x) if log else x) * 100:+.{digits}f}{unit}"


def level_percent(level: float, missing: str = "n/a") -> str:
    """A coverage (e.g. an interval's level) as a reader reads it: in percent with at most two decimals,
    trailing zeros dropped (0.95 -> ``95%``, 0.975 -> ``97.5%``, 0.964375 -> ``96.44%``); more only
    where two would round a level below 1 up to ``100%``. The CSV files keep the exact value; ``missing``
    for a value that is not finite."""
    if level is None or not math.isfinite(level):
        return missing
    for digits in range(2, 9):
        text = f"{level * 100:.{digits}f}"
        if level >= 1 or float(text) < 100:
            break
    return text.rstrip("0").rstrip(".") + "%"
