"""The report's claim files and page agree with themselves, on crafted verdicts written by the report's
own writers (``pages.writers.claim_files``, ``claims_frame``, ``figures.forest``): an effect outside its
own interval says why on its row and its forest row (a tuned comparison shows one choice of rates, its
interval bounds every choice); a row the edge rule voided is drawn hollow with the cell at an edge beside
it; the page's claims table is short and claims.csv keeps every column."""

from __future__ import annotations

import pandas as pd
import pytest

from cemlab.report.claims.shown_effect import outside_reason
from cemlab.report.claims.verdict_tables import CLAIM_COLUMNS
from cemlab.report.pages.render import Page, render_html, render_md
from cemlab.report.pages.writers import PAGE_COLUMNS, claim_files, claims_frame
from claims_support import AT_HIGHEST, BRACKETED, crafted_verdicts, curve_grid, lr_grid, unexplained_outside


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """Two conditions of ``t2-beats-t1``'s comparison: on ``lr_grid`` (validation prefers 4e-3 for both
    cells, test prefers T=2 at 2e-3: the effect shown, at 4e-3, lies above the interval over every
    choice), and T=2 10% worse but best at its highest rate (the contradiction voided by the edge rule);
    their claims.csv, comparisons.csv and forest plot written into a folder, and the verdicts."""
    test, val = lr_grid()
    outside = crafted_verdicts(test, val=val)["same per-step eta=1"]
    voided = crafted_verdicts(curve_grid(1.10, BRACKETED, AT_HIGHEST))["same per-step eta=1"]
    out = tmp_path_factory.mktemp("pages")
    written, sections = set(), []
    claim_files([outside, voided], out, written, sections)
    assert {"claims.csv", "comparisons.csv", "forest.png"} <= written
    return dict(out=out, verdicts=[outside, voided], outside=outside, voided=voided)


def test_no_effect_lies_outside_its_interval_unless_its_row_says_why(crafted):
    claims = pd.read_csv(crafted["out"] / "claims.csv")
    comps = pd.read_csv(crafted["out"] / "comparisons.csv")
    checks = [("effect", "ci_low", "ci_high", "effect_outside"),
              ("primary_effect", "primary_ci_low", "primary_ci_high", "primary_effect_outside")]
    seen = 0
    for df, cols in ((claims, checks), (comps, [("effect", "ci_low", "ci_high", "effect_outside"),
                                                ("effect", "ci95_low", "ci95_high", "effect_outside")])):
        for c in cols:
            bad, said = unexplained_outside(df, *c)
            assert bad.empty, bad[list(c)]
            seen += len(said)
    assert seen >= 3   # the lr_grid comparison: outside its interval that decided and its 95% interval
    row = claims.iloc[0]
    assert row["effect"] > row["ci_high"] and "one choice of rates" in row["effect_outside"]
    assert "above the interval that decided" in row["effect_outside"]
    # a reason only where the effect lies outside: the voided comparison's effect is inside its open interval
    assert pd.isna(claims.iloc[1]["effect_outside"]) and not outside_reason(crafted["voided"].checks[0])
    assert claims.iloc[1]["not_decisive"].startswith("not decisive (contradicted")


def test_the_forest_says_why_a_row_looks_decisive_or_lies_outside(crafted):
    """The voided row: hollow marker, pale bar, a red label naming the cell at an edge ('not decisive: ...'),
    a legend entry; the row whose effect lies outside its interval: a diamond, its label and the legend say so."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from cemlab.report.figures.forest import MARKS, forest_plot

    fig = forest_plot(crafted["verdicts"])
    (legend,) = fig.legends
    legend = [t.get_text() for t in legend.get_texts()]
    assert legend == [MARKS["voided"], MARKS["outside"]]
    for ax, v in zip(fig.axes, crafted["verdicts"]):
        (ch,) = v.checks
        (marker,) = [ln for ln in ax.lines if str(ln.get_gid()).startswith("effect ")]
        (tick,) = ax.get_yticklabels()
        label = " ".join(tick.get_text().split())
        if ch.edge_blocks:
            assert marker.get_gid() == "effect voided" and marker.get_markerfacecolor() in ("white", "w", (1, 1, 1, 1))
            assert f"not decisive: {ch.bracketed}" in label and "best at its highest rate" in label
            assert "contradicted" in label and "voided" in label and to_hex(tick.get_color()) == to_hex("C3")
            assert any(ln.get_alpha() == pytest.approx(0.45) and ln.get_linewidth() > 2 for ln in ax.lines)
        else:
            assert outside_reason(ch) and marker.get_gid() == "effect outside" and marker.get_marker() == "D"
            assert "effect outside" in label and "not decisive" not in label
            assert to_hex(tick.get_color()) != to_hex("C3")
    plt.close(fig)


def test_the_page_shows_a_short_claims_table_and_the_csv_keeps_every_column(crafted):
    claims = pd.read_csv(crafted["out"] / "claims.csv")
    assert list(claims.columns) == CLAIM_COLUMNS and len(CLAIM_COLUMNS) > 30
    table = claims_frame(crafted["verdicts"])
    assert list(table.columns) == PAGE_COLUMNS and len(PAGE_COLUMNS) <= 5
    outside, voided = table.iloc[0], table.iloc[1]
    assert outside["claim"].startswith("t2-beats-t1 (same per-step eta=1, primary): ")
    assert outside["verdict"] == claims.iloc[0]["verdict"]
    assert "effect above the interval that decided" in outside["why, regime"]
    assert "not decisive (contradicted" in voided["why, regime"] and "best at its highest rate" in voided["why, regime"]
    for (_, r), (_, c) in zip(table.iterrows(), claims.iterrows()):
        effect = r["effect (% or log2) [interval that decided] at its level"]
        assert effect.startswith(f"{c['effect'] * 100:+.2f} [") and f"({c['decided_by']})" in effect
        assert "at 95%" in effect and "scale tiny" in r["why, regime"]
    page = Page("crafted", [], None, table, [], None)
    html, md = render_html(page), render_md(page)
    head = html[html.index('id="verdicts"'):html.index("</thead>", html.index('id="verdicts"'))]
    assert head.count("<th>") == len(PAGE_COLUMNS) and "<th>decided_by</th>" not in head
    assert "| " + " | ".join(PAGE_COLUMNS) + " |" in md
