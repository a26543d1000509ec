"""The files a sweep's report writes: figures (PNG and PDF without dates, so that the same store
gives byte-identical files), CSV tables and text files, the removal of the files an earlier build
wrote and this one no longer writes, and the claims' files (claims.csv, comparisons.csv, the forest
plot) with the claims' table and its texts on the page. ``cemlab.report.pages.build`` puts the
report together with them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from cemlab.report.stats.percent import level_percent, percent
from cemlab.report.claims.comparisons import comparisons_table, on_log2
from cemlab.report.figures.forest import forest_plot
from cemlab.report.claims.verdict_tables import comparison_frame, integers as _integers, verdict_frame
from cemlab.report.pages.render import Section
from cemlab.tracking.conventions import run_url


_PNG_META = {"Software": None}
_PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}


def save_figure(fig, out_dir: Path, stem: str, written: set[str]) -> None:
    """The figure as PNG and PDF. The PDF keeps the layout the PNG's save placed (constrained layout
    draws the figure once more to place it: the PDF's save would again, a quarter of the draws)."""
    fig.savefig(out_dir / f"{stem}.png", dpi=110, metadata=_PNG_META)
    fig.set_layout_engine(None)  # not "none": a placeholder engine that still draws first
    fig.savefig(out_dir / f"{stem}.pdf", metadata=_PDF_META)
    written.update({f"{stem}.png", f"{stem}.pdf"})
    import matplotlib.pyplot as plt

    plt.close(fig)


def write_csv(df: pd.DataFrame, out_dir: Path, stem: str, written: set[str]) -> str:
    name = f"{stem}.csv"
    df.to_csv(out_dir / name, index=False, lineterminator="\n")
    written.add(name)
    return name


def write_file(out_dir: Path, name: str, text: str, written: set[str]) -> Path:
    p = out_dir / name
    p.write_text(text, encoding="utf-8")
    written.add(name)
    return p


#: In each report folder, the names of the files its last build wrote, one per line: the next build
#: removes only those it no longer writes, so that a file anyone else put beside a report stays.
MANIFEST = "report-files.txt"


def remove_stale(out_dir: Path, written: set[str]) -> list[str]:
    """Remove the files the previous build of this report wrote (as its ``MANIFEST`` lists them) that
    this build did not (figures no longer made), then list this build's files. A file the report did
    not write itself (a researcher's note, an archived CSV) is never touched; a folder without a
    manifest (built before it existed) loses nothing. Returns the names removed."""
    manifest = out_dir / MANIFEST
    before = manifest.read_text(encoding="utf-8").split() if manifest.is_file() else []
    removed = []
    for name in sorted(set(before) - written):
        p = out_dir / name
        if Path(name).name == name and p.is_file():   # a bare file name inside out_dir, nothing else
            p.unlink()
            removed.append(name)
    manifest.write_text("".join(f"{n}\n" for n in sorted(written)), encoding="utf-8")
    return removed


def log_files(client, run_id: str, out_dir: Path, written: set[str], artifact_dir: str) -> None:
    """Log a build's own files to MLflow under ``artifact_dir``: not what else lies in its folder."""
    for name in sorted(written):
        client.log_artifact(run_id, str(out_dir / name), artifact_dir)


def run_link(uri: str, run) -> str:
    if uri.startswith(("http://", "https://")):
        return run_url(uri, run.experiment_id, run.run_id)
    return run.run_id


#: The page's claims table: what a person reads first. claims.csv keeps every column (the primary
#: comparison, seeds for 80% power, the shared-rate verdict, the paper's regime, the rule, ...).
PAGE_COLUMNS = ["claim", "verdict", "effect (% or log2) [interval that decided] at its level", "why, regime"]


def claims_frame(verdicts) -> pd.DataFrame:
    """The claims table of the page, one row per claim and condition (``PAGE_COLUMNS``): the claim
    (id, condition and role, statement), its verdict, the deciding comparison's effect with its
    interval that decided and that interval's level, and in a few words why the row reads as it does
    (what no outcome of its seeds could decide, a side the edge rule voided, an effect outside its
    interval, missing runs, a verdict a shared learning rate changes, too few seeds for 80% power) with
    its regime. Every column of claims.csv stays in the file."""
    df = verdict_frame(verdicts)
    rows = [dict(zip(PAGE_COLUMNS, (_claim_text(r), r["verdict"], _effect_text(r, on_log2(v)), _why_text(r))))
            for v, (_, r) in zip(verdicts, df.iterrows())]
    return pd.DataFrame(rows, columns=PAGE_COLUMNS)


def _claim_text(r) -> str:
    """E.g. ``t2-beats-t1 (same per-step eta=1, primary): Recursion T=2 beats T=1 (...).``"""
    where = ", ".join(x for x in (r["condition"], r["role"]) if x)
    return f"{r['id']} ({where}): {r['claim']}" if where else f"{r['id']}: {r['claim']}"


def _why_text(r) -> str:
    """Why a claims row reads as it does, in a few words each, then its regime (``claims_frame``)."""
    parts = []
    if r["undecidable"]:
        n = r["undecidable"].count("cannot be decided")
        parts.append(f"{n} comparison{'s' if n > 1 else ''} cannot be decided on these seeds")
    parts += [x for x in (r["not_decisive"], r["effect_outside"]) if x]
    if r["missing"]:
        items = r["missing"].split("; ")
        parts.append(f"missing: {items[0]}" + (f" (and {len(items) - 1} more)" if len(items) > 1 else ""))
    if r["verdict_changes"]:
        parts.append(f"at a shared learning rate: {r['verdict_shared_lr']}")
    power = _power_text(r)
    if "beyond it" in power:
        parts.append(f"80% power needs {power.replace('; beyond it', '').replace(' (', ' seeds (', 1)}")
    if not r["n_comparisons"] and r["numbers"]:
        parts.append(r["numbers"])
    return "; ".join(parts + [_regime_text(r)])


def _interval_text(low: float, high: float, level: float, log2: bool = False) -> str:
    """`` [-5.10, -0.20] at 97.5%``: an interval that decided, in percent (``log2``: as log2 ratios), with its
    coverage."""
    if not (np.isfinite(low) or np.isfinite(high)):
        return " (no interval)"
    return f" [{_value(low, log2, 'open')}, {_value(high, log2, 'open')}] at {level_percent(level)}"


def _value(x: float, log2: bool = False, missing: str = "n/a") -> str:
    """An effect of claims.csv on the page: a relative change in percent, or a log2 ratio (``log2``)."""
    if log2:
        return f"{x:+.3f}" if np.isfinite(x) else missing
    return percent(x, 2, unit="", missing=missing)


def _effect_text(r, log2: bool = False) -> str:
    """The deciding comparison's effect and its interval that decided (relative changes in percent; the
    learning-rate claim's log2 ratios, ``log2``) with that interval's level, its seeds and its name, e.g.
    ``-3.09 [-4.52, -2.40] at 96.88%, n=3 (cem-mlp s1 diag)``; what decided where the interval does not
    say it all is in claims.csv."""
    if not np.isfinite(r["effect"]):
        return ""
    interval = _interval_text(r["ci_low"], r["ci_high"], r["level"], log2)
    unit = " log2" if log2 else ""
    return f"{_value(r['effect'], log2)}{unit}{interval}, n={int(r['n_seeds'])} ({r['decided_by']})"


def _power_text(r) -> str:
    """The seeds per cell the condition needs for 80% power, beside what its sweep can reach."""
    n, budget = r["seeds_for_80pct_power"], r["seed_budget"]
    if not np.isfinite(n) and not n == math.inf:
        return ""
    need = "more than 1000" if n == math.inf else str(int(n))
    if np.isfinite(budget):
        need += f" (the sweep reaches {int(budget)}" + ("; beyond it)" if n > budget else ")")
    return need


def _regime_text(r) -> str:
    parts = [f"scale {r['scale']}"]
    if r["corpus"]:
        parts.append(f"corpus {r['corpus']}")
    if np.isfinite(r["tokens_per_param"]):
        parts.append(f"{r['tokens_per_param']:.3g} tokens/param")
    if np.isfinite(r["steps"]):
        parts.append(f"{int(r['steps'])} steps")
    parts.append(f"{int(r['n_seeds'])} seeds")
    return ", ".join(parts)


def claim_files(verdicts, out_dir: Path, written: set[str], sections: list[Section]) -> tuple[str, str]:
    """claims.csv, comparisons.csv and the forest plot, with their section on the page."""
    counts = ["n_seeds", "steps", "n_comparisons"]
    claim_file = write_csv(_integers(verdict_frame(verdicts), counts), out_dir, "claims", written)
    comparisons_file = write_csv(_integers(comparison_frame(verdicts), ["n"]), out_dir, "comparisons", written)
    forest = forest_plot(verdicts)
    if forest is not None:
        save_figure(forest, out_dir, "forest", written)
    sections.append(Section("comparisons", "Every comparison behind the claims",
                            "One row per comparison (comparisons.csv); effects and intervals as relative changes in "
                            "percent, built on the log scale (log2 of the lr ratio for the learning-rate claim). The "
                            "interval is the one that decided: each end the one-sided bound of the test that decides "
                            "on its side, at the level that test was held to (the look's level, Holm's step for "
                            "contradictions and 'any' claims, the every-choice factor where a position has several "
                            "candidates), its coverage given with it; the 95% interval is only descriptive. A sign "
                            "test has no such interval and its row says what decided. Forest plot: the thick bar is "
                            "the interval that decided (its level in the row's label), the thin grey bar the 95% "
                            "interval, the grey band each claim's smallest effect of interest, a dashed red tick the "
                            "threshold of a threshold or equivalence (TOST) test; a hollow marker and a red label a row the edge rule "
                            "voided (the cell at an edge named), a diamond an effect outside its interval (one choice "
                            "of rates shown, the interval over every choice: the last column says so).",
                            "forest.png" if forest is not None else None,
                            [comparisons_file] + (["forest.pdf"] if forest is not None else []),
                            [comparisons_table(verdicts)]))
    return claim_file, comparisons_file
