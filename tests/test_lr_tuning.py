"""Each cell's learning-rate tuning on the report page and in cells.csv: the rate its validation
prefers, whether it is bracketed or at an edge, and the Akima optimum where three rates or more
bracket it, checked against a direct computation (numpy argmin, scipy's makima interpolant)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.interpolate import Akima1DInterpolator

from cemlab.report.figures.lr_tuning import COLUMNS, tuning, with_tuning


def _cells(curves: dict[str, tuple[list[float], list[float], list[float]]]) -> pd.DataFrame:
    rows = []
    for variant, (lrs, val, test) in curves.items():
        for lr, v, t in zip(lrs, val, test):
            rows.append(dict(group="cem-attn", variant=variant, size="86m", lr=lr, val_mean=v, mean=t,
                             cell=json.dumps({"variant": variant, "size": "86m", "lr": lr}, sort_keys=True)))
    return pd.DataFrame(rows)


def test_an_interior_best_is_bracketed_and_gets_its_akima_optimum_an_edge_does_not():
    lrs = [1e-3, 2e-3, 4e-3, 8e-3]
    val = [200.0, 180.0, 176.0, 190.0]
    test = [205.0, 184.0, 181.0, 196.0]
    cells = _cells({"inside": (lrs, val, test), "edge": (lrs[:2], [200.0, 180.0], [205.0, 184.0]),
                    "one": ([2e-3], [180.0], [184.0])})
    t = tuning(cells).set_index("variant")
    assert t.loc["inside", "bracketed"] and t.loc["inside", "best_lr"] == 4e-3 and t.loc["inside", "edge"] == ""
    # the Akima optimum of the validation curve in log10(lr) (makima), the test curve read there
    x = np.log10(lrs)
    f = Akima1DInterpolator(x, val, method="makima")
    grid = np.linspace(x[0], x[-1], 200001)
    best = grid[np.argmin(f(grid))]
    assert math.log10(t.loc["inside", "akima_lr"]) == pytest.approx(best, abs=1e-4)
    g = Akima1DInterpolator(x, test, method="makima")
    assert t.loc["inside", "akima_test"] == pytest.approx(float(g(math.log10(t.loc["inside", "akima_lr"]))), rel=1e-9)
    assert not t.loc["edge", "bracketed"] and t.loc["edge", "edge"] == "highest" and math.isnan(t.loc["edge", "akima_lr"])
    assert t.loc["one", "edge"] == "one rate" and not t.loc["one", "bracketed"]
    # cells.csv: every rate of a cell carries its cell's tuning
    w = with_tuning(cells)
    assert set(COLUMNS) <= set(w.columns) and len(w) == len(cells)
    assert (w[w["variant"] == "edge"]["edge"] == "highest").all() and (w[w["variant"] == "inside"]["n_lr"] == 4).all()


def test_the_lowest_rate_is_an_edge_too_and_a_cell_without_validation_reads_its_test_metric():
    cells = _cells({"low": ([1e-3, 2e-3, 4e-3], [math.nan] * 3, [150.0, 160.0, 170.0])})
    (row,) = tuning(cells).to_dict("records")
    assert row["best_lr"] == 1e-3 and row["edge"] == "lowest" and not row["bracketed"]


def test_the_ladder_follows_each_cells_optimum_across_rungs():
    """The ladder page's optimum table: per cell and rung, the best rate on the validation means (an
    old cells.csv without the tuning columns) or as the rung's cells.csv records it, with the edge;
    checked against the rates read off by hand."""
    from types import SimpleNamespace

    from cemlab.report.figures.ladder_optima import optima_figure, optima_table

    def cells(vals: dict, tuned: bool = False) -> pd.DataFrame:
        rows = [dict(group="g", variant="v", size="86m", lr=lr, val_mean=v, mean=v) for lr, v in vals.items()]
        df = pd.DataFrame(rows)
        if tuned:   # as a new rung's cells.csv carries it
            best = min(vals, key=vals.get)
            lrs = sorted(vals)
            df = df.assign(best_lr=best, bracketed=lrs[0] < best < lrs[-1], edge="", akima_lr=math.nan,
                           akima_test=math.nan)
        return df

    rungs = [SimpleNamespace(rung=1.25, scale="r1", cells=cells({2e-3: 30.0, 4e-3: 29.0})),
             SimpleNamespace(rung=5.0, scale="r5", cells=cells({1e-3: 31.0, 2e-3: 28.0, 4e-3: 28.5}, tuned=True))]
    t = optima_table(rungs)
    assert list(t["rung"]) == [1.25, 5.0]
    assert t.loc[0, "best_lr"] == 4e-3 and not t.loc[0, "bracketed"] and t.loc[0, "edge"] == "highest"
    assert t.loc[1, "best_lr"] == 2e-3 and t.loc[1, "bracketed"] and t.loc[1, "lrs"] == "0.001 0.002 0.004"
    fig = optima_figure(t)
    assert fig is not None and "1 of 2 cell-rungs" in fig.caption


def test_verdict_columns_read_the_bracketing_looks_seeds_only():
    """``verdict_bracketed`` / ``verdict_edge`` read a cell's edge on the seeds the verdicts read it on
    (a seeded sweep's bracketing look), ``bracketed`` / ``edge`` on every seed. A cell best at its
    highest rate on seeds 0-2 but at its middle rate once seeds 3-7 are in: the first pair says
    bracketed, the second says 'highest'; each checked against the medians worked out with numpy."""
    lrs = [2e-3, 4e-3, 8e-3]
    # log validation per (rate, seed): on seeds 0-2 8e-3 is best, on all 8 seeds 4e-3 is
    logv = {2e-3: [3.30, 3.31, 3.32, 3.30, 3.31, 3.32, 3.30, 3.31],
            4e-3: [3.21, 3.22, 3.23, 3.10, 3.11, 3.12, 3.10, 3.11],
            8e-3: [3.15, 3.16, 3.17, 3.40, 3.41, 3.42, 3.40, 3.41]}
    rows = []
    for lr in lrs:
        for seed, v in enumerate(logv[lr]):
            rows.append(dict(group="cem-attn", variant="v", size="86m", lr=lr, seed=seed, status="finished",
                             value=math.exp(v + 0.05), val=math.exp(v), chance=1024.0,
                             cell=json.dumps({"variant": "v", "size": "86m", "lr": lr}, sort_keys=True)))
    trials = pd.DataFrame(rows)
    cells = _cells({"v": (lrs, [math.exp(np.mean(logv[lr])) for lr in lrs], [1.0, 1.0, 1.0])})
    all_seeds = {lr: np.median(logv[lr]) for lr in lrs}
    first = {lr: np.median(logv[lr][:3]) for lr in lrs}
    assert min(all_seeds, key=all_seeds.get) == 4e-3 and min(first, key=first.get) == 8e-3

    (row,) = tuning(cells, trials, edge_seeds=[0, 1, 2]).to_dict("records")
    assert row["bracketed"] and row["edge"] == "" and row["best_lr"] == 4e-3
    assert not row["verdict_bracketed"] and row["verdict_edge"] == "highest"
    (same,) = tuning(cells, trials).to_dict("records")   # no seed look: the verdicts read every seed
    assert same["verdict_bracketed"] and same["verdict_edge"] == ""
    w = with_tuning(cells, trials, [0, 1, 2])
    assert (w["verdict_edge"] == "highest").all() and w["bracketed"].all()


def test_the_figure_draws_the_statistic_the_table_picks_the_best_rate_by():
    """The lr_tuning figure draws, per rate, the median validation metric over seeds (a diverged seed
    ranked last), the statistic the table's ``best_lr`` is chosen on, and stars that rate: for every
    cell the star sits at the table's best rate, at the lowest point of the cell's curve. Cell ``u``'s
    seed means prefer its highest rate, its medians its middle one (a mean-drawn figure would disagree
    with the table); ``w`` diverged at two of three seeds of its highest rate (drawn as an x, no point)."""
    from types import SimpleNamespace

    from cemlab.report.figures.lr_tuning import lr_tuning

    lrs = [1e-3, 2e-3, 4e-3]
    val = {"u": {1e-3: [14.0, 14.5, 14.2], 2e-3: [10.0, 10.4, 31.0], 4e-3: [12.0, 12.3, 12.1]},
           "w": {1e-3: [20.0, 20.5, 20.2], 2e-3: [18.0, 18.6, 18.1], 4e-3: [17.0, math.nan, math.nan]},
           "z": {1e-3: [9.0, 9.2, 9.1], 2e-3: [9.5, 9.4, 9.9], 4e-3: [9.8, 9.9, 9.7]}}
    rows = []
    for variant, by_lr in val.items():
        for lr, vs in by_lr.items():
            for seed, v in enumerate(vs):
                rows.append(dict(group="cem-attn", variant=variant, size="86m", lr=lr, seed=seed,
                                 status="finished" if math.isfinite(v) else "diverged", value=v * 1.01, val=v,
                                 chance=1024.0, cell=json.dumps({"variant": variant, "size": "86m", "lr": lr},
                                                                sort_keys=True)))
    trials = pd.DataFrame(rows)
    cells = _cells({k: (lrs, [np.nanmean(by_lr[lr]) for lr in lrs], [1.0] * 3) for k, by_lr in val.items()})
    fig = lr_tuning(SimpleNamespace(cells=lambda: cells, trials=lambda: trials))
    table = fig.tables["lr_tuning"].set_index("variant")
    drawn = {line.get_gid(): line for ax in fig.fig.axes for line in ax.lines if line.get_gid()}
    families = tuning(cells, trials).set_index("variant")["family"]
    for variant in val:
        curve, star = drawn[f"curve {families[variant]}"], drawn[f"best {families[variant]}"]
        x, y = curve.get_xdata(), np.asarray(curve.get_ydata(), dtype=float)
        medians = [np.median(val[variant][lr]) if np.isfinite(val[variant][lr]).sum() * 2 > 3 else np.nan
                   for lr in lrs]
        assert list(x) == lrs and np.allclose(y, medians, equal_nan=True), (variant, y, medians)
        assert star.get_xdata()[0] == table.loc[variant, "best_lr"], variant
        assert star.get_ydata()[0] == pytest.approx(np.nanmin(y)), variant
    assert table.loc["u", "best_lr"] == 2e-3 and table.loc["u", "bracketed"]
    assert cells[cells["variant"] == "u"].sort_values("val_mean")["lr"].iloc[0] == 4e-3   # the means disagree
    assert table.loc["w", "best_lr"] == 2e-3 and table.loc["w", "bracketed"]   # mostly diverged above: bracketed
    assert table.loc["z", "edge"] == "lowest" and "(best at lowest rate)" in " ".join(
        t.get_text() for ax in fig.fig.axes for t in ax.get_legend().get_texts())
    assert "median over seeds" in fig.caption and "star" in fig.caption
    import matplotlib.pyplot as plt

    plt.close(fig.fig)


def test_a_confirmation_sweeps_figure_draws_and_stars_its_selection_seeds():
    """In a sweep with a confirmation stage each cell's rate is chosen on the grid's seeds (0-1) and the
    fresh seeds (2-4) run at the chosen rates only: the figure draws the medians over seeds 0-1 and stars
    the chosen rate (``verdict_best_lr``), not the all-seed median, which fresh seeds that happened to be
    bad would move to another rate (here 4e-3 chosen on seeds 0-1; with seeds 2-4, 2e-3)."""
    from types import SimpleNamespace

    from cemlab.report.figures.lr_tuning import lr_tuning

    lrs = [2e-3, 4e-3, 8e-3]
    by_seed = {2e-3: [12.0, 12.2], 4e-3: [11.0, 11.1, 13.5, 13.6, 13.4], 8e-3: [12.5, 12.4]}
    rows = [dict(group="cem-attn", variant="v", size="86m", lr=lr, seed=s, status="finished", value=v * 1.01,
                 val=v, chance=1024.0, cell=json.dumps({"variant": "v", "size": "86m", "lr": lr}, sort_keys=True))
            for lr, vs in by_seed.items() for s, v in enumerate(vs)]
    trials = pd.DataFrame(rows)
    cells = _cells({"v": (lrs, [float(np.mean(by_seed[lr])) for lr in lrs], [1.0] * 3)})

    class Grids:   # the sweep's grid at the report's scale: seeds 0-1, with a confirmation budget there
        def spec(self, sweep):
            return SimpleNamespace(confirmation_budget=lambda scale, trials: 30)

        def trials(self, sweep, scale):
            return [SimpleNamespace(axes={"seed": s, "lr": 2e-3}, config=SimpleNamespace(train=SimpleNamespace(seed=0)))
                    for s in (0, 1)]

    ctx = SimpleNamespace(cells=lambda: cells, trials=lambda: trials, grids=Grids(), sweep="s", scale="tiny")
    fig = lr_tuning(ctx)
    (row,) = fig.tables["lr_tuning"].to_dict("records")
    assert row["best_lr"] == 2e-3 and row["verdict_best_lr"] == 4e-3      # every seed vs the selection seeds
    drawn = {line.get_gid().split()[0]: line for ax in fig.fig.axes for line in ax.lines if line.get_gid()}
    assert np.allclose(drawn["curve"].get_ydata(), [math.exp(np.median(np.log(by_seed[lr][:2]))) for lr in lrs])
    assert drawn["best"].get_xdata()[0] == 4e-3
    assert "selection seeds 0, 1" in fig.caption
    plain = lr_tuning(SimpleNamespace(cells=lambda: cells, trials=lambda: trials))   # no grid known: every seed
    star = [ln for ax in plain.fig.axes for ln in ax.lines if (ln.get_gid() or "").startswith("best")]
    assert star[0].get_xdata()[0] == 2e-3
    import matplotlib.pyplot as plt

    plt.close(fig.fig)
    plt.close(plain.fig)
