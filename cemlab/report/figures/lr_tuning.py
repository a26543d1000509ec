"""How each cell was tuned: its learning rates, the rate its validation metric prefers, whether that
rate is bracketed (an interior rate of the ones tried) or lies at an edge of them, and where it is
bracketed among three rates or more, its Akima-interpolated optimum (``stats.akima``, read as Fig. 3a
reads it: the rate chosen on the validation curve of the seed means, the test curve read there).

A tuned comparison compares each cell at its best rate; where that rate is an end of the rates the
cell was tried at, the cell's optimum may lie beyond them, by an amount nobody measured. This page
section and the columns it adds to ``cells.csv`` make that visible for every cell of every sweep
(docs/verdicts.md, "Tuned comparisons")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.figures.plotting import Figure, subplots
from cemlab.report.inputs.seeded import selection_seeds
from cemlab.report.stats.akima import chosen_on_validation
from cemlab.report.stats.bracketing import edge_of, family_edges, tuning_family

#: The columns ``tuning`` adds to every cell (the same on every rate of a cell). ``bracketed`` and
#: ``edge`` read all of a cell's seeds; ``verdict_bracketed`` and ``verdict_edge`` read the seeds the
#: verdicts read a cell's edge on (a seeded sweep's bracketing look, ``ClaimData.edge_seeds``), so a
#: seed added by a later look can make the two differ (docs/verdicts.md, "Bracketing").
COLUMNS = ("n_lr", "best_lr", "bracketed", "edge", "verdict_best_lr", "verdict_bracketed", "verdict_edge", "akima_lr",
           "akima_test")


def tuning(cells: pd.DataFrame, trials: pd.DataFrame | None = None, edge_seeds=None) -> pd.DataFrame:
    """One row per tuned cell (the cells equal but for the learning rate): the rates tried
    (``lrs``), the best rate and whether it is interior (``bracketed``) or at the ``edge`` ('lowest'
    or 'highest' rate tried; with one rate, 'one rate'), as ``stats.bracketing`` decides it from the
    per-seed ``trials`` (each rate's median log validation metric over seeds, a worst outcome ranked last: the rule
    the bracketing looks and the verdicts read); without trials, on the cells' validation means.
    With three rates or more and a bracketed best, the Akima optimum (``akima_lr``) with the test
    curve read there (``akima_test``). ``verdict_best_lr`` / ``verdict_bracketed`` / ``verdict_edge``: the
    same read on ``edge_seeds`` only (None: every seed, the same as ``best_lr`` / ``bracketed`` / ``edge``):
    in a sweep with a confirmation stage its selection seeds, where each cell's rate was chosen (and a
    ladder's next rung carries it from)."""
    if cells.empty or "lr" not in cells:
        return pd.DataFrame(columns=["family", "group", "variant", "size", "lrs", *COLUMNS])
    edges = family_edges(trials).set_index("family") if trials is not None and len(trials) else None
    on_look = edges
    if edges is not None and edge_seeds is not None:
        on_look = family_edges(trials[trials["seed"].isin([int(x) for x in edge_seeds])]).set_index("family")
    rows = []
    for fam, g in cells.groupby(cells["cell"].map(tuning_family), sort=False):
        g = g.sort_values("lr")
        lrs = g["lr"].to_numpy(dtype=float)
        val = g["val_mean"].to_numpy(dtype=float) if "val_mean" in g else np.full(len(g), np.nan)
        test = g["mean"].to_numpy(dtype=float)
        if edges is not None and fam in edges.index:
            best, edge = edges.loc[fam, "best_lr"], edges.loc[fam, "edge"]
        else:
            best, edge = edge_of(lrs, val if np.isfinite(val).any() else test)
        bracketed = edge == ""
        verdict_best, verdict_edge = best, edge
        if on_look is not edges:
            verdict_best, verdict_edge = ((on_look.loc[fam, "best_lr"], on_look.loc[fam, "edge"]) if fam in on_look.index
                                          else edge_of([], []))
        akima_lr = akima_test = math.nan
        if bracketed and len(lrs) >= 3:
            opt = chosen_on_validation(lrs, val, test)
            if opt.bracketed:
                akima_lr, akima_test = opt.lr, opt.value
        first = g.iloc[0]
        rows.append(dict(family=fam, group=first.get("group", ""), variant=first.get("variant", ""),
                         size=first.get("size", ""), lrs=" ".join(f"{x:g}" for x in lrs), n_lr=len(lrs),
                         best_lr=best, bracketed=bool(bracketed), edge=edge,
                         verdict_best_lr=verdict_best, verdict_bracketed=verdict_edge == "",
                         verdict_edge=verdict_edge, akima_lr=akima_lr,
                         akima_test=akima_test))
    return pd.DataFrame(rows)


def with_tuning(cells: pd.DataFrame, trials: pd.DataFrame | None = None, edge_seeds=None) -> pd.DataFrame:
    """``cells`` with the ``COLUMNS`` of its tuned cell on every row (``tuning``)."""
    t = tuning(cells, trials, edge_seeds)
    if t.empty:
        return cells
    keyed = cells.assign(_family=cells["cell"].map(tuning_family))
    out = keyed.merge(t[["family", *COLUMNS]].rename(columns={"family": "_family"}), on="_family", how="left")
    out.index = cells.index
    return out.drop(columns=["_family"])


def tuning_curves(cells: pd.DataFrame, trials: pd.DataFrame | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per tuned cell (its family), its rates and, per rate, the score ``tuning`` picks ``best_lr`` by, as
    a metric: with per-seed ``trials`` the median over seeds of the validation metric (exp of
    ``bracketing.rate_score``, +inf where half the seeds or more are worst outcomes), without them the
    cells' validation means (their test means where no validation was logged). What the lr_tuning
    figure draws, so that its lowest point is the table's best rate."""
    edges = family_edges(trials).set_index("family") if trials is not None and len(trials) else None
    out = {}
    for fam, g in cells.groupby(cells["cell"].map(tuning_family), sort=False):
        if edges is not None and fam in edges.index:
            out[fam] = (np.asarray(edges.loc[fam, "lrs"], dtype=float),
                        np.exp(np.asarray(edges.loc[fam, "scores"], dtype=float)))
            continue
        g = g.sort_values("lr")
        val = g["val_mean"].to_numpy(dtype=float) if "val_mean" in g else np.full(len(g), np.nan)
        out[fam] = (g["lr"].to_numpy(dtype=float), val if np.isfinite(val).any() else g["mean"].to_numpy(dtype=float))
    return out


def lr_tuning(ctx) -> Figure | None:
    """The learning-rate curve of every tuned cell (one panel per group, Fig. 3a's form): per rate the
    score its rate is chosen on (``tuning_curves``: the median validation metric over seeds; in a sweep
    with a confirmation stage over its selection seeds only, ``inputs.seeded.selection_seeds``, since
    its fresh seeds ran at the chosen rates only), the chosen rate starred on it (``verdict_best_lr``), a
    rate whose seeds mostly diverged an x at the top; and the table of ``tuning``. None where no cell
    has two rates."""
    cells, trials = ctx.cells(), ctx.trials()
    chosen_on = selection_seeds(ctx)
    t = tuning(cells, trials, chosen_on)
    if t.empty or int(t["n_lr"].max()) < 2:
        return None
    if chosen_on is not None and len(trials):
        trials = trials[trials["seed"].astype(int).isin(chosen_on)]
    curves = tuning_curves(cells, trials)
    groups = list(dict.fromkeys(t["group"]))
    fig, axes = subplots(1, len(groups), figsize=(4.6 * len(groups), 4.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for _, row in t[t["group"] == group].iterrows():
            lrs, y = curves[row["family"]]
            label = (f"{row['variant']} {row['size']}"
                     + ("" if row["verdict_bracketed"] else f" (best at {row['verdict_edge']} rate)"))
            line = ax.plot(lrs, np.where(np.isfinite(y), y, np.nan), marker="o", label=label,
                           gid=f"curve {row['family']}")[0]
            color = line.get_color()
            if np.isinf(y).any():
                ax.plot(lrs[np.isinf(y)], np.ones(int(np.isinf(y).sum())), "x", color=color,
                        transform=ax.get_xaxis_transform(), clip_on=False)
            chosen = row["verdict_best_lr"]
            best = np.isclose(lrs, chosen) if math.isfinite(chosen) else np.zeros(len(lrs), bool)
            if best.any():
                ax.plot(lrs[best][:1], y[best][:1], "*", ms=11, mfc="none", mec=color, mew=1.2,
                        gid=f"best {row['family']}")
            if math.isfinite(row["akima_lr"]):
                ax.axvline(row["akima_lr"], ls=":", lw=0.8, color=color)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title(str(group))
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    over = "seeds" if chosen_on is None else f"the selection seeds {', '.join(map(str, chosen_on))}"
    axes[0][0].set_ylabel(f"validation metric, median over {'seeds' if chosen_on is None else 'selection seeds'}")
    n_edge = int((~t["verdict_bracketed"]).sum())
    table = t.drop(columns=["family"])
    return Figure("lr_tuning", "Learning-rate tuning of every cell", (
        f"Validation metric of each cell against its learning rate: per rate the median over {over} (a diverged "
        "seed ranked last), the statistic each cell's rate is chosen on" + (
            "" if chosen_on is None else " (the fresh seeds ran at the chosen rates only; the table's best_lr reads "
            "every seed, verdict_best_lr these)") + "; the star marks the chosen rate (verdict_best_lr), an x "
        f"at the top a rate at which half the seeds or more diverged. {n_edge} of {len(t)} tuned cells have their best "
        "rate at an edge of the rates tried (not bracketed: the optimum may lie beyond). Dotted: the Akima optimum "
        "(read on the seed means), where three rates or more bracket it."), {"lr_tuning": table}, fig,
        show_tables=["lr_tuning"])
