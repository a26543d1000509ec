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

from cemlab.report.table import best_lr

LLAMA_COLOR = "#d6679b"      # paper Fig. 2: pink diamonds
CEM_COLOR = "#3b75af"        # blue dots
MATCHED_COLOR = "#ef8636"    # orange triangles (parameter-matched)
T1_COLOR = "#ef8636"         # Fig. 3c/4: T=1 orange, T=2 blue
T2_COLOR = "#3b75af"
LR_LLAMA_COLOR = "#ef8636"   # Fig. 3a: Llama orange, CEM blue
PRECOND_COLORS = {"none": "#7f7f7f", "diag": "#2ca02c", "dplr": "#9467bd"}
SETTING_FILL = {"plain reuse": "#fbd7b5", "CEM dim-matched": "#c6dbef", "CEM": "#c6dbef",
                "CEM param-matched": "#f4c6dc"}
SIZE_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h"]
CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
         "#bcbd22", "#17becf"]

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

