"""The files a sweep's report writes: figures (PNG and PDF without dates, so that the same store
gives byte-identical files), CSV tables and text files, the removal of files an earlier build left,
and the claims' files (claims.csv, comparisons.csv, the forest plot) with the claims' table and its
texts on the page. ``cemlab.report.pages.build`` puts the report together with them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from cemlab.report.stats.percent import level_percent, percent
from cemlab.report.claims.comparisons import comparisons_table
from cemlab.report.figures.forest import forest_plot
from cemlab.report.claims.verdict_tables import comparison_frame, integers as _integers, verdict_frame
from cemlab.report.pages.render import Section
from cemlab.tracking.conventions import run_url


_PNG_META = {"Software": None}
_PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}


def save_figure(fig, out_dir: Path, stem: str, written: set[str]) -> None:
    fig.savefig(out_dir / f"{stem}.png", dpi=110, metadata=_PNG_META)
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


def remove_stale(out_dir: Path, written: set[str]) -> None:
    """Drop report files of an earlier build that this one did not write (figures no longer made)."""
    for p in sorted(out_dir.iterdir()):
        if p.is_file() and p.name not in written and p.suffix in (".png", ".pdf", ".csv", ".html", ".md"):
            p.unlink()


def run_link(uri: str, run) -> str:
    if uri.startswith(("http://", "https://")):
        return run_url(uri, run.experiment_id, run.run_id)
    return run.run_id


def claims_frame(verdicts, where: str = "in its sweep's report") -> pd.DataFrame:
    """The claims table of the page: the verdict (after what no outcome of the runs could decide),
    the deciding comparison's interval that decided with its level, and the regime next to the
    paper's. A claim's comparisons are rows of their own (``where``); its ``numbers`` text
    (claims.csv) stands on the page only for a claim without comparisons."""
    df = verdict_frame(verdicts)
    df["comparisons"] = [f"{int(r['n_comparisons'])} {where}" if r["n_comparisons"] else r["numbers"]
                         for _, r in df.iterrows()]
    df["effect, % [interval that decided, level]"] = [_effect_text(r) for _, r in df.iterrows()]
    df["regime"] = [_regime_text(r) for _, r in df.iterrows()]
    df["verdict at a shared lr (sensitivity)"] = df["verdict_shared_lr"]
    df["verdict changes with tuning"] = df["verdict_changes"].map(lambda x: "CHANGES" if x else "")
    df["primary comparison"] = [_primary_text(r) for _, r in df.iterrows()]
    df["seeds for 80% power"] = [_power_text(r) for _, r in df.iterrows()]
    df["cannot be decided"] = df["undecidable"]
    df["condition"] = [f"{r['condition']} ({r['role']})".strip() if r["condition"] else r["role"]
                       for _, r in df.iterrows()]
    return df[["id", "paper", "claim", "condition", "cannot be decided", "verdict", "decided_by",
               "effect, % [interval that decided, level]", "primary comparison", "seeds for 80% power",
               "verdict at a shared lr (sensitivity)", "verdict changes with tuning", "margin", "size_flips", "regime",
               "paper_regime", "comparisons", "missing", "rule"]]


def _interval_text(low: float, high: float, level: float) -> str:
    """`` [-5.10, -0.20] at 97.5%``: an interval that decided, in percent, with its coverage."""
    if not (np.isfinite(low) or np.isfinite(high)):
        return " (no interval)"
    return f" [{percent(low, 2, unit='', missing='open')}, {percent(high, 2, unit='', missing='open')}] at {level_percent(level)}"


def _primary_text(r) -> str:
    """The primary comparison beside the deciding one, when they differ, with its interval that
    decided and its level."""
    if not r["primary"] or r["primary"] == r["decided_by"]:
        return "(the deciding one)" if r["primary"] else ""
    eff = (percent(r["primary_effect"], 2, unit="")
           + _interval_text(r["primary_ci_low"], r["primary_ci_high"], r["primary_level"])
           if np.isfinite(r["primary_effect"]) else "n/a")
    return f"{r['primary']}: {eff}"


def _effect_text(r) -> str:
    """The deciding comparison's effect and its interval that decided (relative changes in percent)
    with that interval's level; what decided where the interval does not say it all."""
    if not np.isfinite(r["effect"]):
        return ""
    how = f"; {r['decided_how']}" if r["decided_how"] else ""
    interval = _interval_text(r["ci_low"], r["ci_high"], r["level"])
    return f"{percent(r['effect'], 2, unit='')}{interval}, n={int(r['n_seeds'])}{how}"


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
                            "threshold of a threshold or equivalence (TOST) test.",
                            "forest.png" if forest is not None else None,
                            [comparisons_file] + (["forest.pdf"] if forest is not None else []),
                            [comparisons_table(verdicts)]))
    return claim_file, comparisons_file
