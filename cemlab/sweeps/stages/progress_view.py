"""How the sweep's live table fits a terminal: short labels that tell trials apart, columns kept
by priority and never cut, and as many rows as the height allows (``cemlab.sweeps.stages.progress``
holds the state; this module only lays it out).

* **Labels.** A trial id (``86m__cem-attn_T2_dplr_eta-1-T__lr2e-3__s2``) is long; the label is the
  variant's legend name plus the axes that vary across the sweep's trials and that the name does
  not already say (``cem-attn T2 dplr eta=1/T s2``; the size in front when sizes vary).
* **Columns.** Each column is as wide as its widest cell. Columns join in priority order (label,
  status, step, test and validation metric, time, loss, trial id) while the table fits the width;
  a number is never cut. Only the label may be shortened (with an ellipsis), when even the first
  five columns do not fit.
* **Rows.** When the rows do not fit the height, running, retrying and failed trials show first,
  then the most recently ended, then the next queued, in grid order, with one line counting the
  rest by status; the progress line (count, elapsed, time left) is always the last line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

#: Axes never put in a label (size is put first when it varies; group and variant are the name).
_NOT_IN_LABEL = ("size", "group", "variant")


def _value(v: Any) -> str:
    """An axis value, short: ``2e-3``, ``1.53e-3``, ``0.5``, ``dplr``."""
    if isinstance(v, float) and v != 0 and not 1e-2 <= abs(v) < 1e4:
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def trial_labels(trials: Sequence[Any]) -> dict[str, str]:
    """trial id -> a short label that tells it apart from the other trials (module docstring)."""
    varying: list[str] = []
    for t in trials:
        for k in t.axes:
            if k not in _NOT_IN_LABEL and k not in varying and len({str(u.axes.get(k)) for u in trials}) > 1:
                varying.append(k)
    sizes = len({t.size for t in trials}) > 1
    labels = {}
    for t in trials:
        name = t.variant or t.group or t.trial_id
        words = name.split()
        parts = [t.size] if sizes and t.size else []
        parts.append(name)
        for k in varying:
            if k not in t.axes:
                continue
            v = _value(t.axes[k])
            if k == "seed":
                parts.append(f"s{v}")
            elif not {f"{k}={v}", f"{k}{v}", v} & set(words):  # the name says it already (eta=0.5, T2, dplr)
                parts.append(f"{k}={v}")
        labels[t.trial_id] = " ".join(parts)
    if len(set(labels.values())) < len(labels):  # a sweep whose names do not tell trials apart
        return {t.trial_id: t.trial_id for t in trials}
    return labels


@dataclass
class Column:
    """One column: header, alignment, the cell of a row (text or rich ``Text``), and its priority
    (lower joins first; the first five by priority always show)."""

    header: str
    justify: str
    cell: Callable[[Any], Any]
    priority: int


def _width(cells: list, header: str) -> int:
    return max([len(header)] + [len(c.plain if isinstance(c, Text) else c) for c in cells])


#: Space between two columns: one padding character each side of a blank divider.
GAP = 3


def fit_columns(columns: list[Column], rows: list, width: int) -> Table:
    """The table of ``rows`` with as many of ``columns`` as fit ``width``, joined by priority and
    shown in list order; the first column is the label, the only one that may be shortened."""
    cells = [[c.cell(r) for r in rows] for c in columns]
    widths = [_width(cs, c.header) for c, cs in zip(columns, cells)]
    by_priority = sorted(range(len(columns)), key=lambda i: columns[i].priority)
    kept = by_priority[:5]

    def used(keep: list[int]) -> int:
        return sum(widths[i] for i in keep) + GAP * (len(keep) - 1)

    for i in by_priority[5:]:
        if used(kept + [i]) <= width:
            kept.append(i)
    kept.sort()
    label_width = widths[0] if used(kept) <= width else max(8, widths[0] - (used(kept) - width))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False, padding=(0, 1))
    for i in kept:
        w = label_width if i == 0 else widths[i]
        table.add_column(columns[i].header, justify=columns[i].justify, no_wrap=True, min_width=w, max_width=w,
                         overflow="ellipsis")
    for j in range(len(rows)):
        table.add_row(*(cells[i][j] for i in kept))
    return table


def choose_rows(rows: list, limit: int, active: Callable[[Any], bool], ended_at: Callable[[Any], float | None],
                queued: Callable[[Any], bool]) -> list:
    """At most ``limit`` rows, in their order: active ones first, then the most recently ended,
    then the next queued."""
    if len(rows) <= limit:
        return rows
    first = [r for r in rows if active(r)]
    recent = sorted((r for r in rows if not active(r) and ended_at(r) is not None), key=ended_at, reverse=True)
    later = [r for r in rows if queued(r)]
    keep = {id(r) for r in (first + recent + later)[:max(0, limit)]}
    return [r for r in rows if id(r) in keep]


def fit_height(console: Console, build: Callable[[int], Group], n_rows: int, height: int) -> Group:
    """``build(limit)`` with the largest row limit whose render fits ``height`` lines."""
    limit = n_rows
    while True:
        group = build(limit)
        lines = len(console.render_lines(group, console.options.update(height=None), pad=False))
        if lines <= height or limit == 0:
            return group
        limit = max(0, limit - (lines - height))


def looks_made(result) -> list[str]:
    """One line per bracketing step and seed look the sweep made (``SweepResult.brackets``,
    ``SweepResult.looks``), in the order they ran, e.g. ``bracketing step 0: 3 of 9 cells best at an
    edge got the rate beyond it (3 trials)``."""
    lines = []
    for b in getattr(result, "brackets", None) or []:
        cells = b.get("cells", [])
        n = len(cells) if isinstance(cells, list) else int(cells)
        moved = sum(1 for c in cells if c.get("added_lr") is not None) if isinstance(cells, list) else "?"
        lines.append(f"bracketing step {b.get('step', '?')}: {moved} of {n} cells best at an edge got the rate "
                     f"beyond it ({b.get('added', 0)} trials)")
    conf = getattr(result, "confirmation", None) or {}
    if conf:
        lines.append(f"confirmation: {conf.get('pairs', '?')} (cell, rate) pairs x {conf.get('seeds', '?')} fresh seeds, "
                     f"{len(conf.get('extra_seeds', []))} extra for {conf.get('primary') or 'none'} "
                     f"({conf.get('added', 0)} trials; {conf.get('spent', '?')} on the selection seeds, budget "
                     f"{conf.get('budget', '?')})")
    for lk in getattr(result, "looks", None) or []:
        cells = lk.get("open_cells", [])
        n = len(cells) if isinstance(cells, list) else int(cells)
        lines.append(f"look {lk.get('index', '?')} on seeds {','.join(map(str, lk.get('seeds', [])))}: "
                     f"{len(lk.get('open_claims', []))} claim condition(s) open, {n} cell(s) got "
                     f"{lk.get('added', 0)} trials")
    return lines
