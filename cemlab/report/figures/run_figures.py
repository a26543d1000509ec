"""The figures every sweep's report tries, whatever paper figure it feeds: energy after each
recursion step, test-time recursion, training curves, and the parameter/FLOPs table.

matplotlib's tick locator is imported inside the figure builders, like ``pyplot`` in ``plotting``,
so ``cemlab report`` refuses a bad sweep name without loading matplotlib."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from cemlab.report.figures.plotting import MAX_CURVE_POINTS, Figure, legend_outside, line_styles, subplots
from cemlab.tasks import Task, get_task
from cemlab.tracking import outcomes, schema


def _panels(keys: list[str], width: float):
    """A figure with one panel per key, side by side: the figure and (axis, key) pairs."""
    fig, axes = subplots(1, len(keys), figsize=(width * len(keys), 3.9), squeeze=False)
    return fig, list(zip(axes[0], keys))


def _cells(d: pd.DataFrame, x: str, y: str, many_lr: bool):
    """Per cell of ``d``, in order: its line style (``plotting.LineStyle``, distinct for every cell
    of ``d``), its curve (``y`` against ``x``, mean over seeds), its first row, its legend label and
    its rows."""
    groups = list(d.groupby("cell", sort=False))
    for style, (_, g) in zip(line_styles(len(groups)), groups):
        first = g.iloc[0]
        label = f"{first['variant']} {first['size']}" + (f" lr={first['lr']:g}" if many_lr else "")
        yield style, g.groupby(x)[y].mean(), first, label, g


def _seed_band(ax, per_seed: pd.DataFrame, color: str) -> None:
    """The seed spread (one column per seed): a band from the lowest to the highest seed."""
    if per_seed.shape[1] > 1:
        ax.fill_between(per_seed.index, per_seed.min(axis=1), per_seed.max(axis=1), alpha=0.15, color=color, lw=0)


def _banded_cells(ax, d: pd.DataFrame, x: str, many_lr: bool):
    """Per cell of ``d`` (``_cells`` of its ``value`` against ``x``), with its seed band drawn on ``ax``
    first: its line style, curve, first row and legend label."""
    for style, curve, first, label, g in _cells(d, x, "value", many_lr):
        _seed_band(ax, g.pivot_table(index=x, columns="seed", values="value"), style.color)
        yield style, curve, first, label


def _legend(ax, d: pd.DataFrame) -> None:
    """Beside the data, one entry per cell (up to 24; more would not fit the figure's height)."""
    if d["cell"].nunique() <= 24:
        legend_outside(ax, fontsize=6 if d["cell"].nunique() > 12 else 7)


_ENERGY_KEY = re.compile(r"^energy/(attn|mlp)/L(\d+)$")


def energy(ctx) -> Figure | None:
    trials = ctx.trials()
    rows = []
    for _, t in trials[trials["status"] == schema.STATUS_FINISHED].iterrows():
        for key in ctx.metric_keys(t["run_id"]):
            m = _ENERGY_KEY.match(key)
            if not m:
                continue
            for step, value in ctx.history(t["run_id"], key):
                rows.append(dict(cell=t["cell"], variant=t["variant"], size=t["size"], lr=t["lr"], seed=t["seed"],
                                 run_id=t["run_id"], sublayer=m.group(1), layer=int(m.group(2)), step=step,
                                 energy=value, score_only=bool(t.get("score_only", False)) and m.group(1) == "attn"))
    if not rows:
        return None
    data = pd.DataFrame(rows)
    # energy change from step 0, mean over layers and seeds, per cell and step
    e0 = data[data["step"] == 0].set_index(["run_id", "sublayer", "layer"])["energy"]
    data["delta"] = data["energy"] - [e0.get((r, s, l), math.nan) for r, s, l in
                                      zip(data["run_id"], data["sublayer"], data["layer"])]
    subs = [s for s in ("attn", "mlp") if s in set(data["sublayer"])]
    from matplotlib.ticker import MaxNLocator

    fig, panels = _panels(subs, 6.4)
    many_lr = trials["lr"].nunique() > 1
    for ax, sub in panels:
        d = data[data["sublayer"] == sub]
        for style, curve, first, label, g in _cells(d, "step", "delta", many_lr):
            if first["score_only"]:
                label += " (score-only: not descent)"
            # the seed spread: a band between the lowest and highest seed (mean over layers)
            _seed_band(ax, g.groupby(["seed", "step"])["delta"].mean().unstack("seed"), style.color)
            ax.plot(curve.index, curve.values, ls=style.ls, marker="s" if first["score_only"] else "o",
                    mfc="none" if first["score_only"] else style.color, ms=3, color=style.color, label=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("recursion step t")
        ax.set_ylabel("energy - energy at t=0")
        ax.set_title(f"CEM {'attention' if sub == 'attn' else 'MLP'}")
        ax.grid(alpha=0.3)
        _legend(ax, d)
    fig.suptitle("Energy after each recursion step")
    data = data.drop(columns=["cell"])
    return Figure("energy", "Energy after each recursion step", (
        "Mean energy of each CEM sublayer on a fixed validation batch after each recursion step, as the "
        "change from the starting point (t=0), averaged over layers and seeds (bands: lowest to highest seed). "
        "Descent steps with a small enough step size lower it. Attention runs marked 'score-only' use "
        "Algorithm 1's KQ diagonal in the scores only: their step is not the gradient of the stated energy, so "
        "the energy need not fall (exact_energy_gradient=true makes it so; docs/layers.md); they are drawn with hollow "
        "squares."),
        {"energy": data}, fig)


def test_time(ctx) -> Figure | None:
    """Test metric with the recursion steps changed at evaluation only (``test/*_at_steps``)."""
    trials = ctx.trials()
    rows = []
    for _, t in trials[trials["status"] == schema.STATUS_FINISHED].iterrows():
        keys = ctx.metric_keys(t["run_id"])
        for key in (_task(t).test_metric_at_steps,):
            if key in keys:
                for steps, value in ctx.history(t["run_id"], key):
                    rows.append(dict(cell=t["cell"], variant=t["variant"], size=t["size"], lr=t["lr"], seed=t["seed"],
                                     run_id=t["run_id"], trained_T=t["T"], metric=key, test_T=steps, value=value))
    if not rows:
        return None
    data = pd.DataFrame(rows)
    if data.groupby("run_id")["test_T"].nunique().max() < 2:
        return None
    metrics = list(dict.fromkeys(data["metric"]))
    from matplotlib.ticker import MaxNLocator

    fig, panels = _panels(metrics, 6.8)
    many_lr = trials["lr"].nunique() > 1
    for ax, metric in panels:
        d = data[data["metric"] == metric]
        for style, curve, first, label in _banded_cells(ax, d, "test_T", many_lr):
            ax.plot(curve.index, curve.values, ls=style.ls, marker="o", ms=3, color=style.color, label=label)
            if first["trained_T"] in curve.index:  # the recursion steps it was trained with
                ax.plot([first["trained_T"]], [curve[first["trained_T"]]], "s", ms=8, mfc="none", color=style.color)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("recursion steps at test time T'")
        ax.set_ylabel(metric.replace("_at_steps", "") + " (mean over seeds)")
        ax.grid(alpha=0.3)
        _legend(ax, d)
    fig.suptitle("Test-time recursion")
    return Figure("test_time_recursion", "Test-time recursion", (
        "Test metric when only the number of recursion steps at evaluation is changed (the model is trained "
        "with T steps, squares; bands: lowest to highest seed). A new dimension for test-time compute (paper "
        "sec. 5.2); the claim 'test-time-recursion' judges it."),
        {"test_time_recursion": data.drop(columns=["cell"])}, fig)


def _task(trial) -> Task:
    """The task of a trial (a row of ``ctx.trials()``), which names its metrics."""
    return get_task(trial["task"])


def _metric_words(tasks) -> str:
    """``perplexity on a log axis``, ``RMSE``: the validation metrics of ``tasks`` as the caption names them."""
    return ", ".join(f"{t.metric_label}{' on a log axis' if t.metric_log_axis else ''}"
                     for t in {t.name: t for t in tasks}.values())


def _thin(points: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    if len(points) <= limit:
        return points
    idx = np.unique(np.linspace(0, len(points) - 1, limit).round().astype(int))
    return [points[i] for i in idx]


def training(ctx) -> Figure | None:
    trials = ctx.trials()
    rows = []
    for _, t in trials[trials["status"].isin(outcomes.SEARCH_RESULTS)].iterrows():
        keys = ctx.metric_keys(t["run_id"])
        for key in (schema.TRAIN_LOSS, _task(t).val_metric):
            if key not in keys:
                continue
            for step, value in _thin(ctx.history(t["run_id"], key), MAX_CURVE_POINTS):
                rows.append(dict(cell=t["cell"], variant=t["variant"], size=t["size"], lr=t["lr"], seed=t["seed"],
                                 run_id=t["run_id"], status=t["status"], metric=key, step=step, value=value))
    if not rows:
        return None
    data = pd.DataFrame(rows)
    tasks = {task.val_metric: task for task in map(_task, (t for _, t in trials.iterrows()))}
    metrics = [m for m in (schema.TRAIN_LOSS, *tasks) if m in set(data["metric"])]
    from matplotlib.ticker import FuncFormatter

    fig, panels = _panels(metrics, 6.4)
    many_lr = trials["lr"].nunique() > 1
    for ax, metric in panels:
        d = data[data["metric"] == metric]
        for style, curve, _, label in _banded_cells(ax, d, "step", many_lr):
            ax.plot(curve.index, curve.values, ls=style.ls, lw=1, color=style.color, label=label)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(metric + " (mean over seeds)")
        if metric in tasks and tasks[metric].metric_log_axis:  # e.g. perplexity falls by orders of magnitude early on: log, ticks in plain numbers
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(alpha=0.3, which="both")
        _legend(ax, d)
    fig.suptitle("Training curves")
    return Figure("training", "Training curves", (
        f"Training loss (linear axis) and validation metric ({_metric_words(tasks.values())}) against optimizer steps, mean "
        "over seeds per cell (bands: lowest to highest seed) "
        f"(at most {MAX_CURVE_POINTS} points per run are kept); runs ASHA stopped early end where it stopped them."), {"training": data.drop(columns=["cell"])}, fig)


def params(ctx) -> Figure | None:
    cells = ctx.cells()
    cols = ["size", "group", "variant", "T", "precond", "kq_diagonal", "lr", "params_total", "params_attention",
            "params_mlp", "params_embedding", "flops_per_token", "token_budget", "n", "n_expected"]
    table = cells[[c for c in cols if c in cells.columns]]
    if not np.isfinite(table["params_total"].to_numpy(dtype=float)).any():
        return None
    # columns no cell has (a GP sweep has no sizes, attention or token budget)
    table = table[[c for c in table.columns if not (table[c].isna() | (table[c] == "")).all()]]
    return Figure("params", "Parameters and FLOPs", (
        "Parameters (total, attention, MLP, embedding), training FLOPs per token and token budget of each cell, "
        "as logged by its runs (empty: no run logged them)."), {"params": table}, None, show_tables=["params"])

