"""docs/main-job.md's tables against the committed CSVs they quote (docs/main-job/recursion_ablation/):
each table is rendered here from the CSVs (effects and interval ends are already relative changes
there, exp(log effect) - 1: shown as percent, never exponentiated again) and must appear in the page
as it is rendered."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "main-job" / "recursion_ablation"
PAGE = ROOT / "docs" / "main-job.md"


def shown(verdict: str, effect: float, low: float, high: float) -> str:
    """A verdict with its effect and interval that decided, as the CSVs give them (relative changes)."""
    def pct(x: float) -> str:
        return f"{x * 100:+.1f}%" if math.isfinite(x) else "open"
    return f"{verdict} {pct(effect)} [{pct(low)}, {pct(high)}]"


def comparisons_table(before: str, after: str, head: tuple[str, str]) -> str:
    """One row per comparison of ``after`` (comparisons.csv order), beside the same comparison of ``before``."""
    b = pd.read_csv(RUN / before).set_index(["id", "condition", "comparison"])
    rows = [f"| claim | condition | comparison | {head[0]} | {head[1]} |", "|---|---|---|---|---|"]
    for r in pd.read_csv(RUN / after).itertuples():
        o = b.loc[(r.id, r.condition, r.comparison)]
        cond = f"{r.condition if isinstance(r.condition, str) else ''} ({r.role})".strip()
        rows.append(f"| {r.id} | {cond} | {r.comparison} | "
                    f"{shown(o.verdict, o.effect, o.ci_low, o.ci_high)} | "
                    f"{shown(r.verdict, r.effect, r.ci_low, r.ci_high)} |")
    return "\n".join(rows)


def claims_table(before: str, after: str, head: tuple[str, str]) -> str:
    """One row per claim condition of ``after``, its verdict with the deciding comparison's effect and
    interval, beside ``before``'s."""
    key = ["id", "condition"]
    b = pd.read_csv(RUN / before, keep_default_na=False).set_index(key)
    rows = [f"| claim | condition | {head[0]} | {head[1]} |", "|---|---|---|---|"]
    for r in pd.read_csv(RUN / after, keep_default_na=False).itertuples():
        o = b.loc[(r.id, r.condition)]

        def cell(x) -> str:
            if x.effect == "" or x.verdict == "not enough runs":
                return x.verdict
            return shown(x.verdict, float(x.effect), float(x.ci_low), float(x.ci_high))
        rows.append(f"| {r.id} | {f'{r.condition} ({r.role})'.strip()} | {cell(o)} | {cell(r)} |")
    return "\n".join(rows)


TABLES = {
    "every choice -> the union rule": lambda: comparisons_table(
        "comparisons-20261129-every-choice.csv", "comparisons.csv",
        ("2026-11-29 01:12, every choice and the edge rule", "2026-11-29 03:32, the union rule")),
    "claims: every choice -> the union rule": lambda: claims_table(
        "claims-20261129-every-choice.csv", "claims.csv", ("every choice and the edge rule", "the union rule")),
    "AMD EPYC -> Intel Xeon": lambda: comparisons_table("comparisons-20261128.csv", "comparisons-20261129-every-choice.csv",
                                                        ("2026-11-28, AMD EPYC", "2026-11-29, Intel Xeon")),
    "8 seeds -> 6": lambda: comparisons_table("comparisons-8-seeds.csv", "comparisons-20261128.csv",
                                              ("8 seeds", "6 seeds")),
    "two rates -> bracketing": lambda: claims_table("claims-two-rates.csv", "claims-8-seeds.csv",
                                                    ("two rates", "with bracketing")),
}


def test_the_pages_tables_are_the_committed_csvs():
    page = PAGE.read_text()
    for name, render in TABLES.items():
        table = render()
        assert table in page, f"docs/main-job.md's table '{name}' is not the CSVs'; it should read:\n{table}"


def test_an_effect_is_never_exponentiated_twice():
    """The primary row: the CSV's effect 0.19 is +19.0% (exp(0.19) - 1 = +21.0% would be the old mistake)."""
    row = pd.read_csv(RUN / "comparisons-8-seeds.csv").iloc[0]
    assert f"{row.effect * 100:+.1f}%" in comparisons_table("comparisons-8-seeds.csv", "comparisons-20261128.csv",
                                                            ("a", "b"))
    assert f"{math.expm1(row.effect) * 100:+.1f}%" not in PAGE.read_text().split("## Up to 8 seeds")[0]


def test_the_reruns_trial_numbers_are_the_ones_the_page_gives():
    """The rerun's per-trial drift against the committed run of the other machine, recomputed."""
    new, old = pd.read_csv(RUN / "trials-20261129-every-choice.csv"), pd.read_csv(RUN / "trials-20261128.csv")
    m = old.merge(new, on="trial_id", suffixes=("_o", "_n"))
    assert len(m) == 162 and (m.config_hash_o == m.config_hash_n).all()
    rel = (m.value_n - m.value_o).abs() / m.value_o
    page = PAGE.read_text()
    facts = [f"{int((m.value_n == m.value_o).sum())} of 162 test perplexities equal", f"median {rel.median():.1e}",
             f"{int((rel > 1e-2).sum())} beyond 1e-2", f"{int((rel > 2e-2).sum())} beyond 2e-2",
             f"largest {rel.max():.3f}"]
    for fact in facts:
        assert fact in " ".join(page.split()), fact
