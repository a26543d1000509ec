"""How each cell's learning-rate optimum moves with training length along a ladder: per cell and
rung, the rates it was tried at, its best rate, whether that is bracketed (``stats.bracketing``, as
the rung's ``cells.csv`` records it) and its Akima-interpolated optimum where three rates or more
bracket it (``figures.lr_tuning``). The ladder page (``pages.ladder_page``) shows the table and the
figure; each rung's own report has the cell's learning-rate curve.

Beside each rung's optimum, the *carried prediction* (``carried_lr``): where the rungs below in the
table point the cell's search at this rung, by the rule a ladder with ``ladder.carry`` starts its
families from (``cemlab.sweeps.carry.carried``: each rung below's best rate and edge, on the rung's
lattice of rates inside ``tuning.bounds``); ``carried_error_octaves`` is log2(best_lr / carried_lr)
where the rung brackets its optimum. :func:`carried_accuracy` sums it up per rung
(``carried_accuracy.csv``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.figures.plotting import Figure, legend_outside, subplots
from cemlab.sweeps.carry import Found, carried
from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.sweeps.sweepfile.tuning_section import grid_rates

COLUMNS = ["group", "variant", "size", "rung", "rung_scale", "steps", "epochs", "lrs", "best_lr", "bracketed", "edge",
           "akima_lr", "akima_test", "lr_ratio", "carried_lr", "carried_error_octaves"]


def optima_table(rungs: list) -> pd.DataFrame:
    """One row per tuned cell and rung (``Rung.cells``: the rung's cells.csv, one row per cell and
    rate with the cell's tuning columns), in group, variant and rung order, with the rung's steps and
    epochs and the cell's carried prediction (:func:`carried_column`; ``Rung.lattice``: the rung's
    rates, their ratio and the tuning bounds, None where unknown)."""
    rows, lattices = [], {}
    for rg in rungs:
        cells = getattr(rg, "cells", None)
        if cells is None or cells.empty or "lr" not in cells:
            continue
        lattices[rg.rung] = getattr(rg, "lattice", None)
        for (group, variant, size), g in cells.groupby(["group", "variant", "size"], sort=False):
            first = g.iloc[0] if "best_lr" in g else _tuned(g)
            if "verdict_best_lr" in first and pd.notna(first["verdict_best_lr"]):   # where the rung chose and carries
                first = first.copy()
                first["best_lr"], first["edge"] = first["verdict_best_lr"], first.get("verdict_edge", "")
                first["bracketed"] = str(first["verdict_bracketed"])
            bracketed = str(first["bracketed"]) == "True"
            rows.append(dict(group=group, variant=variant, size=size, rung=rg.rung, rung_scale=rg.scale,
                             steps=float(getattr(rg, "steps", math.nan)), epochs=float(getattr(rg, "epochs", math.nan)),
                             lrs=" ".join(f"{x:g}" for x in sorted(g["lr"].astype(float))),
                             best_lr=float(first["best_lr"]), bracketed=bracketed,
                             edge="" if bracketed else str(first.get("edge", "")),
                             akima_lr=float(first.get("akima_lr", math.nan)),
                             akima_test=float(first.get("akima_test", math.nan))))
    table = pd.DataFrame(rows, columns=COLUMNS)
    return carried_column(table, lattices)


def carried_column(table: pd.DataFrame, lattices: dict) -> pd.DataFrame:
    """``table`` with each rung's ``lr_ratio`` and each cell's ``carried_lr`` and
    ``carried_error_octaves``: the carried prediction (``cemlab.sweeps.carry.carried``) from the rows
    of the same cell (group, variant, size) at lower rungs, each a ``Found(rung, best_lr, edge)``, on
    the lattice of ``lattices[rung]`` (``(grid, ratio, bounds, rule)``: the rung's rates, their ratio,
    ``tuning.bounds`` and its ``ladder.carry_rule``); NaN at a cell's first rung, where no rung below
    points, or without a lattice.
    The error, log2(best_lr / carried_lr), where the rung brackets the cell's optimum, else NaN."""
    table = table.copy()
    ratio, pred = [], []
    for r in table.itertuples(index=False):
        lattice = lattices.get(r.rung)
        same = table[(table["group"] == r.group) & (table["variant"] == r.variant) & (table["size"] == r.size)
                     & (table["rung"] < r.rung)]
        below = [Found(float(b.rung), float(b.best_lr), "" if bool(b.bracketed) else str(b.edge))
                 for b in same.itertuples(index=False)]
        ratio.append(float(lattice[1]) if lattice else math.nan)
        pred.append(carried(below, float(r.rung), lattice[0], lattice[1], tuple(lattice[2]), *lattice[3:])
                    if lattice and below else math.nan)
    table["lr_ratio"], table["carried_lr"] = ratio, pred
    best, pred_a = table["best_lr"].to_numpy(dtype=float), np.asarray(pred, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.log2(best / pred_a)
    table["carried_error_octaves"] = np.where(table["bracketed"].to_numpy(dtype=bool), err, math.nan)
    return table


def rate_lattice(spec, scale: str, trials: list) -> tuple | None:
    """(grid, ratio, bounds, rule) of ``scale``'s grid ``trials``, as a carried ladder rung starts from
    them (``cemlab.sweeps.carry.carried``): its learning rates, their ratio (``SweepSpec.rate_ratio``),
    ``tuning.bounds`` and the rung's ``ladder.carry_rule``; None without a tuning section or rates
    with a ratio."""
    if spec.tuning is None or not grid_rates(trials):
        return None
    try:
        ratio = spec.rate_ratio(scale, trials)
    except SweepError:
        return None
    rung = spec.rungs().get(scale) if spec.ladder is not None else None
    rule = (spec.ladder.rule_at(rung),) if rung is not None else ()
    return (tuple(grid_rates(trials)), float(ratio), tuple(spec.tuning.bounds), *rule)


#: The ladder page's words on carried_accuracy.csv.
CARRIED_CAPTION = (
    "Per rung, how far each cell's carried prediction (lr_optima_ladder.csv: carried_lr, the rate the rungs below "
    "point its search at, cemlab.sweeps.carry) lay from the optimum the rung found: its cells, those with a "
    "prediction (carried; none at the first rung), those bracketed, those both (compared), the median "
    "|carried_error_octaves| (|log2(best_lr / carried_lr)|) over them, and how many lie within one step of the "
    "rung's rates (within_one_step: |error| at most step_octaves, one octave at ratio 2). A cell at an edge of its "
    "rates has no error: its optimum is not known. Where a rung ran its grid (a ladder without ladder.carry), the "
    "prediction is what the rule would have started it from.")


#: carried_accuracy.csv's columns.
ACCURACY_COLUMNS = ["rung", "cells", "carried", "bracketed", "compared", "median_abs_error_octaves",
                    "within_one_step", "share_within_one_step", "step_octaves"]


def carried_accuracy(table: pd.DataFrame) -> pd.DataFrame:
    """carried_accuracy.csv: per rung of the optima table, how well the carried prediction found the
    optimum: its ``cells``, those with a prediction (``carried``), those bracketed, those both
    (``compared``), the median |carried_error_octaves| over them, and how many lie within one step of
    the rung's rates (|error| <= log2 of its ratio, ``step_octaves``: 1 at ratio 2; counted in whole
    steps, as both rates lie on the lattice up to their 3 significant digits). A table without
    the carried columns (an optima table written before them) gives the counts and NaN."""
    out = []
    for rung, g in table.groupby("rung", sort=True):
        err = pd.to_numeric(g.get("carried_error_octaves", pd.Series(math.nan, index=g.index)), errors="coerce")
        pred = pd.to_numeric(g.get("carried_lr", pd.Series(math.nan, index=g.index)), errors="coerce")
        ratios = pd.to_numeric(g.get("lr_ratio", pd.Series(math.nan, index=g.index)), errors="coerce").dropna()
        step = math.log2(float(ratios.iloc[0])) if len(ratios) else math.nan
        bracketed = g["bracketed"].astype(str) == "True"
        hit = err[bracketed & np.isfinite(pred)].dropna().abs()
        within = int(((hit / step).round() <= 1).sum()) if math.isfinite(step) else 0   # rates rounded to 3 digits
        out.append(dict(rung=float(rung), cells=len(g), carried=int(np.isfinite(pred).sum()),
                        bracketed=int(bracketed.sum()), compared=len(hit),
                        median_abs_error_octaves=float(hit.median()) if len(hit) else math.nan,
                        within_one_step=within if math.isfinite(step) else math.nan,
                        share_within_one_step=within / len(hit) if len(hit) and math.isfinite(step) else math.nan,
                        step_octaves=step))
    return pd.DataFrame(out, columns=ACCURACY_COLUMNS)


def _tuned(g: pd.DataFrame) -> dict:
    """A cell's tuning from a cells.csv written before it carried the tuning columns: on the rates'
    validation means (``lr_tuning.tuning`` without per-seed trials)."""
    from cemlab.report.figures.lr_tuning import tuning

    t = tuning(g.assign(cell=[f'{{"lr": {float(x)!r}}}' for x in g["lr"]]))
    return {k: (str(v) if k == "bracketed" else v) for k, v in t.iloc[0].items()}


#: Where a carried prediction is drawn: beside its rung's optimum, this factor to the right on the
#: log axis of tokens per parameter.
BESIDE = 1.12


def schedule_words(rungs: list) -> str:
    """The runs' schedule, as their configs say (``Rung.warmup_frac``, ``Rung.final_lr_factor``:
    ``train.warmup_frac`` and ``train.final_lr_factor``, ``cemlab.train.plan.lr_factor``), with each
    rung's warm-up steps; '' where the rungs do not say."""
    said = [rg for rg in rungs if math.isfinite(getattr(rg, "warmup_frac", math.nan))]
    if not said:
        return ""
    kinds = {(rg.warmup_frac, rg.final_lr_factor) for rg in said}
    if len(kinds) > 1:
        return "Schedules differ between rungs: " + "; ".join(
            f"rung {rg.rung:g}: warm-up {rg.warmup_frac:.0%}, decay to {rg.final_lr_factor:g}x" for rg in said) + "."
    warm, final = kinds.pop()
    steps = ", ".join(f"{int(round(warm * rg.steps))} of {rg.steps:g} at rung {rg.rung:g}" for rg in said
                      if math.isfinite(rg.steps))
    return (f"Schedule of every run (its config's train.warmup_frac and train.final_lr_factor): linear warm-up over "
            f"{warm:.0%} of its optimizer steps ({steps}), then cosine decay to {final:g} times the peak rate at "
            f"its last step; the training length differs between rungs, the schedule's shape does not.")


def _rung_labels(ax, table: pd.DataFrame) -> None:
    """Ticks at the rungs, each labelled with its tokens per parameter, steps and epochs."""
    per = table.drop_duplicates("rung").sort_values("rung")
    labels = []
    for r in per.itertuples(index=False):
        steps, epochs = float(getattr(r, "steps", math.nan)), float(getattr(r, "epochs", math.nan))
        labels.append(f"{r.rung:g}" + (f"\n{steps:g} steps" if math.isfinite(steps) else "")
                      + (f"\n{epochs:.2g} ep" if math.isfinite(epochs) else ""))
    ax.set_xticks(per["rung"].to_numpy(dtype=float), labels, fontsize=6)
    ax.minorticks_off()


def optima_figure(table: pd.DataFrame, schedule: str = "") -> Figure | None:
    """One panel per group: each cell's optimum against training length (log-log), the Akima optimum
    where bracketed (filled), else its best rate at an edge (open marker, an arrow up or down to where
    the optimum may lie); beside it its carried prediction (``carried_lr``: a small hollow circle,
    gid ``carried``, at ``BESIDE`` times the rung, joined to the optimum by a thin line, gid
    ``carried_link``). Ticks at the rungs, labelled with their steps and epochs; ``schedule``
    (:func:`schedule_words`) in the caption. None without a tuned cell."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    if table.empty:
        return None
    groups = list(dict.fromkeys(table["group"]))
    has_carried = "carried_lr" in table and bool(np.isfinite(table["carried_lr"].to_numpy(dtype=float)).any())
    fig, axes = subplots(1, len(groups), figsize=(5.4 * len(groups), 3.6), squeeze=False)
    rates = pd.concat([table["best_lr"], table.get("carried_lr", pd.Series(dtype=float))]).astype(float)
    rates = sorted(set(rates[np.isfinite(rates)]))   # the y ticks: every best and carried rate
    for ax, group in zip(axes[0], groups):
        g = table[table["group"] == group]
        handles = []
        for i, (variant, v) in enumerate(g.groupby("variant", sort=False)):
            v = v.sort_values("rung")
            x = v["rung"].to_numpy(dtype=float)
            y = np.where(np.isfinite(v["akima_lr"].to_numpy(dtype=float)), v["akima_lr"], v["best_lr"]).astype(float)
            color = f"C{i % 10}"
            handles += ax.plot(x, y, "-", color=color, lw=1, label=str(variant))
            inside = v["bracketed"].to_numpy(dtype=bool)
            ax.plot(x[inside], y[inside], "o", color=color, ms=4)
            for xe, ye, edge in zip(x[~inside], y[~inside], v["edge"].to_numpy()[~inside]):
                ax.plot([xe], [ye], "v" if edge == "lowest" else "^", mfc="none", color=color, ms=6)
            c = v["carried_lr"].to_numpy(dtype=float) if "carried_lr" in v else np.full(len(v), math.nan)
            m = np.isfinite(c)
            if m.any():
                ax.plot(x[m] * BESIDE, c[m], "o", mfc="none", color=color, ms=3.5, mew=0.8, ls="none", gid="carried")
                xs = np.column_stack([x[m], x[m] * BESIDE, np.full(m.sum(), np.nan)]).ravel()
                ys = np.column_stack([y[m], c[m], np.full(m.sum(), np.nan)]).ravel()
                ax.plot(xs, ys, "-", color=color, lw=0.6, alpha=0.7, gid="carried_link")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _rung_labels(ax, table)
        ax.set_yticks(rates, [f"{r:g}" for r in rates])
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("tokens per parameter (steps, epochs)", fontsize=7)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(str(group), fontsize=8)
        kinds = [Line2D([], [], marker="o", color="0.3", ls="none", ms=4, label="optimum, bracketed"),
                 Line2D([], [], marker="^", mfc="none", color="0.3", ls="none", ms=6, label="best rate at an edge")]
        if has_carried:
            kinds.append(Line2D([], [], marker="o", mfc="none", color="0.3", ls="-", lw=0.6, ms=3.5, mew=0.8,
                                label="carried prediction"))
        legend_outside(ax, handles=handles + kinds, fontsize=6)
    axes[0][0].set_ylabel("learning rate at the optimum")
    n_edge = int((~table["bracketed"].to_numpy(dtype=bool)).sum())
    carried_words = (" Beside each optimum, joined to it by a thin line, a small hollow circle: the carried "
                     "prediction (carried_lr), where the rungs below point the cell's search at this rung "
                     "(cemlab.sweeps.carry: a bracketed rung below at its best rate, one stopped at an end one "
                     "step past it; the power law through two found optima or more; on the rung's lattice of "
                     "rates); carried_error_octaves is log2(best_lr / carried_lr) where the rung brackets the "
                     "optimum.") if has_carried else ""
    return Figure("lr_optima_ladder", "Learning-rate optima along the ladder", (
        "Each cell's learning-rate optimum at each rung: filled, the Akima-interpolated optimum of a bracketed "
        "cell (three rates or more, the best interior); open triangles, a best rate at the edge of the rates "
        f"tried, pointing to where the optimum may lie ({n_edge} of {len(table)} cell-rungs)." + carried_words
        + " Under each rung's tokens per parameter, its optimizer steps and epochs (passes over the corpus's "
        "training split). " + (schedule + " " if schedule else "") + "Read from each rung's cells.csv (best_lr, "
        "bracketed, edge, akima_lr)."), {"lr_optima_ladder": table}, fig, show_tables=["lr_optima_ladder"])
