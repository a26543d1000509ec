"""The ladder page's carried predictions (``cemlab.report.figures.ladder_optima``): per cell and rung,
the rate the rungs below point its search at (``carried_lr``), its error where the rung brackets the
optimum, the per-rung summary (carried_accuracy.csv) and the figure's markers, each worked out here by
hand from a crafted optima table."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cemlab.report.figures.ladder_optima import (BESIDE, carried_accuracy, carried_column, optima_figure,
                                                 optima_table, schedule_words)

#: The committed ladder's lattice: its grid, ratio 2 and tuning.bounds.
LATTICE = ((2e-3, 4e-3), 2.0, (5e-4, 1.6e-2))


def _rows(cells: dict[str, list[tuple[float, float, str]]]) -> pd.DataFrame:
    """An optima table: per cell (variant) its (rung, best_lr, edge) rows, edge '' bracketed."""
    rows = [dict(group="g", variant=v, size="86m", rung=rung, best_lr=best, bracketed=edge == "", edge=edge,
                 akima_lr=math.nan) for v, found in cells.items() for rung, best, edge in found]
    return pd.DataFrame(rows)


def _carried(table: pd.DataFrame, variant: str, rung: float) -> pd.Series:
    return table[(table["variant"] == variant) & (table["rung"] == rung)].iloc[0]


def test_the_carried_prediction_by_hand():
    """One rung below bracketed: its best rate. One stopped at its highest rate: one step (x2) above
    it. Two bracketed rungs, by the rung's rule ``trend`` (the lattice's fourth entry): the power law through them (8e-3 at 1 token per parameter, 4e-3 at 4:
    slope -1/2 octave per octave of tokens, so 4e-3 / 2**(0.5 * 4) = 1e-3 at 64, on the lattice
    2e-3 * 2**-1). A steeper pair (1.6e-2 at 1, 1e-3 at 4: slope -2) is held to -1 through their mean
    (4e-3 at 2): 1e-3 at 8, not the 5e-4 the unheld slope would reach (2.5e-4, held by the bounds). A point
    past the bounds (1.6e-2 at its highest: 3.2e-2) is held to 1.6e-2. None at a cell's first rung."""
    t = carried_column(_rows({
        "one": [(1.0, 4e-3, ""), (4.0, 2e-3, "")],
        "edge": [(1.0, 8e-3, "highest"), (4.0, 8e-3, "highest")],
        "low": [(1.0, 2e-3, "lowest"), (4.0, 2e-3, "")],
        "two": [(1.0, 8e-3, ""), (4.0, 4e-3, ""), (64.0, 1e-3, "")],
        "steep": [(1.0, 1.6e-2, ""), (4.0, 1e-3, ""), (8.0, 1e-3, "")],
        "bound": [(1.0, 1.6e-2, "highest"), (4.0, 1.6e-2, "")],
    }), {r: (*LATTICE, "trend") for r in (1.0, 4.0, 8.0, 64.0)})
    assert np.isnan(t[t["rung"] == 1.0]["carried_lr"]).all()
    assert _carried(t, "one", 4.0)["carried_lr"] == pytest.approx(4e-3)
    assert _carried(t, "edge", 4.0)["carried_lr"] == pytest.approx(1.6e-2)
    assert _carried(t, "low", 4.0)["carried_lr"] == pytest.approx(1e-3)
    assert _carried(t, "two", 64.0)["carried_lr"] == pytest.approx(1e-3)
    assert _carried(t, "steep", 4.0)["carried_lr"] == pytest.approx(1.6e-2)   # one rung below: its best
    assert _carried(t, "steep", 8.0)["carried_lr"] == pytest.approx(1e-3)
    assert _carried(t, "bound", 4.0)["carried_lr"] == pytest.approx(1.6e-2)
    # the error, log2(best / carried), where the rung brackets the optimum
    assert _carried(t, "one", 4.0)["carried_error_octaves"] == pytest.approx(-1.0)
    assert np.isnan(_carried(t, "edge", 4.0)["carried_error_octaves"])
    assert _carried(t, "low", 4.0)["carried_error_octaves"] == pytest.approx(1.0)
    assert _carried(t, "two", 64.0)["carried_error_octaves"] == pytest.approx(0.0)
    assert (t["lr_ratio"] == 2.0).all()


def test_each_rung_carries_by_its_own_rule_the_nearest_rungs_optimum_by_default():
    """The same cells with rung 64 carried by the trend and rung 8 by the default (a lattice of three
    entries: ``nearest``): at 8 the nearest rung's optimum (1e-3 at rung 4), at 64 the power law (1e-3)
    where the nearest rung (4e-3 at 4) would say 4e-3."""
    cells = _rows({"two": [(1.0, 8e-3, ""), (4.0, 4e-3, ""), (64.0, 1e-3, "")],
                   "steep": [(1.0, 1.6e-2, ""), (4.0, 4e-3, ""), (8.0, 1e-3, "")]})
    t = carried_column(cells, {4.0: LATTICE, 8.0: LATTICE, 64.0: (*LATTICE, "trend")})
    assert _carried(t, "two", 64.0)["carried_lr"] == pytest.approx(1e-3)
    assert _carried(t, "steep", 8.0)["carried_lr"] == pytest.approx(4e-3)
    nearest = carried_column(cells, {4.0: LATTICE, 8.0: LATTICE, 64.0: (*LATTICE, "nearest")})
    assert _carried(nearest, "two", 64.0)["carried_lr"] == pytest.approx(4e-3)
    assert _carried(nearest, "two", 64.0)["carried_error_octaves"] == pytest.approx(-2.0)


def test_a_rung_without_a_lattice_or_a_rung_below_that_found_nothing_carries_nothing():
    t = carried_column(_rows({"v": [(1.0, 4e-3, ""), (4.0, 4e-3, "")],
                              "none": [(1.0, 4e-3, "no finished run"), (4.0, 4e-3, "")]}), {1.0: LATTICE})
    assert t["carried_lr"].isna().all() and t["carried_error_octaves"].isna().all()
    assert t["lr_ratio"].isna().sum() == 2
    t = carried_column(_rows({"none": [(1.0, 4e-3, "no finished run"), (4.0, 4e-3, "")]}), {4.0: LATTICE})
    assert t["carried_lr"].isna().all()


def test_the_optima_table_carries_each_rungs_lattice_steps_and_epochs():
    """``optima_table`` from rungs as the page reads them (cells.csv with the tuning columns, the
    rung's lattice, steps and epochs): the same carried rates as by hand."""
    def cells(best: float, bracketed: bool, edge: str) -> pd.DataFrame:
        return pd.DataFrame([dict(group="g", variant="v", size="86m", lr=lr, best_lr=best, bracketed=bracketed,
                                  edge=edge, akima_lr=math.nan, akima_test=math.nan) for lr in (2e-3, 4e-3, 8e-3)])

    rungs = [SimpleNamespace(rung=1.25, scale="r1", steps=71.0, epochs=0.07, lattice=LATTICE,
                             cells=cells(8e-3, False, "highest")),
             SimpleNamespace(rung=5.0, scale="r5", steps=282.0, epochs=0.28, lattice=LATTICE,
                             cells=cells(4e-3, True, "")),
             SimpleNamespace(rung=20.0, scale="r20", steps=1125.0, epochs=1.1, lattice=None,
                             cells=cells(4e-3, True, ""))]
    t = optima_table(rungs)
    assert list(t["steps"]) == [71.0, 282.0, 1125.0] and list(t["epochs"]) == [0.07, 0.28, 1.1]
    assert math.isnan(t.loc[0, "carried_lr"]) and t.loc[1, "carried_lr"] == pytest.approx(1.6e-2)
    assert t.loc[1, "carried_error_octaves"] == pytest.approx(-2.0)
    assert math.isnan(t.loc[2, "carried_lr"])   # no lattice at that rung


def test_carried_accuracy_counts_per_rung():
    """Per rung: cells, those with a prediction, bracketed, both, the median |error| and how many lie
    within one step (|error| <= 1 octave at ratio 2, 2 octaves at ratio 4), recomputed by hand."""
    t = pd.DataFrame(dict(
        rung=[1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 16.0, 16.0],
        bracketed=[True, False, True, True, True, False, True, True, True],
        carried_lr=[math.nan, math.nan, 4e-3, 4e-3, 4e-3, 8e-3, math.nan, 4e-3, 4e-3],
        carried_error_octaves=[math.nan, math.nan, -1.0, 0.0, 2.0, math.nan, math.nan, 2.0, -4.0],
        lr_ratio=[2.0] * 7 + [4.0, 4.0]))
    a = carried_accuracy(t).set_index("rung")
    assert a.loc[1.0, "carried"] == 0 and a.loc[1.0, "compared"] == 0
    assert math.isnan(a.loc[1.0, "share_within_one_step"])
    r = a.loc[4.0]
    assert (r["cells"], r["carried"], r["bracketed"], r["compared"]) == (5, 4, 4, 3)
    assert r["median_abs_error_octaves"] == 1.0 and r["within_one_step"] == 2
    assert r["share_within_one_step"] == pytest.approx(2 / 3) and r["step_octaves"] == 1.0
    r = a.loc[16.0]
    assert r["median_abs_error_octaves"] == 3.0 and r["within_one_step"] == 1 and r["step_octaves"] == 2.0


def test_an_optima_table_written_before_the_carried_columns_still_reads():
    """The committed lr_optima_ladder.csv without its carried columns (as written before them): the
    summary gives its counts and NaN, the figure draws no carried marker."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "ladder", "recursion_ablation",
                        "lr_optima_ladder.csv")
    old = pd.read_csv(path, keep_default_na=False, na_values=[""])
    old = old.drop(columns=[c for c in ("lr_ratio", "carried_lr", "carried_error_octaves", "steps", "epochs")
                            if c in old])
    a = carried_accuracy(old)
    assert list(a["cells"]) == list(old.groupby("rung").size())
    assert (a["carried"] == 0).all() and a["median_abs_error_octaves"].isna().all()
    f = optima_figure(old)
    assert not [ln for ax in f.fig.axes for ln in ax.lines if ln.get_gid() in ("carried", "carried_link")]
    assert "carried prediction" not in f.caption
    import matplotlib.pyplot as plt

    plt.close(f.fig)


def test_the_figure_draws_each_carried_prediction_beside_its_optimum():
    """Per cell a hollow circle at each carried rate, BESIDE times its rung, joined to the optimum
    drawn at that rung (the Akima optimum where bracketed, else the best rate); ticks at the rungs
    with their steps and epochs; the schedule in the caption; the whole figure inside its bounds."""
    t = carried_column(_rows({"one": [(1.0, 4e-3, ""), (4.0, 2e-3, "")],
                              "edge": [(1.0, 8e-3, "highest"), (4.0, 8e-3, "highest")]}), {1.0: LATTICE, 4.0: LATTICE})
    t["akima_lr"] = [4.2e-3, 2.1e-3, math.nan, math.nan]   # rows: 'one' at 1 and 4, then 'edge'
    t["steps"], t["epochs"] = t["rung"].map({1.0: 18.0, 4.0: 71.0}), t["rung"].map({1.0: 0.018, 4.0: 0.071})
    t = t.sort_values(["variant", "rung"]).reset_index(drop=True)
    rungs = [SimpleNamespace(rung=1.0, steps=18.0, warmup_frac=0.05, final_lr_factor=0.1),
             SimpleNamespace(rung=4.0, steps=71.0, warmup_frac=0.05, final_lr_factor=0.1)]
    words = schedule_words(rungs)
    assert "5% of its optimizer steps (1 of 18 at rung 1, 4 of 71 at rung 4)" in words and "0.1 times" in words
    f = optima_figure(t, words)
    (ax,) = f.fig.axes
    marks = {ln.get_color(): ln for ln in ax.lines if ln.get_gid() == "carried"}
    links = {ln.get_color(): ln for ln in ax.lines if ln.get_gid() == "carried_link"}
    assert len(marks) == len(links) == 2
    for variant, drawn_at, carried in (("one", 2.1e-3, 4e-3), ("edge", 8e-3, 1.6e-2)):
        (line,) = [ln for ln in ax.lines if ln.get_label() == variant]
        mark, link = marks[line.get_color()], links[line.get_color()]
        assert list(mark.get_xdata()) == pytest.approx([4.0 * BESIDE])
        assert list(mark.get_ydata()) == pytest.approx([carried])
        assert mark.get_markerfacecolor() == "none" and mark.get_linestyle() == "None"
        xs, ys = np.asarray(link.get_xdata(), float), np.asarray(link.get_ydata(), float)
        assert xs[:2] == pytest.approx([4.0, 4.0 * BESIDE]) and ys[:2] == pytest.approx([drawn_at, carried])
    edge = [ln for ln in ax.lines if ln.get_marker() == "^" and ln.get_markerfacecolor() == "none"
            and ln.get_gid() is None]
    assert len(edge) == 2   # the 'edge' cell at both rungs
    labels = [tk.get_text() for tk in ax.get_xticklabels()]
    assert labels == ["1\n18 steps\n0.018 ep", "4\n71 steps\n0.071 ep"]
    assert words in f.caption and "carried prediction" in f.caption
    assert "carried prediction" in ax.get_legend().texts[-1].get_text()
    f.fig.set_dpi(110)   # as the page saves it: every label and the legend inside the figure
    f.fig.canvas.draw()
    tight, (w, h) = f.fig.get_tightbbox(f.fig.canvas.get_renderer()), f.fig.get_size_inches()
    assert tight.x0 >= -1e-6 and tight.y0 >= -1e-6 and tight.x1 <= w + 1e-6 and tight.y1 <= h + 1e-6, tight
    import matplotlib.pyplot as plt

    plt.close(f.fig)


def test_the_page_has_the_carried_section_and_its_csv(tmp_path):
    """The ladder page's sections from rungs with cells: the optima figure and table with the carried
    columns, and carried_accuracy.csv with its section."""
    from cemlab.report.pages.ladder_page import Rung, _sections, comparison_rows, verdict_table
    from cemlab.report.pages.render import Page, render_md

    def cells(best: float, bracketed: bool, edge: str) -> pd.DataFrame:
        return pd.DataFrame([dict(group="g", variant="v", size="86m", lr=lr, best_lr=best, bracketed=bracketed,
                                  edge=edge, akima_lr=math.nan, akima_test=math.nan) for lr in (2e-3, 4e-3)])

    empty = pd.DataFrame()
    rungs = [Rung(1.25, "r1", 1e5, 71.0, 0.07, empty, empty, empty, "files", cells(4e-3, False, "highest"),
                  LATTICE, 0.05, 0.1),
             Rung(5.0, "r5", 4e5, 282.0, 0.28, empty, empty, empty, "files", cells(4e-3, True, ""), LATTICE, 0.05,
                  0.1)]
    rows = comparison_rows(rungs)
    written: set[str] = set()
    sections = _sections(rungs, rows, verdict_table(rows), tmp_path, written, "recursion_ablation")
    assert [s.id for s in sections][-2:] == ["lr_optima_ladder", "carried_accuracy"]
    optima = pd.read_csv(tmp_path / "lr_optima_ladder.csv")
    assert optima["carried_lr"].tolist()[1] == pytest.approx(8e-3)
    assert optima["carried_error_octaves"].tolist()[1] == pytest.approx(-1.0)
    acc = pd.read_csv(tmp_path / "carried_accuracy.csv")
    assert acc["compared"].tolist() == [0, 1] and acc["within_one_step"].tolist()[1] == 1
    assert "1 of 71 at rung 1.25" not in sections[-2].caption and "4 of 71 at rung 1.25" in sections[-2].caption
    md = render_md(Page("t", [], None, None, sections, None))
    assert "How well the carried rate predicted" in md and "carried_accuracy.csv" in md


def test_a_confirmation_rung_is_read_on_the_seeds_it_chose_its_rates_on():
    """A rung with a confirmation stage: its cells.csv's best rate over every seed (its chosen rate has
    fresh seeds the others lack) is not where it chose; the optima table reads ``verdict_best_lr`` /
    ``verdict_edge`` (its selection seeds), where the next rung's carry starts from."""
    cells = pd.DataFrame([dict(group="g", variant="v", size="86m", cell=f'{{"lr": {lr!r}}}', lr=lr, best_lr=8e-3,
                               bracketed=False, edge="highest", verdict_best_lr=4e-3, verdict_bracketed=True,
                               verdict_edge="", akima_lr=math.nan, akima_test=math.nan) for lr in (2e-3, 4e-3, 8e-3)])
    rung = SimpleNamespace(rung=1.25, scale="s-tpp1.25", cells=cells, lattice=LATTICE, steps=71, epochs=0.07)
    row = optima_table([rung]).iloc[0]
    assert row["best_lr"] == 4e-3 and bool(row["bracketed"]) and row["edge"] == ""
