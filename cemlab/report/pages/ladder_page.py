"""The across-the-ladder report (``cemlab report NAME --ladder``; ``cemlab sweep NAME --ladder``
builds it at the end): every comparison of every claim at every rung of the sweep's ladder, its
trend with training and its ladder verdict (``cemlab.report.stats.trend``), and how well a cheap rung
predicts the top one. Written to ``<reports>/ladder/<sweep>/``, each rung's own report in the
folder of its scale below it. A rung with runs in the MLflow store gets its report rebuilt from
them; a rung without reads the report its folder already holds, so that a ladder whose rungs ran
on different machines (each rung's report committed as it finished) is reported whole:

- ``index.md`` / ``index.html``: the page;
- ``ladder.csv``: one row per comparison and rung (effect, interval and its level, verdict, the
  claim condition's verdict, the comparison's trend, its fitted line and its ladder verdict);
- ``verdicts.csv``: one row per comparison: its verdict at each rung, trend and ladder verdict;
- ``claims.csv``: each claim condition's verdict at each rung;
- ``accuracy.csv``: per lower rung, the share of decisions that agree with the top rung's, each
  with its exact (Clopper-Pearson) 95% interval;
- ``trials.csv``: every trial of every rung (rung, config hash, seed, learning rate, validation and
  test perplexity);
- ``forest.png`` / ``trend.png`` (and PDF): the intervals grouped by comparison, one row per rung,
  and one panel per comparison of its effect against tokens per parameter on a log-ratio axis
  with its fitted trend (``cemlab.report.figures.ladder_figures``). Both are ladder figures registered
  through ``cemlab.report.registry.register_figure(..., ladder=True)``, as a plugin's would be;
  each draws from the rows of ``ladder.csv``;
- ``lr_optima_ladder.png`` / ``.csv``: each cell's learning-rate optimum at each rung with its carried
  prediction (``cemlab.report.figures.ladder_optima``), and ``carried_accuracy.csv``: per rung, how
  near the carried prediction came to the optimum the rung found.

Each rung is judged exactly as its own report judges it (``look.sweep_verdicts``: its looks
replayed, at its planned level). Nothing is projected beyond the top rung.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cemlab.report.stats.percent import percent
from cemlab.report.inputs.context import ReportContext
from cemlab.report.pages.build import make_report, publish_problem, reports_root
from cemlab.report.pages.writers import log_files, remove_stale, save_figure, write_csv, write_file
from cemlab.report.inputs.grids import SweepGrids
from cemlab.report.figures.ladder_optima import (CARRIED_CAPTION, carried_accuracy, optima_figure, optima_table,
                                                  rate_lattice, schedule_words)
from cemlab.report.figures.ladder_figures import relative_effect  # it also registers the page's forest and trend
from cemlab.report.registry import ladder_figures_for
from cemlab.report.pages.render import Page, Section, render_html, render_md
from cemlab.report.stats.significance import LEVEL, t_interval
from cemlab.report.inputs.table import MISSING
from cemlab.report.stats.trend import DECISIVE, ladder_verdict, trend
from cemlab.report.claims.verdict_tables import parse_seed_diffs
from cemlab.tracking import environment, schema
from cemlab.tracking.runs import RunStore

#: The folder of the across-the-ladder page inside a sweep's report folder.
LADDER_DIR = "ladder"


@dataclass
class Rung:
    """One rung as the ladder report reads it: its report's tables (comparisons.csv, claims.csv,
    trials.csv), rebuilt from the store where it has the rung's runs, else as written before (a
    committed rung). ``source``: ``store``, ``files`` or ``none`` (not run)."""

    rung: float
    scale: str
    tokens: float              # training tokens of a trial (the matched Llama's budget)
    steps: float
    epochs: float
    trials: pd.DataFrame
    comparisons: pd.DataFrame
    claims: pd.DataFrame
    source: str = "none"
    #: The rung's cells.csv (each cell's tuning: best rate, bracketed, Akima optimum).
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The rung's learning-rate lattice, (grid, ratio, bounds, rule): its lr axis, their ratio
    #: (``SweepSpec.rate_ratio``), ``tuning.bounds`` and its ``ladder.carry_rule``; None without tuning
    #: (``rate_lattice``).
    lattice: tuple | None = None
    #: Its runs' schedule: ``train.warmup_frac`` and ``train.final_lr_factor`` of its config.
    warmup_frac: float = math.nan
    final_lr_factor: float = math.nan

    @property
    def has_runs(self) -> bool:
        return self.source != "none" and bool((self.trials.get("status", pd.Series(dtype=str)) != MISSING).any())

    def count(self, status: str | None = None) -> int:
        if status is None:
            return int(len(self.trials))
        return int((self.trials["status"] == status).sum()) if len(self.trials) else 0


@dataclass
class LadderResult:
    sweep: str
    out_dir: Path
    index_html: Path
    rungs: list[Rung]
    comparisons: pd.DataFrame
    parent_run_id: str | None = None
    published: bool = False
    publish_error: str | None = None


def ladder_dir(sweep: str, out: str | Path | None) -> Path:
    """Where a sweep's across-the-ladder report goes: ``<out>/ladder/<sweep>/``, each rung's own
    report in the folder of its scale below it (``cemlab report NAME --ladder --out docs`` writes
    ``docs/ladder/NAME/``)."""
    return reports_root(out) / LADDER_DIR / sweep


def _read(folder: Path, name: str) -> pd.DataFrame:
    p = folder / f"{name}.csv"
    return pd.read_csv(p, keep_default_na=False, na_values=[""]) if p.is_file() else pd.DataFrame()


def read_rungs(sweep: str, store: RunStore, grids: SweepGrids, out: str | Path | None = None,
               publish: bool = True) -> list[Rung]:
    """Every rung of ``sweep``'s ladder, cheapest first. A rung with runs in the store gets its report
    (``build.make_report``) rebuilt in its folder first; a rung without gets the tables its folder
    already holds (committed results), or none."""
    from cemlab.sweeps.ladder_plan import trial_budget

    spec = grids.spec(sweep)
    out_rungs = []
    for scale, r in spec.rungs().items():
        folder = ladder_dir(sweep, out) / scale
        grid = grids.trials(sweep, scale)
        store.prefetch(t.config_hash for t in grid)
        source = "none"
        if any(store.has_runs_for(t) for t in grid):
            make_report(ReportContext(sweep, scale, store, grids), folder, publish=publish)
            source = "store"
        elif (folder / "comparisons.csv").is_file() and (folder / "trials.csv").is_file():
            source = "files"
        tokens, steps = trial_budget(grid[0])
        trials = _read(folder, "trials") if source != "none" else pd.DataFrame()
        have = pd.to_numeric(trials.get("train_tokens", pd.Series(dtype=float)), errors="coerce").dropna()
        epochs = tokens / float(have.iloc[0]) if len(have) and have.iloc[0] > 0 else math.nan
        train = grid[0].config.train
        out_rungs.append(Rung(r, scale, float(tokens), float(steps), epochs, trials.assign(rung=r, rung_scale=scale),
                              _read(folder, "comparisons") if source != "none" else pd.DataFrame(),
                              _read(folder, "claims") if source != "none" else pd.DataFrame(), source,
                              _read(folder, "cells") if source != "none" else pd.DataFrame(),
                              rate_lattice(spec, scale, grid), float(train.warmup_frac), float(train.final_lr_factor)))
    return out_rungs


def comparison_rows(rungs: list[Rung], alpha: float | None = None) -> pd.DataFrame:
    """ladder.csv: one row per comparison and rung, with the comparison's trend (``slope``,
    ``slope_low``, ``slope_high`` per doubling of tokens, shown as the effect is), its fitted line
    (through ``trend_center`` at ``trend_tokens`` training tokens, with that slope: ``trend.Trend``)
    and its ladder verdict."""
    from cemlab.report.stats.decision import ALPHA

    alpha = ALPHA if alpha is None else alpha
    rows, points = [], {}
    for rg in rungs:
        if rg.comparisons.empty:
            continue
        claim_verdicts = {(str(c["id"]), _text(c["condition"])): str(c["verdict"]) for _, c in rg.claims.iterrows()}
        for _, c in rg.comparisons.iterrows():
            k = (str(c["id"]), _text(c["condition"]), str(c["comparison"]))
            points.setdefault(k, {})[rg.rung] = parse_seed_diffs(c.get("seed_diffs", ""))
            rows.append(dict(claim=k[0], condition=k[1], role=str(c["role"]), comparison=k[2], rung=rg.rung,
                             tokens=rg.tokens, steps=rg.steps, epochs=rg.epochs, n=int(c["n"]),
                             effect=float(c["effect"]), ci_low=float(c["ci_low"]), ci_high=float(c["ci_high"]),
                             level=float(c["level"]), verdict=str(c["verdict"]),
                             claim_verdict=claim_verdicts.get(k[:2], "")))
    df = pd.DataFrame(rows, columns=["claim", "condition", "role", "comparison", "rung", "tokens", "steps", "epochs",
                                     "n", "effect", "ci_low", "ci_high", "level", "verdict", "claim_verdict"])
    # the trend's scale: the log ratio for a relative effect (shown as exp(x) - 1), else the effect
    log = lambda x: float(np.log1p(x)) if math.isfinite(x) else math.nan   # noqa: E731
    tokens = {rg.rung: rg.tokens for rg in rungs}
    extra = {}
    for k, pts in points.items():
        tr = trend(pts, tokens, alpha)
        rel = relative_effect(k[0])
        show = (lambda x: math.expm1(x) if math.isfinite(x) else x) if rel else (lambda x: x)
        mine = df[(df["claim"] == k[0]) & (df["condition"] == k[1]) & (df["comparison"] == k[2])]
        effects = [(r, log(e) if rel else e) for r, e in zip(mine["rung"], mine["effect"])]
        word, text = ladder_verdict(list(zip(mine["rung"], mine["verdict"])), tr,
                                    None if rel else (lambda v: f"{v:+.3g}"), effects)
        extra[k] = dict(slope=show(tr.slope), slope_low=show(tr.low), slope_high=show(tr.high), slope_level=tr.level,
                        slope_seeds=tr.seeds, trend_center=show(tr.center),
                        trend_tokens=2.0 ** tr.x_center if math.isfinite(tr.x_center) else math.nan,
                        ladder=word, ladder_verdict=text)
    for col in ("slope", "slope_low", "slope_high", "slope_level", "slope_seeds", "trend_center", "trend_tokens",
                "ladder", "ladder_verdict"):
        df[col] = [extra[(r.claim, r.condition, r.comparison)][col] for r in df.itertuples()]
    return df


def _text(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def verdict_table(df: pd.DataFrame) -> pd.DataFrame:
    """verdicts.csv: one row per comparison: its verdict at each rung, trend and ladder verdict."""
    out = []
    for (claim, cond, comp), g in df.groupby(["claim", "condition", "comparison"], sort=False):
        g = g.sort_values("rung")
        first = g.iloc[0]
        out.append(dict(claim=claim, condition=cond, role=first["role"], comparison=comp,
                        **{f"rung {r:g}": f"{v} {percent(e)} [{percent(lo)}, {percent(hi)}]" if math.isfinite(e) else v
                           for r, v, e, lo, hi in zip(g["rung"], g["verdict"], g["effect"], g["ci_low"],
                                                      g["ci_high"])},
                        ladder=first["ladder"], ladder_verdict=first["ladder_verdict"]))
    return pd.DataFrame(out)


def claim_table(rungs: list[Rung]) -> pd.DataFrame:
    """claims.csv: each claim condition's verdict (and its deciding comparison) at each rung."""
    out: dict[tuple, dict] = {}
    for rg in rungs:
        for _, v in rg.claims.iterrows():
            cond = _text(v["condition"])
            row = out.setdefault((v["id"], cond), dict(claim=v["id"], condition=cond, role=v["role"]))
            by = _text(v.get("decided_by"))
            row[f"rung {rg.rung:g}"] = str(v["verdict"]) + (f" ({by})" if by else "")
    return pd.DataFrame(list(out.values()))


def _tuned_cells(trials: pd.DataFrame) -> dict[str, pd.Series]:
    """Per cell (variant), the per-seed log test metric at its rate with the lowest mean log
    validation metric over its seeds (the geometric mean validation perplexity)."""
    out = {}
    if trials.empty:
        return out
    done = trials[np.isfinite(pd.to_numeric(trials["value"], errors="coerce").to_numpy(dtype=float))]
    for variant, g in done.groupby("variant", sort=False):
        best, best_val = None, math.inf
        for lr, h in g.groupby("lr", sort=True):
            val = np.log(pd.to_numeric(h["val"], errors="coerce").to_numpy(dtype=float))
            val = val[np.isfinite(val)]
            if len(val) and float(val.mean()) < best_val:
                best, best_val = h, float(val.mean())
        if best is not None:
            out[str(variant)] = np.log(best.drop_duplicates("seed").set_index("seed")["value"].astype(float))
    return out


def pair_directions(trials: pd.DataFrame) -> dict[tuple[str, str], tuple[int, bool]]:
    """Every pair of cells at their tuned rates: (sign of the mean paired log difference B - A,
    whether its 95% t-interval excludes zero)."""
    cells = _tuned_cells(trials)
    out = {}
    for a, b in itertools.combinations(sorted(cells), 2):
        seeds = sorted(set(cells[a].index) & set(cells[b].index))
        if not seeds:
            continue
        iv = t_interval((cells[b].reindex(seeds) - cells[a].reindex(seeds)).to_numpy(dtype=float), LEVEL)
        out[(a, b)] = (int(np.sign(iv.effect)), iv.finite and (iv.low > 0 or iv.high < 0))
    return out


#: The interval of every share in accuracy.csv, in words.
SHARE_INTERVAL = "exact Clopper-Pearson 95%"


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``level`` interval of a share of ``k`` in ``n``
    independent trials: the ``(1 - level) / 2`` quantile of Beta(k, n - k + 1) and the
    ``(1 + level) / 2`` quantile of Beta(k + 1, n - k) (0 at k = 0, 1 at k = n); NaN without trials.
    ``scipy.special.betaincinv`` is ``scipy.stats.beta.ppf`` without its import."""
    from scipy.special import betaincinv

    if n <= 0:
        return math.nan, math.nan
    a = 1.0 - level
    low = 0.0 if k <= 0 else float(betaincinv(k, n - k + 1, a / 2))
    high = 1.0 if k >= n else float(betaincinv(k + 1, n - k, 1 - a / 2))
    return low, high


def _share(rung: float, top: float, what: str, compared: int, agree: int) -> dict:
    low, high = clopper_pearson(agree, compared)
    return dict(rung=rung, top=top, what=what, compared=compared, agree=agree,
                share=agree / compared if compared else math.nan, share_low=low, share_high=high,
                interval=SHARE_INTERVAL)


#: accuracy.csv's readings, in its ``what`` column.
TOP_DECIDED = "comparisons decided at the top rung (same verdict; undecided here counts as a miss)"
BOTH_DECIDED = "comparisons decided at both rungs (same verdict; undecided here left out)"
PAIRS = "pairs of cells at tuned rates (same direction)"
PAIRS_DECIDED = "pairs of cells decided at both rungs (95% interval)"


def accuracy(rungs: list[Rung], df: pd.DataFrame) -> pd.DataFrame:
    """accuracy.csv: for each lower rung against the top rung with runs, the share of decisions
    that agree, each with its exact Clopper-Pearson 95% interval (``clopper_pearson``):

    - the comparisons decided at the top rung, and how many this rung decides the same way (the
      direction, for supported and contradicted): an undecided verdict here counts as a miss;
    - the comparisons decided at both rungs, and how many agree: an undecided verdict here is left
      out (so "4 of 4" may be 4 of the top rung's 6);
    - the pairs of cells at their tuned rates: how many point the same way, all of them and those
      whose 95% interval excludes zero at both rungs.

    The intervals treat the comparisons and the pairs as independent trials. They are not: pairs
    of cells share cells (each cell is in every pair it belongs to), comparisons share cells and
    seeds, so the intervals are narrower than the evidence warrants."""
    cols = ["rung", "top", "what", "compared", "agree", "share", "share_low", "share_high", "interval"]
    judged = [rg for rg in rungs if rg.has_runs]
    if len(judged) < 2:
        return pd.DataFrame(columns=cols)
    top = judged[-1]
    out = []
    top_v = df[df["rung"] == top.rung].set_index(["claim", "condition", "comparison"])["verdict"]
    top_decided = [k for k in top_v.index if top_v[k] in DECISIVE]
    top_pairs = pair_directions(top.trials)
    for rg in judged[:-1]:
        mine = df[df["rung"] == rg.rung].set_index(["claim", "condition", "comparison"])["verdict"]
        same = sum(1 for k in top_decided if k in mine.index and mine[k] == top_v[k])
        out.append(_share(rg.rung, top.rung, TOP_DECIDED, len(top_decided), same))
        both = [k for k in top_decided if k in mine.index and mine[k] in DECISIVE]
        out.append(_share(rg.rung, top.rung, BOTH_DECIDED, len(both), sum(1 for k in both if mine[k] == top_v[k])))
        pairs = pair_directions(rg.trials)
        common = [p for p in pairs if p in top_pairs]
        out.append(_share(rg.rung, top.rung, PAIRS, len(common),
                          sum(1 for p in common if pairs[p][0] == top_pairs[p][0])))
        dec = [p for p in common if pairs[p][1] and top_pairs[p][1]]
        out.append(_share(rg.rung, top.rung, PAIRS_DECIDED, len(dec),
                          sum(1 for p in dec if pairs[p][0] == top_pairs[p][0])))
    return pd.DataFrame(out, columns=cols)


def accuracy_display(acc: pd.DataFrame) -> pd.DataFrame:
    """accuracy.csv as the page shows it: "4 of 6" and "67% [22%, 96%]"."""
    def share(r) -> str:
        if not r.compared:
            return "n/a (none to compare)"
        return f"{r.share:.0%} [{r.share_low:.0%}, {r.share_high:.0%}]"

    return pd.DataFrame([{"rung": r.rung, "against": r.top, "what": r.what, "agree": f"{r.agree} of {r.compared}",
                          f"share [{SHARE_INTERVAL}]": share(r)} for r in acc.itertuples()],
                        columns=["rung", "against", "what", "agree", f"share [{SHARE_INTERVAL}]"])


def trials_table(rungs: list[Rung]) -> pd.DataFrame:
    """trials.csv: every trial of every rung."""
    cols = ["rung", "rung_scale", "trial_id", "variant", "group", "lr", "seed", "config_hash", "status", "val",
            "value", "run_id", "run_sweep", *environment.TAGS]  # environment: rungs that recorded it
    frames = [rg.trials for rg in rungs if len(rg.trials)]
    if not frames:
        return pd.DataFrame(columns=cols)
    df = pd.concat(frames, ignore_index=True)
    keep = [c for c in cols if c in df.columns]
    return df[keep].rename(columns={"val": "val_ppl", "value": "test_ppl"})


def _sections(rungs: list[Rung], df: pd.DataFrame, vt: pd.DataFrame, out_dir: Path, written: set[str],
              sweep: str) -> list:
    """The page's sections, with their figures (``registry.ladder_figures_for``) and CSV files
    written to ``out_dir``."""
    sections = []
    acc, claims = accuracy(rungs, df), claim_table(rungs)
    files = {name: write_csv(frame, out_dir, name, written) for name, frame in (
        ("ladder", df), ("verdicts", vt), ("claims", claims), ("accuracy", acc), ("trials", trials_table(rungs)))}
    rung_rows = pd.DataFrame([dict(rung=rg.rung, scale=rg.scale, tokens=rg.tokens, steps=rg.steps,
                                   epochs=round(rg.epochs, 3) if math.isfinite(rg.epochs) else math.nan,
                                   trials=rg.count(), finished=rg.count(schema.STATUS_FINISHED),
                                   diverged=rg.count(schema.STATUS_DIVERGED), results={"store": "from the store",
                                   "files": "as committed (no runs in this store)"}.get(rg.source, ""),
                                   report=f"{rg.scale}/index.html" if rg.has_runs else "not run yet")
                              for rg in rungs])
    sections.append(Section("rungs", "The rungs", "One model width, the rungs differing in training length only "
                            "(tokens per parameter of the matched Llama; epochs: passes over the corpus's training "
                            "split). Each rung's own report is in the folder named by its scale.", None, [],
                            [rung_rows]))
    sections.append(Section("verdicts", "Ladder verdicts", "Per comparison: its verdict, effect and interval at each "
                            "rung (as its rung's report judges it, at that rung's level), and its ladder verdict: "
                            "holds at every rung, flips between two rungs (decisive at both, opposite verdicts), "
                            "changes with training (the per-seed slope of its log ratio per doubling of tokens, with "
                            "its 95% interval, excludes zero) or open (docs/ladder.md).", None,
                            [files["verdicts"], files["ladder"]], [vt]))
    sections.append(Section("claims", "Claim conditions at each rung", "Each claim condition's verdict at each rung, "
                            "with the comparison that decided it.", None, [files["claims"]], [claims]))
    sections.append(Section("accuracy", "How well a cheaper rung predicts the top one", "Decision accuracy, as "
                            "DataDecide measures it: for each lower rung against the top rung, how often the cheap "
                            "decision matches the expensive one, each share with its exact Clopper-Pearson 95% "
                            "interval (scipy's beta quantiles). The comparisons in two readings: of those decided at "
                            "the top rung, how many this rung decides the same way, an undecided verdict here "
                            "counted as a miss; and of those decided at both rungs, how many agree, an undecided "
                            "verdict here left out (so a short count such as 4 of 4 is 4 of the top rung's 6). Then "
                            "the pairs of cells at their tuned rates (each cell's rate chosen on its geometric mean "
                            "validation perplexity): how many point the same way, all of them and those whose 95% "
                            "interval excludes zero at both rungs. The intervals treat the comparisons and the "
                            "pairs as independent; they are not: pairs of cells share cells (each cell is in every "
                            "pair it belongs to), and comparisons share cells and seeds (a claim's comparisons share "
                            "their reference), so the intervals are narrower than the evidence warrants.",
                            None, [files["accuracy"]], [accuracy_display(acc)]))
    optima = optima_table(rungs)
    for builder in [*ladder_figures_for(sweep), lambda _df: optima_figure(optima, schedule_words(rungs))]:
        f = builder(df)
        if f is None:
            continue
        image, more = None, []
        if f.fig is not None:
            save_figure(f.fig, out_dir, f.id, written)
            image, more = f"{f.id}.png", [f"{f.id}.pdf"]
        more += [write_csv(t, out_dir, stem, written) for stem, t in f.tables.items()]
        sections.append(Section(f.id, f.title, f.caption, image, more + [files["ladder"]],
                                [f.tables[t] for t in f.show_tables]))
    if not optima.empty:
        carry = carried_accuracy(optima)
        sections.append(Section("carried_accuracy", "How well the carried rate predicted each rung's optimum",
                                CARRIED_CAPTION, None, [write_csv(carry, out_dir, "carried_accuracy", written),
                                                        "lr_optima_ladder.csv"], [carry]))
    return sections


def build_ladder(sweep: str, out: str | Path | None = None, store: RunStore | None = None,
                 grids: SweepGrids | None = None, overrides: list[str] | None = None,
                 publish: bool = True, tracking_uri: str | None = None) -> LadderResult:
    """Write the across-the-ladder report of ``sweep`` (see the module docstring)."""
    from cemlab.tracking.store import tracking_uri as store_tracking_uri

    store = store or RunStore(tracking_uri or store_tracking_uri())
    grids = grids or SweepGrids(overrides)
    sweep = grids.add_file(sweep)
    spec = grids.spec(sweep)
    if spec.ladder is None:
        from cemlab.sweeps.sweepfile.schema import SweepError

        raise SweepError(f"{spec.source}: this sweep has no ladder (no ladder: section); nothing to report with --ladder")
    out_dir = ladder_dir(sweep, out)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    rungs = read_rungs(sweep, store, grids, out, publish)
    df = comparison_rows(rungs)
    vt = verdict_table(df)
    sections = _sections(rungs, df, vt, out_dir, written, sweep)
    judged = [rg for rg in rungs if rg.has_runs]
    summary = [("sweep", sweep), ("ladder", f"scale {spec.ladder.scale}, size {spec.ladder.size}, rungs "
                                           + ", ".join(f"{r:g}" for r in spec.ladder.rungs) + " tokens per parameter"),
               ("rungs with runs", ", ".join(f"{rg.rung:g}" for rg in judged) or "none"),
               ("MLflow store", store.uri),
               ("comparisons", f"{len(vt)}; ladder verdicts: " + ", ".join(
                   f"{n} {w}" for w, n in vt["ladder"].value_counts().items()) if len(vt) else "none"),
               ("trials", f"{sum(rg.count() for rg in rungs)} in all, "
                          f"{sum(rg.count(schema.STATUS_FINISHED) for rg in rungs)} finished")]
    banner = None if judged else (f"No runs of the ladder of '{sweep}' in {store.uri}: run `cemlab sweep {sweep} "
                                  f"--ladder` first.")
    page = Page(f"cemlab ladder: {sweep}", summary, banner, None, sections, None,
                [(f"rung {rg.rung:g}", f"{rg.scale}/index.html") for rg in judged])
    index = write_file(out_dir, "index.html", render_html(page), written)
    write_file(out_dir, "index.md", render_md(page), written)
    remove_stale(out_dir, written)
    result = LadderResult(sweep, out_dir, index, rungs, df)
    parent = store.latest_parent_run(sweep, judged[-1].scale) if judged else None
    if publish and parent is not None:
        result.parent_run_id = parent.run_id
        try:
            log_files(store.client, parent.run_id, out_dir, written, LADDER_DIR)  # not the rungs' reports
            result.published = True
        except Exception as e:
            result.publish_error = publish_problem(e, store.uri)
    return result
