"""The paper's figures and tables, each drawn from a sweep's cells with the data behind it as CSV.

Each builder is named by its id (``cemlab.paper.FIGURES``, the ids a sweep file's ``figures:``
lists): it takes the report context (``cemlab.report.inputs.context.ReportContext``) and returns a
``Figure`` (or None when the sweep holds no data for it). Builders only plot what the store holds:
a cell without a finished seed is absent from the plot and present in the CSV with its note
(missing, diverged, failed).

=========  ================================================================================
fig2a      attention replacement: perplexity vs parameters, CEM points linked to their Llama
fig2b      MLP replacement, with the parameter-matched CEM MLP
fig2c/2d   recursion steps x preconditioner (CEM attention / CEM MLP), Llama dashed
fig3a      learning-rate curves with Akima-interpolated optima (stars; hollow = not bracketed);
           with ``search: optuna`` every sampled learning rate is a point of its cell's curve
fig3b      KQ diagonal strategies in CEM attention, Llama dashed
fig3c/4    plain layer reuse vs CEM recursion, gain from T=1 to T=2 (MLP / attention)
table3     GP study: parameters, FLOPs per example, test RMSE mean +- std; RMSE vs T
=========  ================================================================================

Where a sweep has several learning rates and a figure compares models (all but fig3a), each model
is shown at its best learning rate of the grid (lowest mean), and that rate is in the CSV.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.inputs.table import reuse_setting
from cemlab.report.stats.akima import akima_curve
from cemlab.report.figures.lr_optima import lr_optima, search_vs_grid
from cemlab.report.figures.plotting import (CEM_COLOR, LINESTYLES, LLAMA_COLOR, LR_LLAMA_COLOR, MATCHED_COLOR, MAX_LR_TICKS,
                                    PRECOND_COLORS, SETTING_FILL, SIZE_MARKERS, T1_COLOR, T2_COLOR, Figure,
                                    LineStyle, baseline_band, cell_columns, cell_sizes, color_name, errorbar, finite,
                                    fmt_tokens, legend_outside, line_styles, lr_reduced, size_title, subplots)


def _annotate(ax, xlabel: str, ylabel: str, heading: str, **legend) -> None:
    """Axis labels, the heading, a light grid and the legend (``legend``: e.g. its title)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(heading)
    ax.grid(alpha=0.3)
    legend_outside(ax, **legend)


# ----------------------------------------------------------------------------------------------
# Fig. 2a / 2b: replacing a sublayer
# ----------------------------------------------------------------------------------------------

def _replacement(ctx, fid: str, families: tuple[str, ...], title: str, caption: str) -> Figure | None:
    cells = ctx.cells()
    cells = cells[cells["family"].isin(("llama",) + families)]
    cem = cells[cells["family"] != "llama"]
    if cem.empty:
        return None
    cells = lr_reduced(cells, ["group", "variant", "size", "param_matched"])
    base = ctx.baselines(cells)
    data = cells.copy()
    data["baseline_mean"] = [base.get(s, {}).get("mean", math.nan) for s in data["size"]]
    data["delta"] = data["mean"] - data["baseline_mean"]
    data["rel_delta"] = data["delta"] / data["baseline_mean"]
    data.loc[data["family"] == "llama", ["baseline_mean", "delta", "rel_delta"]] = math.nan
    csv = cell_columns(data, ["param_matched", "params_attention", "params_mlp"])
    csv[["baseline_mean", "delta", "rel_delta"]] = data[["baseline_mean", "delta", "rel_delta"]].to_numpy()

    fig, ax = subplots(figsize=(7.6, 4.4))
    llama = data[data["family"] == "llama"]
    # baselines borrowed from another sweep also appear
    for size, b in base.items():
        if size not in set(llama["size"]) and finite(b.get("mean")):
            llama = pd.concat([llama, pd.DataFrame([{**b, "size": size}])], ignore_index=True)
    for _, c in data[data["family"] != "llama"].iterrows():
        b = base.get(c["size"])
        if b and all(finite(v) for v in (c["mean"], c["params_total"], b.get("mean"), b.get("params_total"))):
            ax.plot([b["params_total"] / 1e6, c["params_total"] / 1e6], [b["mean"], c["mean"]],
                    color="#bbbbbb", lw=1, zorder=1)
    styles = [(llama, "Llama", LLAMA_COLOR, "D")]
    others = data[data["family"] != "llama"]
    styles.append((others[~others["param_matched"]], "CEM (dim-matched)", CEM_COLOR, "o"))
    if others["param_matched"].any():
        styles.append((others[others["param_matched"]], "CEM (param-matched)", MATCHED_COLOR, "^"))
    for df, label, color, marker in styles:
        df = df[np.isfinite(df["mean"].to_numpy(dtype=float)) & np.isfinite(df["params_total"].to_numpy(dtype=float))]
        if df.empty:
            continue
        errorbar(ax, df["params_total"] / 1e6, df["mean"], df["std"].to_numpy(dtype=float), fmt=marker,
                 color=color, label=label, ms=7, zorder=3)
        for _, r in df.iterrows():
            ax.annotate(f"{r['size']}, {fmt_tokens(r['token_budget'])}", (r["params_total"] / 1e6, r["mean"]),
                        textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    _annotate(ax, "parameters of the model (M)", "test perplexity", title)
    return Figure(fid, title, caption, {fid: csv}, fig)


_MARKER_WORDS = {"D": "diamonds", "o": "circles", "^": "triangles"}
_LLAMA = f"{color_name(LLAMA_COLOR)} {_MARKER_WORDS['D']}"
_CEM = f"{color_name(CEM_COLOR)} {_MARKER_WORDS['o']}"
_ABOVE = "the paper's size name and the token budget"
_PPL = "Test perplexity (seed mean, bars = seed std) against the model's own total parameters"
#: Fig. 2a and 2b: the CEM family each replaces a sublayer with, the title and the caption.
_REPLACEMENTS = {
    "fig2a": (("cem-attn",), "Fig. 2a: attention replaced by CEM attention (T=1)",
              f"{_PPL}. Each CEM point ({_CEM}) is linked to its Llama baseline ({_LLAMA}) of the same dimensions; "
              f"{_ABOVE} are written above each marker."),
    "fig2b": (("cem-mlp",), "Fig. 2b: gated MLP replaced by CEM MLP (T=1)",
              f"{_PPL}: Llama ({_LLAMA}), dimension-matched CEM MLP ({_CEM}) and parameter-matched CEM MLP with hidden "
              f"width x1.5 ({color_name(MATCHED_COLOR)} {_MARKER_WORDS['^']}), linked to their baseline; {_ABOVE} above "
              "each marker."),
}


def fig2a(ctx) -> Figure | None:
    return _replacement(ctx, "fig2a", *_REPLACEMENTS["fig2a"])


def fig2b(ctx) -> Figure | None:
    return _replacement(ctx, "fig2b", *_REPLACEMENTS["fig2b"])


# ----------------------------------------------------------------------------------------------
# Fig. 2c / 2d: recursion x preconditioner
# ----------------------------------------------------------------------------------------------

def _recursion(ctx, fid: str, family: str, title: str) -> Figure | None:
    cells = ctx.cells()
    cem = cells[cells["family"] == family]
    if cem.empty:
        return None
    cem = lr_reduced(cem, ["variant", "size", "T", "precond", "eta"])
    base = ctx.baselines(cells)
    data = cem.copy()
    data["baseline_mean"] = [base.get(s, {}).get("mean", math.nan) for s in data["size"]]
    csv = cell_columns(data, ["T", "precond", "eta"])
    csv["baseline_mean"] = data["baseline_mean"].to_numpy()

    sizes = cell_sizes(data)
    # one colour per preconditioner, one line style per step size
    preconds = list(dict.fromkeys(data["precond"]))
    spare = iter(line_styles(len(preconds), avoid=(LLAMA_COLOR, *PRECOND_COLORS.values())))
    colors = {p: PRECOND_COLORS.get(p) or next(spare).color for p in preconds}
    etas = list(dict.fromkeys(data["eta"]))
    dashes = dict(zip(etas, LINESTYLES.values()))
    fig, axes = subplots(1, len(sizes), figsize=(max(7.5, 3.4 * len(sizes) + 2.6), 3.9), squeeze=False)
    drawn_baseline = False
    for ax, size in zip(axes[0], sizes):
        d = data[data["size"] == size]
        for precond, g in d.groupby("precond", sort=False):
            # one line per step size through its own cells: T=1 at eta=1/2 is another model than T=1 at eta=1
            for eta, line in g.groupby("eta", sort=False):
                line = line.sort_values("T")
                ok = np.isfinite(line["mean"].to_numpy(dtype=float))
                if ok.any():
                    label = f"precond {precond}" + (f", eta={eta}" if len(etas) > 1 or eta not in ("", "1") else "")
                    errorbar(ax, line["T"][ok], line["mean"][ok], line["std"].to_numpy(dtype=float)[ok], fmt="o",
                             ls=dashes.get(eta, "-"), color=colors[precond], label=label)
        b = base.get(size, {})
        if finite(b.get("mean")):
            baseline_band(ax, b["mean"], b.get("std", math.nan), LLAMA_COLOR)
            drawn_baseline = True
        ax.set_xticks(sorted(d["T"].unique()))
        ax.set_xlabel("recursion steps T")
        ax.set_title(size_title(size, [*d["params_total"], b.get("params_total")]), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test perplexity")
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        legend_outside(axes[0][-1], handles=list(handles.values()), labels=list(handles.keys()))
    fig.suptitle(title)
    caption = (
        "Test perplexity against recursion steps T (seed means, bars = seed std), one panel per size (the paper's "
        "size name and the parameter count of the models drawn), one colour per preconditioner ("
        + ", ".join(f"{p} {color_name(colors[p])}" for p in preconds) + ")")
    if len(etas) > 1 or etas[0] not in ("", "1"):
        caption += (", one line style per step size eta ("
                    + ", ".join(f"{LineStyle(LLAMA_COLOR, dashes[e]).words.split()[0]} eta={e}" for e in etas)
                    + "), each line through the cells of its own eta only")
    if drawn_baseline:
        caption += (f"; the {LineStyle(LLAMA_COLOR, '--').words} line is the Llama baseline of the same dimensions, "
                    "its band +- its seed std")
    return Figure(fid, title, caption + ".", {fid: csv}, fig)


def fig2c(ctx) -> Figure | None:
    return _recursion(ctx, "fig2c", "cem-attn", "Fig. 2c: CEM attention, recursion x preconditioner")


def fig2d(ctx) -> Figure | None:
    return _recursion(ctx, "fig2d", "cem-mlp", "Fig. 2d: CEM MLP, recursion x preconditioner")


# ----------------------------------------------------------------------------------------------
# Fig. 3a: learning rate, Akima optima
# ----------------------------------------------------------------------------------------------

def fig3a(ctx) -> Figure | None:
    cells = ctx.cells()
    if cells.empty or cells["lr"].nunique() < 2:
        return None
    optima = lr_optima(cells)
    compared = search_vs_grid(ctx, optima, "fig3a")
    csv = cell_columns(cells)
    sizes = cell_sizes(cells)
    fig, ax = subplots(figsize=(8.2, 4.6))
    variants = list(dict.fromkeys(zip(cells["group"], cells["variant"])))
    family = dict(zip(cells["group"], cells["family"]))
    # Llama orange, full CEM blue (the paper's), every other variant a colour of its own
    fixed = {"llama": LR_LLAMA_COLOR, "cem": CEM_COLOR}
    spare = iter(line_styles(len(variants), avoid=tuple(fixed.values())))
    colors = {}
    for group, variant in variants:
        own = fixed.get(family[group])
        colors[(group, variant)] = own if own and own not in colors.values() else next(spare).color
    for (group, variant, size), g in cells.groupby(["group", "variant", "size"], sort=False):
        g = g.sort_values("lr")
        marker = SIZE_MARKERS[sizes.index(size) % len(SIZE_MARKERS)]
        ok = np.isfinite(g["mean"].to_numpy(dtype=float))
        color = colors[(group, variant)]
        errorbar(ax, g["lr"][ok], g["mean"][ok], g["std"].to_numpy(dtype=float)[ok], fmt=marker, color=color,
                 ms=5, label=f"{variant} {size}")
        x, y = akima_curve(g["lr"].to_numpy(dtype=float), g["mean"].to_numpy(dtype=float))
        if len(x) >= 2:
            ax.plot(x, y, "-", color=color, lw=1, alpha=0.8)
        bad = g[~ok & (g["n_diverged"] > 0)]
        for lr in bad["lr"]:
            ax.plot([lr], [1.0], marker="x", color=color, transform=ax.get_xaxis_transform(), clip_on=False)
        for lr in g[~ok & (g["n_stopped"] > 0)]["lr"]:  # search: optuna samples ASHA stopped early
            ax.plot([lr], [0.0], marker="|", ms=9, color=color, transform=ax.get_xaxis_transform(), clip_on=False)
        o = optima[(optima["group"] == group) & (optima["variant"] == variant) & (optima["size"] == size)].iloc[0]
        if finite(o["optimum_ppl"]):
            ax.plot([o["optimum_lr"]], [o["optimum_ppl"]], marker="*", ms=14, color=color,
                    markerfacecolor=color if o["bracketed"] else "white", markeredgewidth=1.2, zorder=5)
    ax.set_xscale("log")
    lrs = sorted(cells["lr"].unique())
    if len(lrs) <= MAX_LR_TICKS:  # a grid's learning rates as ticks; sampled ones (Optuna) are too many
        ax.set_xticks(lrs, [f"{lr:.2g}" for lr in lrs])
        ax.set_xticks([], minor=True)
    ax.set_xlabel("learning rate")
    ax.set_ylabel("test perplexity")
    ax.set_title("Fig. 3a: learning rate and Akima-interpolated optima")
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    caption = ("Test perplexity against learning rate (seed means, bars = std), one colour per variant ("
               + ", ".join(f"{v} {color_name(c)}" for (_, v), c in colors.items()) + "), one marker per size. "
               "Lines: Akima (makima) "
               "interpolation in log learning rate; stars: the optimum chosen on the validation curve (its "
               "Akima minimum), drawn at the test curve's value there, hollow when it lies "
               "at the edge of the grid (not bracketed). x at the top: diverged runs; | at the bottom: learning "
               "rates sampled by Optuna whose runs ASHA stopped early (no final result, so not a point).")
    tables = {"fig3a": csv, "akima_optima": optima}
    if compared is not None:
        tables["search_vs_grid"] = compared
        caption += (" search_vs_grid: each searched optimum beside the Akima optimum of the same cell in the grid "
                    "sweep of this figure (delta_log10_lr = searched - grid; grid_step_log10 = one grid step).")
    return Figure("fig3a", "Fig. 3a: optimal learning rate (Akima)", caption, tables, fig,
                  show_tables=list(tables)[1:])


# ----------------------------------------------------------------------------------------------
# Fig. 3b: KQ diagonal
# ----------------------------------------------------------------------------------------------

KQ_ORDER = ["none", "shared", "per_head"]


def fig3b(ctx) -> Figure | None:
    cells = ctx.cells()
    cem = cells[cells["family"] != "llama"]
    if cem.empty or cem["kq_diagonal"].nunique() < 2:
        return None
    cem = lr_reduced(cem, ["variant", "size", "kq_diagonal"])
    base = ctx.baselines(cells)
    data = cem.copy()
    data["baseline_mean"] = [base.get(s, {}).get("mean", math.nan) for s in data["size"]]
    csv = cell_columns(data, ["kq_diagonal"])
    csv["baseline_mean"] = data["baseline_mean"].to_numpy()
    kinds = [k for k in KQ_ORDER if k in set(data["kq_diagonal"])] + sorted(set(data["kq_diagonal"]) - set(KQ_ORDER))
    fig, ax = subplots(figsize=(7.4, 4.2))
    sizes = cell_sizes(data)
    styles = line_styles(len(sizes))
    for i, (size, style) in enumerate(zip(sizes, styles)):
        d = data[data["size"] == size].set_index("kq_diagonal").reindex(kinds)
        xs = np.arange(len(kinds)) + (i - (len(sizes) - 1) / 2) * 0.06
        b = base.get(size, {})
        errorbar(ax, xs, d["mean"].to_numpy(dtype=float), d["std"].to_numpy(dtype=float), fmt="-o",
                 color=style.color, label=size_title(size, [*d["params_total"], b.get("params_total")]))
        if finite(b.get("mean")):
            baseline_band(ax, b["mean"], b.get("std", math.nan), style.color, label=f"Llama {size}", lw=1)
    ax.set_xticks(range(len(kinds)), kinds)
    _annotate(ax, "KQ diagonal in A_k", "test perplexity", "Fig. 3b: KQ diagonal strategies (CEM attention)")
    return Figure("fig3b", "Fig. 3b: KQ diagonal strategies", (
        "Test perplexity of CEM attention (seed means, bars = seed std) with no diagonal, a diagonal shared across "
        "heads and per-head diagonals, one colour per size (" + ", ".join(
            f"{s} {color_name(st.color)}" for s, st in zip(sizes, styles)) + "); the dashed line of a size's colour "
        "is its Llama baseline of the same dimensions, its band +- its seed std."),
        {"fig3b": csv}, fig)


# ----------------------------------------------------------------------------------------------
# Fig. 3c / 4: plain reuse vs CEM recursion
# ----------------------------------------------------------------------------------------------

def recursion_gains(cells: pd.DataFrame, attention: bool) -> pd.DataFrame:
    """Per (setting, size): perplexity at T=1 and T=2 and the gain ppl(T=1) - ppl(T=2); a CEM setting
    run at several step sizes is one setting per eta (``CEM eta=0.5``), its T=1 and T=2 cells both at it."""
    cells = cells.copy()
    cells["setting"] = [reuse_setting(r, attention) for _, r in cells.iterrows()]
    cells = lr_reduced(cells, ["setting", "size", "T", "eta"])
    rows = []
    for (setting, size), g in cells.groupby(["setting", "size"], sort=False):
        # CEM at several step sizes: one setting per eta, T=1 and T=2 both at that eta (its own cells)
        etas = list(dict.fromkeys(g["eta"])) if setting != "plain reuse" else []
        for eta in etas or [None]:
            sel = g if eta is None else g[g["eta"] == eta]
            name = setting if eta is None or (len(etas) == 1 and eta in ("", "1")) else f"{setting} eta={eta}"
            rows.append(_gain_row(name, size, {int(t): r for t, r in sel.set_index("T").iterrows()}))
    return pd.DataFrame(rows)


def _gain_row(setting: str, size: str, by_t: dict) -> dict:
    """One row of ``recursion_gains`` from the cells at T=1 and T=2 (``by_t``)."""
    row = dict(setting=setting, size=size)
    for t in (1, 2):
        r = by_t.get(t)
        for k in ("mean", "std", "n", "n_expected", "lr", "note"):
            row[f"T{t}_{k}"] = r[k] if r is not None else (math.nan if k != "note" else "not in grid")
    row["gain"] = row["T1_mean"] - row["T2_mean"]
    row["rel_gain"] = row["gain"] / row["T1_mean"]
    return row


def _reuse_figure(ctx, fid: str, attention: bool, title: str, caption: str) -> Figure | None:
    cells = ctx.cells()
    if cells.empty or not (set(cells["T"]) >= {1, 2}):
        return None
    gains = recursion_gains(cells, attention)
    settings = list(dict.fromkeys(gains["setting"]))
    order = ["plain reuse", "CEM dim-matched", "CEM", "CEM param-matched"]
    settings.sort(key=lambda s: (order.index(s.split(" eta=")[0]) if s.split(" eta=")[0] in order else len(order), s))
    sizes = list(dict.fromkeys(gains["size"]))
    fig, ax = subplots(figsize=(max(7.0, 1.1 * len(settings) * len(sizes) + 3.5), 4.2))
    x0 = 0
    ticks, labels = [], []
    for setting in settings:
        g = gains[gains["setting"] == setting].set_index("size").reindex(sizes)
        xs = np.arange(len(sizes)) + x0
        ax.axvspan(xs[0] - 0.45, xs[-1] + 0.45, color=SETTING_FILL.get(setting.split(" eta=")[0], "#eeeeee"),
                   alpha=0.6, lw=0)
        ax.text((xs[0] + xs[-1]) / 2, 1.01, setting, transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
        for t, color in ((1, T1_COLOR), (2, T2_COLOR)):
            errorbar(ax, xs, g[f"T{t}_mean"].to_numpy(dtype=float), g[f"T{t}_std"].to_numpy(dtype=float),
                     fmt="o", color=color, label=f"T={t}" if setting == settings[0] else None, ms=6)
        for x, (_, r) in zip(xs, g.iterrows()):
            if finite(r["T1_mean"]) and finite(r["T2_mean"]):
                ax.annotate("", xy=(x, r["T2_mean"]), xytext=(x, r["T1_mean"]),
                            arrowprops=dict(arrowstyle="->", color="#555555", lw=1))
        ticks += list(xs)
        labels += [str(s) for s in sizes]
        x0 += len(sizes) + 0.6
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_ylabel("test perplexity")
    ax.set_title(title, pad=16)
    ax.grid(alpha=0.3, axis="y")
    legend_outside(ax)
    per_eta = "; a setting named with an eta has both its points at that step size" if any(
        " eta=" in s for s in settings) else ""
    return Figure(fid, title, f"Test perplexity (seed means, bars = seed std) at T=1 ({color_name(T1_COLOR)}) and "
                  f"T=2 ({color_name(T2_COLOR)}) {caption}{per_eta}; arrows show the gain.", {fid: gains}, fig)


def fig3c(ctx) -> Figure | None:
    return _reuse_figure(ctx, "fig3c", False, "Fig. 3c: plain reuse vs CEM recursion (MLP)",
                         "for plain reuse of the residual MLP block, the dimension-matched CEM MLP and the "
                         "parameter-matched CEM MLP")


def fig4(ctx) -> Figure | None:
    return _reuse_figure(ctx, "fig4", True, "Fig. 4: plain reuse vs CEM recursion (attention)",
                         "for plain reuse of the attention block and for CEM attention")


# ----------------------------------------------------------------------------------------------
# Table 3: GP recursion
# ----------------------------------------------------------------------------------------------

def table3(ctx) -> Figure | None:
    cells = ctx.cells()  # the GP sweeps' cells: only their files list table3
    if cells.empty:
        return None
    rows = []
    for _, c in cells.iterrows():
        rows.append(dict(kernel=c["kernel"], T=int(c["T"]), variant=c["variant"], size=c["size"],
                         params=c["params_total"], flops_per_example=c["flops_per_example"],
                         rmse_mean=c["mean"], rmse_std=c["std"], n=c["n"], n_expected=c["n_expected"],
                         note=c["note"]))
    table = pd.DataFrame(rows)
    if (table["size"] == "").all():  # GP sweeps have no model sizes
        table = table.drop(columns=["size"])
    fig, ax = subplots(figsize=(6.6, 4.0))
    kernels = table.groupby("kernel", sort=False)
    for style, (kernel, g) in zip(line_styles(len(kernels)), kernels):
        g = g.sort_values("T")
        ok = np.isfinite(g["rmse_mean"].to_numpy(dtype=float))
        errorbar(ax, g["T"][ok], g["rmse_mean"][ok], g["rmse_std"].to_numpy(dtype=float)[ok], fmt="o",
                 ls=style.ls, color=style.color, label=str(kernel))
    ax.set_xscale("log", base=2)
    ts = sorted(table["T"].unique())
    ax.set_xticks(ts, [str(t) for t in ts])
    _annotate(ax, "recursion steps T", "test RMSE", "Table 3: GP regression, RMSE against recursion steps",
              title="kernel")
    return Figure("table3", "Table 3: GP recursion study", (
        "Recursive CEM MLPs on GP regression data (10 inputs): parameters, FLOPs per example, test RMSE "
        "mean +- std over seeds, per kernel and recursion steps T."), {"table3": table}, fig,
        show_tables=["table3"])

