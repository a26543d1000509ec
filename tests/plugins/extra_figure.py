"""A figure and a claim registered from outside cemlab (tests/test_extend_report.py): imported
through ``CEMLAB_PLUGINS``, it touches no file of the package.

- figure ``extra_gap``: per size, CEM attention's test perplexity minus Llama's (bar chart + CSV);
- claim ``extra-cem-attn-close``: at every size, CEM attention's perplexity is within 50% of
  Llama's (a threshold comparison, paired over seeds).

Both are fed by the sweep ``extra_attention`` (the test writes its file).
"""

from __future__ import annotations

import pandas as pd

from cemlab.report.figures.plotting import Figure, subplots
from cemlab.report.registry import register_claim, register_figure
from cemlab.report.claims.verdicts import ClaimData, compare, num, pick_cell, rel, sizes_of

SWEEP = "extra_attention"
FIGURE = "extra_gap"
CLAIM = "extra-cem-attn-close"
TOLERANCE = 0.5


def extra_gap(ctx) -> Figure | None:
    cells = ctx.cells()
    done = cells[cells["mean"].notna()]
    if done.empty:
        return None
    rows = []
    for size in sizes_of(done):
        by = done[done["size"] == size].set_index("family")["mean"]
        if {"llama", "cem-attn"} <= set(by.index):
            rows.append(dict(size=size, llama=by["llama"], cem_attn=by["cem-attn"], gap=by["cem-attn"] - by["llama"]))
    data = pd.DataFrame(rows, columns=["size", "llama", "cem_attn", "gap"])
    fig, ax = subplots(figsize=(4, 3))
    ax.bar(data["size"], data["gap"])
    ax.set_ylabel("test ppl: CEM attention - Llama")
    return Figure(FIGURE, "Extra: CEM attention's gap to Llama", "Registered by a plugin outside cemlab.",
                  {FIGURE: data}, fig)


def rule_extra_close(data: ClaimData):
    missing: list[str] = []
    cells = data.cells(data.sweep(0))
    checks = []
    for size in sizes_of(cells):
        llama = pick_cell(cells, missing, f"{size} llama", size=size, family="llama")
        cem = pick_cell(cells, missing, f"{size} cem-attn", size=size, family="cem-attn")
        if llama is not None and cem is not None:
            checks.append(compare(data, missing, size, [llama, cem], rel,
                                  f"{size}: Llama {num(llama['mean'])}, CEM attention {num(cem['mean'])}",
                                  TOLERANCE, "below"))
    return [c for c in checks if c is not None], missing


register_figure(FIGURE, extra_gap, sweeps=[SWEEP])
register_claim(dict(id=CLAIM, paper="none (a test's claim)", claim="CEM attention is within 50% of Llama.",
                    rule=f"At every size, CEM attention's perplexity is at most {TOLERANCE:.0%} above Llama's.",
                    sweeps=[SWEEP]), rule_extra_close)
