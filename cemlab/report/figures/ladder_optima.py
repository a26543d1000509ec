"""How each cell's learning-rate optimum moves with training length along a ladder: per cell and
rung, the rates it was tried at, its best rate, whether that is bracketed (``stats.bracketing``, as
the rung's ``cells.csv`` records it) and its Akima-interpolated optimum where three rates or more
bracket it (``figures.lr_tuning``). The ladder page (``pages.ladder_page``) shows the table and the
figure; each rung's own report has the cell's learning-rate curve."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.figures.plotting import Figure, subplots

COLUMNS = ["group", "variant", "size", "rung", "rung_scale", "lrs", "best_lr", "bracketed", "edge", "akima_lr",
           "akima_test"]


def optima_table(rungs: list) -> pd.DataFrame:
    """One row per tuned cell and rung (``Rung.cells``: the rung's cells.csv, one row per cell and
    rate with the cell's tuning columns), in group, variant and rung order."""
    rows = []
    for rg in rungs:
        cells = getattr(rg, "cells", None)
        if cells is None or cells.empty or "lr" not in cells:
            continue
        for (group, variant, size), g in cells.groupby(["group", "variant", "size"], sort=False):
            first = g.iloc[0] if "best_lr" in g else _tuned(g)
            bracketed = str(first["bracketed"]) == "True"
            rows.append(dict(group=group, variant=variant, size=size, rung=rg.rung, rung_scale=rg.scale,
                             lrs=" ".join(f"{x:g}" for x in sorted(g["lr"].astype(float))),
                             best_lr=float(first["best_lr"]), bracketed=bracketed,
                             edge="" if bracketed else str(first.get("edge", "")),
                             akima_lr=float(first.get("akima_lr", math.nan)),
                             akima_test=float(first.get("akima_test", math.nan))))
    return pd.DataFrame(rows, columns=COLUMNS)


def _tuned(g: pd.DataFrame) -> dict:
    """A cell's tuning from a cells.csv written before it carried the tuning columns: on the rates'
    validation means (``lr_tuning.tuning`` without per-seed trials)."""
    from cemlab.report.figures.lr_tuning import tuning

    t = tuning(g.assign(cell=[f'{{"lr": {float(x)!r}}}' for x in g["lr"]]))
    return {k: (str(v) if k == "bracketed" else v) for k, v in t.iloc[0].items()}


def optima_figure(table: pd.DataFrame) -> Figure | None:
    """One panel per group: each cell's optimum against training length (log-log), the Akima optimum
    where bracketed (filled), else its best rate at an edge (open marker, an arrow up or down to where
    the optimum may lie). None without a tuned cell."""
    if table.empty:
        return None
    groups = list(dict.fromkeys(table["group"]))
    fig, axes = subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for ax, group in zip(axes[0], groups):
        g = table[table["group"] == group]
        for i, (variant, v) in enumerate(g.groupby("variant", sort=False)):
            v = v.sort_values("rung")
            x = v["rung"].to_numpy(dtype=float)
            y = np.where(np.isfinite(v["akima_lr"].to_numpy(dtype=float)), v["akima_lr"], v["best_lr"]).astype(float)
            color = f"C{i % 10}"
            ax.plot(x, y, "-", color=color, lw=1, label=str(variant))
            inside = v["bracketed"].to_numpy(dtype=bool)
            ax.plot(x[inside], y[inside], "o", color=color, ms=4)
            for xe, ye, edge in zip(x[~inside], y[~inside], v["edge"].to_numpy()[~inside]):
                ax.plot([xe], [ye], "v" if edge == "lowest" else "^", mfc="none", color=color, ms=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens per parameter")
        ax.set_title(str(group), fontsize=8)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    axes[0][0].set_ylabel("learning rate at the optimum")
    n_edge = int((~table["bracketed"]).sum())
    return Figure("lr_optima_ladder", "Learning-rate optima along the ladder", (
        "Each cell's learning-rate optimum at each rung: filled, the Akima-interpolated optimum of a bracketed "
        "cell (three rates or more, the best interior); open triangles, a best rate at the edge of the rates "
        f"tried, pointing to where the optimum may lie ({n_edge} of {len(table)} cell-rungs). Read from each "
        "rung's cells.csv (best_lr, bracketed, edge, akima_lr)."), {"lr_optima_ladder": table}, fig,
        show_tables=["lr_optima_ladder"])
