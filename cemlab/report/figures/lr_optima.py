"""Fig. 3a's numbers: the Akima-interpolated optimum of each model's learning-rate curve, and for
a ``search: optuna`` sweep its optima beside those of the grid sweeps of the same figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.stats.akima import chosen_on_validation
from cemlab.report.figures.plotting import finite


def lr_optima(cells: pd.DataFrame) -> pd.DataFrame:
    """Akima optimum of each (group, variant, size) over the cells' learning rates: the rate chosen
    on the validation curve (seed means), the test curve read at it (``chosen_on_validation``)."""
    rows = []
    for (group, variant, size), g in cells.groupby(["group", "variant", "size"], sort=False):
        val = g["val_mean"].to_numpy(dtype=float) if "val_mean" in g else np.full(len(g), np.nan)
        opt = chosen_on_validation(g["lr"].to_numpy(dtype=float), val, g["mean"].to_numpy(dtype=float))
        params = g["params_total"].to_numpy(dtype=float)
        params = params[np.isfinite(params)]
        rows.append(dict(family=g["family"].iloc[0], group=group, variant=variant, size=size, n_lr=int(len(g)),
                         n_points=opt.n_points,
                         params_total=float(params.mean()) if len(params) else math.nan,
                         optimum_lr=opt.lr, optimum_log10_lr=opt.log10_lr, optimum_ppl=opt.value,
                         bracketed=opt.bracketed,
                         note="" if opt.bracketed else ("no finished runs" if opt.n_points == 0 else
                                                        "optimum at the edge of the grid: not bracketed")))
    return pd.DataFrame(rows, columns=["family", "group", "variant", "size", "n_lr", "n_points", "params_total",
                                       "optimum_lr", "optimum_log10_lr", "optimum_ppl", "bracketed", "note"])


def search_vs_grid(ctx, optima: pd.DataFrame, figure: str) -> pd.DataFrame | None:
    """For a ``search: optuna`` sweep: each cell's searched Akima optimum beside the Akima optimum
    of the same cell (group, variant, size) in every grid sweep whose file also lists ``figure``
    (``lr_search`` vs ``lr_sweep``), at this scale: ``delta_log10_lr`` = searched - grid, and the
    grid's spacing, so a difference can be read against one grid step. None when not searched or
    no grid has runs."""
    trials = ctx.trials()
    if trials.empty or not (trials["search_cell"] != "").any():
        return None
    rows = []
    for name in ctx.grids.names():
        if name == ctx.sweep or figure not in ctx.grids.spec(name).figures:
            continue
        other = ctx.trials(name)
        if other.empty or (other["search_cell"] != "").any():
            continue
        grid = lr_optima(ctx.cells(name))
        spacing = np.diff(np.log10(sorted(set(ctx.cells(name)["lr"]))))
        for o in optima.itertuples():
            g = grid[(grid["group"] == o.group) & (grid["variant"] == o.variant) & (grid["size"] == o.size)]
            if g.empty or not (finite(o.optimum_lr) and finite(g["optimum_lr"].iloc[0])):
                continue
            g = g.iloc[0]
            delta = o.optimum_log10_lr - g["optimum_log10_lr"]
            rows.append(dict(group=o.group, variant=o.variant, size=o.size, searched_points=o.n_points,
                             searched_optimum_lr=o.optimum_lr, searched_optimum_ppl=o.optimum_ppl,
                             grid_sweep=name, grid_points=int(g["n_points"]), grid_optimum_lr=g["optimum_lr"],
                             grid_optimum_ppl=g["optimum_ppl"], delta_log10_lr=delta,
                             grid_step_log10=float(np.median(spacing)) if len(spacing) else math.nan,
                             note="" if o.bracketed and g["bracketed"] else "an optimum is not bracketed"))
    return pd.DataFrame(rows) if rows else None

