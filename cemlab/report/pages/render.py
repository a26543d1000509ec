"""The report page: ``index.html`` and ``index.md`` with the same content (figures, tables,
verdicts, missing cells), image paths relative to the page. No dates or host names, so a report
regenerated from the same store is byte-identical."""

from __future__ import annotations

import html
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cemlab.paper import SIGN_CONVENTION
from cemlab.report.stats.significance import COMBINE_RULES, CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, NOT_ENOUGH, SUPPORTED

VERDICT_CLASS = {SUPPORTED: "supported", CONTRADICTED: "contradicted", INCONCLUSIVE: "inconclusive",
                 NEGLIGIBLE: "inconclusive", NOT_ENOUGH: "notenough"}

#: How the claims are judged, said once above the claims table.
METHOD_TEXT = (
    "Verdicts: supported / contradicted / negligible / inconclusive / not enough runs (docs/verdicts.md). Effects are "
    "paired over seeds on the log scale and shown as relative changes, exp(effect) - 1. Each comparison is a paired "
    "t-test over seeds; every one-sided decision is held to half the claim's alpha: 0.025 in a sweep without "
    "seeding, in a seeded sweep half the level of the look that decided it (the summary above gives each look's), "
    "with Holm's step level for contradictions and 'any' claims. The interval shown is the one that decided, at "
    "those levels (its coverage beside it): a comparison is supported exactly when the claim's end of it is beyond "
    "the tolerance and contradicted exactly when the other end is; the 95% interval is a descriptive second mark "
    "only (comparisons.csv, forest plot). Where a cell may be any of several (its learning rates, the best of "
    "several variants) every choice is tested, with a Bonferroni factor over the choices in the interval too; "
    "nothing is chosen on the seeds that judge, and the effect shown takes each choice on the median "
    "validation metric of the cell's other seeds. A cell's learning-rate optimum is bracketed when its best rate "
    "(median validation over seeds) lies inside the rates it was tried at; a verdict that a cell is worse stands only "
    "if that cell is bracketed, 'negligible' only if every compared cell is, otherwise the comparison is not "
    "decisive and names the cell at its edge. A diverged run, or one whose metric is not finite or no better than "
    "chance, is the worst outcome of its cell, scored where it weakens no test against its cell (the t statistic's "
    "peak given the choice's finished seeds, else the worst finished run of the choice); a failed run has no "
    "value and its seed does not pair. A planned comparison without runs counts and leaves an 'all' claim at best 'not enough runs'; "
    "a comparison that no outcome of its seeds could decide (an exact sign test on too few seeds) is named before "
    "the verdict. In a sweep with a confirmation stage (the main job) none of the above choosing: each cell's "
    "learning rate is chosen on the selection seeds (lowest median validation) and each tuned comparison is judged on "
    "the fresh seeds only, the favoured cell at its chosen rate against the other at every rate of the union of "
    "their chosen rates (the 'choice' column says which), each one-sided test at half the sweep's alpha. "
    f"A claim's comparisons combine by its rule: 'all' = {COMBINE_RULES['all']} (supported by intersection-union, "
    f"contradicted by Holm over the planned comparisons); 'any' = {COMBINE_RULES['any']} (supported by Holm). "
    "Each claim has one primary condition; other conditions and the verdict at a shared learning rate (judged at "
    "every rate of the grid, at the tuned verdict's level) are sensitivity checks. The table names the comparison "
    "that decided each verdict (after its effect) and says in a few words why a row reads as it does: a side the "
    "edge rule voided, an effect outside its interval (a tuned comparison shows one choice of rates, its interval "
    "bounds every choice), missing runs; claims.csv has every column (what decided, the primary comparison, the "
    "seeds for 80% power, the verdict at a shared learning rate, the paper's regime). "
    f"Sign convention: {SIGN_CONVENTION} A verdict at a small scale says what those runs show, not what the paper's "
    "runs show.")

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.supported { background: #d9f2d9; } .contradicted { background: #f8d4d4; } .notenough { background: #eeeeee; }
.inconclusive { background: #fff3c4; }
.banner { padding: 0.8em 1em; border: 1px solid #e0b000; background: #fff6d6; margin: 1em 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; max-width: 900px; }
.small { font-size: 0.85em; color: #555; }
.scroll { overflow-x: auto; }
"""


@dataclass
class Section:
    """A figure or table on the page."""

    id: str
    title: str
    caption: str
    image: str | None                       # PNG file name, relative to the page
    files: list[str]                        # downloads: PDF, CSVs
    tables: list[pd.DataFrame] = field(default_factory=list)


@dataclass
class Page:
    title: str
    summary: list[tuple[str, str]]          # (label, value) lines
    banner: str | None                      # an important message (e.g. empty store)
    claims: pd.DataFrame | None
    sections: list[Section]
    not_done: pd.DataFrame | None           # trials without a finished run
    links: list[tuple[str, str]] = field(default_factory=list)  # (text, href) e.g. other reports


def fmt(v) -> str:
    """A table cell: floats to 4 significant digits (integers in full), NaN empty."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        if v.is_integer() and abs(v) >= 1 and abs(v) < 1e15:
            return f"{int(v):,}" if abs(v) >= 1e4 else str(int(v))
        return f"{v:.4g}"
    return str(v)


def _html_table(df: pd.DataFrame, verdict_col: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for _, r in df.iterrows():
        cells = []
        for c in df.columns:
            v = r[c]
            cls = []
            if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
                cls.append("num")
            if c == verdict_col:
                cls.append(VERDICT_CLASS.get(v, ""))
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{html.escape(fmt(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(rows)
            + "\n</tbody>\n</table></div>")


def _md_cell(v) -> str:
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def _md_table(df: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(str(c) for c in df.columns) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_md_cell(r[c]) for c in df.columns) + " |")
    return "\n".join(lines)


def render_html(page: Page) -> str:
    e = html.escape
    style = " ".join(CSS.split())   # one line: a page carries the stylesheet, not this module's layout of it
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{e(page.title)}</title>", f"<style>{style}</style>", "</head>", "<body>",
           f"<h1>{e(page.title)}</h1>"]
    if page.banner:
        out.append(f'<div class="banner" id="banner">{e(page.banner)}</div>')
    out.append('<table id="summary">')
    out += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in page.summary]
    out.append("</table>")
    if page.links:
        out.append("<p>" + " &middot; ".join(f'<a href="{e(h)}">{e(t)}</a>' for t, h in page.links) + "</p>")
    if page.claims is not None:
        out.append('<h2 id="claims">Claims of the paper</h2>')
        out.append(f'<p class="small" id="method">{e(METHOD_TEXT)}</p>')
        out.append('<div id="verdicts">' + _html_table(page.claims, verdict_col="verdict") + "</div>")
    for s in page.sections:
        out.append(f'<h2 id="{e(s.id)}">{e(s.title)}</h2>')
        if s.image:
            out.append(f'<figure><img src="{e(s.image)}" alt="{e(s.title)}">'
                       f"<figcaption>{e(s.caption)}</figcaption></figure>")
        else:
            out.append(f"<p>{e(s.caption)}</p>")
        for t in s.tables:
            out.append(_html_table(t))
        if s.files:
            out.append('<p class="small">Data: ' + " ".join(f'<a href="{e(f)}">{e(f)}</a>' for f in s.files) + "</p>")
    if page.not_done is not None:
        out.append('<h2 id="missing">Trials without a finished run</h2>')
        if page.not_done.empty:
            out.append("<p>None: every trial of the grid has a finished run.</p>")
        else:
            out.append(_html_table(page.not_done))
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def render_md(page: Page) -> str:
    out = [f"# {page.title}", ""]
    if page.banner:
        out += [f"> **{page.banner}**", ""]
    out += [f"- **{k}**: {v}" for k, v in page.summary] + [""]
    if page.links:
        out += [" · ".join(f"[{t}]({h})" for t, h in page.links), ""]
    if page.claims is not None:
        out += ["## Claims of the paper", "", METHOD_TEXT, "", _md_table(page.claims), ""]
    for s in page.sections:
        out += [f"## {s.title}", ""]
        if s.image:
            out += [f"![{s.title}]({s.image})", ""]
        out += [s.caption, ""]
        for t in s.tables:
            out += [_md_table(t), ""]
        if s.files:
            out += ["Data: " + " ".join(f"[{f}]({f})" for f in s.files), ""]
    if page.not_done is not None:
        out += ["## Trials without a finished run", ""]
        out += ["None: every trial of the grid has a finished run.", ""] if page.not_done.empty else \
            [_md_table(page.not_done), ""]
    return "\n".join(out)
