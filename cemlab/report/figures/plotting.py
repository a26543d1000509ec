"""What every report figure is built with: the ``Figure`` a builder returns, the paper's colours
and markers, and small plotting and table helpers.

matplotlib is imported on first use (``pyplot``), so that importing the report (and ``cemlab
--help``) stays fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cemlab.models.preconditioners import PRECONDITIONERS
from cemlab.report.inputs.table import best_lr

#: Every colour a figure draws with and the word its caption uses for it: captions name colours
#: from this table (``color_name``), so a caption says what the plot draws.
COLOR_NAMES = {
    "#d6679b": "pink", "#3b75af": "blue", "#ef8636": "orange", "#7f7f7f": "grey", "#2ca02c": "green",
    "#9467bd": "purple", "#d62728": "red", "#8c564b": "brown", "#17becf": "cyan", "#bcbd22": "olive",
    "#1f3a93": "navy", "#111111": "black",
}
LLAMA_COLOR = "#d6679b"      # paper Fig. 2: pink diamonds
CEM_COLOR = "#3b75af"        # blue dots
MATCHED_COLOR = "#ef8636"    # orange triangles (parameter-matched)
T1_COLOR = "#ef8636"         # Fig. 3c/4: T=1 orange, T=2 blue
T2_COLOR = "#3b75af"
LR_LLAMA_COLOR = "#ef8636"   # Fig. 3a: Llama orange, CEM blue
#: By registry order (none, diag, dplr, then plugins); a kind beyond the palette gets a spare colour.
PRECOND_COLORS = dict(zip(PRECONDITIONERS.names(), ["#7f7f7f", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]))
SETTING_FILL = {"plain reuse": "#fbd7b5", "CEM dim-matched": "#c6dbef", "CEM": "#c6dbef",
                "CEM param-matched": "#f4c6dc"}
SIZE_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h"]
#: Colours for lines that have no colour of their own, each with a distinct name, in order of use.
PALETTE = ["#3b75af", "#ef8636", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#d6679b", "#7f7f7f", "#bcbd22",
           "#17becf", "#1f3a93", "#111111"]
CYCLE = PALETTE
#: Line styles by the word captions use, in order of use once the palette's colours are spent.
LINESTYLES = {"solid": "-", "dashed": "--", "dotted": ":", "dash-dot": "-."}


def color_name(color: str) -> str:
    """The word for a colour of :data:`COLOR_NAMES` (its hex code for any other)."""
    return COLOR_NAMES.get(color.lower(), color)


def style_name(ls: str) -> str:
    """The word for a matplotlib line style of :data:`LINESTYLES`."""
    return next((name for name, code in LINESTYLES.items() if code == ls), ls)


@dataclass(frozen=True)
class LineStyle:
    """A line's colour and dash, as drawn and as a caption names them."""

    color: str
    ls: str = "-"

    @property
    def words(self) -> str:
        return f"{style_name(self.ls)} {color_name(self.color)}"


def line_styles(n: int, avoid: tuple[str, ...] = ()) -> list[LineStyle]:
    """``n`` distinct (colour, line style) pairs: every colour of :data:`PALETTE` not in ``avoid``
    (colours by name: a figure's fixed colours) solid, then again dashed, dotted, dash-dot."""
    names = {color_name(c) for c in avoid}
    colors = [c for c in PALETTE if color_name(c) not in names]
    dashes = list(LINESTYLES.values())
    return [LineStyle(colors[i % len(colors)], dashes[(i // len(colors)) % len(dashes)]) for i in range(n)]


def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """``pyplot().subplots`` with constrained layout, which makes room for legends outside the axes."""
    return pyplot().subplots(nrows, ncols, layout="constrained", **kw)


def legend_outside(ax, **kw):
    """The axes' legend to the right of its data area (constrained layout keeps it in the figure)."""
    kw.setdefault("fontsize", 7)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def fmt_params(n: float) -> str:
    return f"{n / 1e6:.3g}M" if finite(n) else "?"


def size_title(size: str, params) -> str:
    """A panel's title: the paper's size name and the parameter count of the models it shows
    (the size names the paper's model; a smaller scale trains smaller models under that name)."""
    p = sorted({float(x) for x in params if finite(x)})
    if not p:
        return f"size {size}"
    counts = fmt_params(p[0]) if len(p) == 1 or fmt_params(p[0]) == fmt_params(p[-1]) else \
        f"{fmt_params(p[0])}-{fmt_params(p[-1])}"
    return f"size {size}: models of {counts} params"


def baseline_band(ax, mean: float, std: float, color: str, label: str = "Llama", lw: float = 1.5):
    """A baseline as a dashed line at its seed mean with a band of +- its seed std (when known)."""
    ax.axhline(mean, ls="--", color=color, lw=lw, label=label)
    if finite(std) and std > 0:
        ax.axhspan(mean - std, mean + std, color=color, alpha=0.15, lw=0)


#: At most this many points of a ``train/loss`` history go into the CSV and plot (evenly spaced,
#: first and last kept), so that a paper-scale sweep's report stays small.
MAX_CURVE_POINTS = 200
#: Fig. 3a labels each learning rate of a grid as a tick; with more (Optuna samples), a log axis.
MAX_LR_TICKS = 8


@dataclass
class Figure:
    """One figure or table of the report."""

    id: str                                   # file stem: fig2a, table3, energy, ...
    title: str
    caption: str
    tables: dict[str, pd.DataFrame]           # CSV stem -> data (the first is the figure's data)
    fig: object | None = None                 # matplotlib Figure, or None for a table only
    show_tables: list[str] = field(default_factory=list)  # tables also shown on the page



def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(x)


def lr_reduced(cells: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Cells at their best learning rate when the sweep has several, else unchanged."""
    if cells.empty or cells["lr"].nunique() <= 1:
        return cells.assign(n_lr=1)
    return best_lr(cells, by)


def cell_sizes(cells: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(cells.sort_values("order")["size"]))


def fmt_tokens(n: float) -> str:
    if not finite(n):
        return ""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit} tok"
    return f"{n:.0f} tok"


def errorbar(ax, x, mean, std, **kw):
    std = np.where(np.isfinite(std), std, 0.0)
    return ax.errorbar(x, mean, yerr=std, capsize=3, **kw)


def cell_columns(df: pd.DataFrame, extra: list[str] = ()) -> pd.DataFrame:
    """The CSV columns every figure's data shares."""
    cols = ["size", "family", "group", "variant", *extra, "lr", "mean", "std", "n", "n_expected", "note",
            "params_total", "token_budget"]
    cols = list(dict.fromkeys(c for c in cols if c in df.columns))
    return df[cols].reset_index(drop=True)

