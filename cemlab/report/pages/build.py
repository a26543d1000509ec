"""Building a sweep's report: grid x store -> tables, figures, claims, page, MLflow artifacts.

``build_report(sweep)`` is what ``cemlab sweep`` calls at the end of a sweep and what
``cemlab report`` calls for each sweep named. It

1. expands the sweep's grid at the scale (``cemlab.sweeps.sweepfile.load``) and matches every trial to a run
   in the MLflow store by config hash, or for a ``search: optuna`` sweep every grid cell to the
   runs of its sampled learning rates by the ``cemlab.search_cell`` tag (``cemlab.report.inputs.table``);
2. draws the paper figures the sweep file lists (``figures:``), plus energy, training curves and
   the parameter/FLOPs table (``cemlab.report.figures.catalog``), each with its CSV;
3. evaluates the paper's claims the sweep file lists (``claims:``; ``cemlab.report.claims.catalog``),
   loading the grids of any other sweep whose file lists the claim too (e.g. CEM MLP vs CEM
   attention);
4. writes ``index.html`` and ``index.md`` (``cemlab.report.pages.render``), ``trials.csv``, ``cells.csv``,
   ``claims.csv`` and ``missing.csv`` to ``<out>/<sweep>/``, removing figures left over from an
   earlier report there;
5. logs the folder as artifacts (``report/``) of the sweep's latest parent run, if there is one.

Output is deterministic: the same store gives byte-identical files (no dates in PNG/PDF, stable
order). A sweep without any run in the store still gets a page, which says so.

matplotlib is imported only when a figure is saved, so ``cemlab report`` refuses a bad sweep name
without loading it; ``cemlab.sweeps.sweepfile.load`` is imported inside ``SweepGrids``, where a module-level
``spec`` would be shadowed by the local ``spec`` of :func:`make_report` and by ``SweepGrids.spec``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cemlab.paths import reports_dir
from cemlab.report.figures import catalog as figs
from cemlab.report.figures.lr_tuning import with_tuning
from cemlab.report.claims.catalog import all_claims, claims_for
from cemlab.report.inputs.grids import SweepGrids
from cemlab.report.inputs.context import ReportContext
from cemlab.report.looks.interim_look import edge_seeds, level_note, sweep_verdicts
from cemlab.report.pages.render import Page, Section, render_html, render_md
from cemlab.report.pages.writers import (claim_files, claims_frame, log_files, remove_stale, run_link, save_figure,
                                         write_csv, write_file)
from cemlab.tracking.runs import RunStore
from cemlab.tracking.store import tracking_uri as store_tracking_uri
from cemlab.report.inputs.table import MISSING, NOT_FINISHED, cell_display
from cemlab.report.claims.verdict_tables import integers as _integers, verdict_frame
from cemlab.tracking import environment, schema

#: ``cemlab report`` exit codes.
EXIT_OK = 0            # every report made has at least one run
EXIT_USAGE = 2         # unknown sweep or scale, bad arguments
EXIT_NO_RUNS = 3       # a named report (or every report) has no runs: its page says so
EXIT_STORE_LOST = 4    # the store stopped answering while the reports were built
EXIT_NOT_LOGGED = 5    # the reports were written but not logged to MLflow


@dataclass
class ReportResult:
    """What a report build did (the CLI prints it; the sweep runner may too)."""

    sweep: str
    scale: str
    out_dir: Path
    index_html: Path
    counts: dict[str, int]
    verdicts: list = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    parent_run_id: str | None = None
    publish_error: str | None = None       # one line: why the report is not in MLflow
    tracking_uri: str = ""
    published: bool = False
    experiment_id: str = ""                # the parent run's experiment (for its link)

    @property
    def empty(self) -> bool:
        return self.counts.get("runs", 0) == 0


def count_runs(sweep: str, scale: str | None, store: RunStore, grids: SweepGrids) -> int:
    """How many of the sweep's grid trials have a run in the store, at ``scale`` (None: the
    scale with most)."""
    scale = scale or choose_scale(sweep, store, grids)
    return sum(1 for t in grids.trials(sweep, scale) if store.has_runs_for(t))


def _grids_at(sweeps: list[str], scales: list[str], grids: SweepGrids) -> dict[tuple[str, str], list]:
    out = {}
    for sweep in sweeps:
        for scale in scales:
            try:
                out[(sweep, scale)] = grids.trials(sweep, scale)
            except ValueError:  # the sweep cannot be expanded at this scale
                continue
    return out


def choose_scale(sweep: str, store: RunStore, grids: SweepGrids) -> str:
    """The scale with the most grid trials that have a run; the default scale if none has any."""
    found = _grids_at([sweep], grids.scales(), grids)
    store.prefetch(t.config_hash for trials in found.values() for t in trials)
    best, best_n = grids.default_scale, 0
    for (_, scale), trials in found.items():
        n = sum(1 for t in trials if store.has_runs_for(t))
        if n > best_n:
            best, best_n = scale, n
    return best


def trial_counts(trials: pd.DataFrame) -> dict[str, int]:
    """Trials in the grid, with a run, per status (every status present), reused from other sweeps."""
    st = trials["status"].value_counts().to_dict()
    counts = {"trials": int(len(trials)), "runs": int((trials["status"] != MISSING).sum()),
              schema.STATUS_FINISHED: int(st.pop(schema.STATUS_FINISHED, 0))}
    counts.update({s: int(st.pop(s, 0)) for s in NOT_FINISHED})
    counts.update({s: int(n) for s, n in sorted(st.items())})
    counts["reused"] = int(((trials["run_sweep"] != "") & (trials["run_sweep"] != trials["sweep"])).sum())
    return counts


def search_summary(trials: pd.DataFrame, cells: list) -> str:
    """The summary line of a ``search: optuna`` sweep: cells, samples asked for and found."""
    runs = trials[trials["status"] != MISSING]
    with_runs = runs["search_cell"].nunique()
    stopped = int((runs["status"] == schema.STATUS_STOPPED).sum())
    samples = sorted({c.search.samples for c in cells if c.search is not None})
    return (f"searched by Optuna in each of {len(cells)} grid cell(s) ({'/'.join(map(str, samples))} samples each, "
            f"ASHA early stopping); {with_runs} cell(s) with runs, {len(runs)} sampled run(s) in all, {stopped} "
            "stopped early (listed, not compared: a stopped run's last validation is not a final result)")


def _figure_sections(ctx: ReportContext, spec, out_dir: Path, written: set[str]) -> list[Section]:
    """The sweep's paper figures (its ``figures:``) and the generic ones, saved with their CSVs."""
    sections = []
    builders = figs.paper_figures_for(spec.figures)
    for builder in builders + list(figs.GENERIC_FIGURES.values()):
        f = builder(ctx)
        if f is None:
            continue
        files = []
        image = None
        if f.fig is not None:
            save_figure(f.fig, out_dir, f.id, written)
            image = f"{f.id}.png"
            files.append(f"{f.id}.pdf")
        for stem, df in f.tables.items():
            files.append(write_csv(df, out_dir, stem, written))
        sections.append(Section(f.id, f.title, f.caption, image, files, [f.tables[t] for t in f.show_tables]))
    return sections


def make_report(ctx: ReportContext, out_dir: Path, publish: bool = True) -> ReportResult:
    """Write one sweep's report into ``out_dir`` (see the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    trials = ctx.trials()
    cells = ctx.cells()
    counts = trial_counts(trials)
    spec = ctx.grids.spec(ctx.sweep)
    figure_tag = str(trials["figure"].iloc[0]) if len(trials) else spec.figure

    sections = _figure_sections(ctx, spec, out_dir, written) if counts["runs"] else []
    made = [s.id for s in sections]
    verdicts = sweep_verdicts(claims_for(spec.claims), ctx)  # a seeded sweep: its looks replayed, each at its level
    claims_df = claims_frame(verdicts)
    claim_file, comparisons_file = claim_files(verdicts, out_dir, written, sections)
    trials_file = write_csv(trials.drop(columns=["cell", "order"]), out_dir, "trials", written)
    cells_file = write_csv(with_tuning(cells, trials, edge_seeds(ctx)).drop(columns=["cell", "order"]), out_dir,
                           "cells", written)
    not_done = trials[trials["status"] != schema.STATUS_FINISHED][
        ["trial_id", "variant", "size", "lr", "seed", "status", "detail", "run_id"]].reset_index(drop=True)
    missing_file = write_csv(not_done, out_dir, "missing", written)
    sections.append(Section("data", "Data", "Every trial with its run and status, the cells (below: test mean +- std "
                            "over seeds, n), the verdicts, every comparison and the trials without a finished run, as "
                            "CSV.", None, [trials_file, cells_file, claim_file, comparisons_file, missing_file],
                            [cell_display(cells)]))

    parent = ctx.store.latest_parent_run(ctx.sweep, ctx.scale)
    searched = bool((trials["search_cell"] != "").any())
    what = "(sampled learning rates, and cells without runs)" if searched else "in the grid"
    banner = None
    if counts["runs"] == 0:
        where = "none of its runs matches this sweep's grid" if ctx.store.has_runs() \
            else "the MLflow store is empty or does not exist yet"
        banner = (f"No runs of sweep '{ctx.sweep}' at scale '{ctx.scale}' were found in {ctx.store.uri} ({where}). "
                  f"Run `cemlab sweep {ctx.sweep} --scale {ctx.scale}` first; the {counts['trials']} expected "
                  f"trials are listed below.")
    summary = [
        ("sweep", ctx.sweep), ("paper", figure_tag), ("scale", ctx.scale),
        ("overrides", " ".join(ctx.grids.overrides) or "none (the sweep file's own grid)"),
        ("MLflow store", ctx.store.uri),
        ("parent run", run_link(ctx.store.uri, parent) if parent else "none (report not logged to MLflow)"),
        ("trials", f"{counts['trials']} {what}: " + ", ".join(
            f"{n} {status}" for status, n in counts.items() if status not in ("trials", "runs", "reused"))),
        ("runs reused from other sweeps", str(counts["reused"])),
        ("environment", environment.summary(trials)),
        ("claims judged", level_note(spec, ctx.scale, ctx.grids.trials(ctx.sweep, ctx.scale),
                                     seeds_run=set(trials.loc[trials["run_id"] != "", "seed"]))),
        *([("learning rate", search_summary(trials, ctx.grids.trials(ctx.sweep, ctx.scale)))] if searched else []),
        ("cells (seeds aggregated)", f"{len(cells)}; metric {', '.join(dict.fromkeys(cells['metric'])) or '-'}: "
                                     "mean, std (ddof=1) and n over finished seeds"),
    ]
    page = Page(f"cemlab report: {ctx.sweep} ({figure_tag}), scale {ctx.scale}", summary, banner, claims_df,
                sections, not_done)
    index = write_file(out_dir, "index.html", render_html(page), written)
    write_file(out_dir, "index.md", render_md(page), written)
    remove_stale(out_dir, written)

    result = ReportResult(ctx.sweep, ctx.scale, out_dir, index, counts, verdicts, made,
                          parent.run_id if parent else None, tracking_uri=ctx.store.uri,
                          experiment_id=parent.experiment_id if parent else "")
    if publish and parent is not None:
        try:
            log_files(ctx.store.client, parent.run_id, out_dir, written, schema.REPORT_ARTIFACT_DIR)
            result.published = True
        except Exception as e:  # the report on disk is complete; say why MLflow does not have it
            result.publish_error = publish_problem(e, ctx.store.uri)
    return result


def publish_problem(error: Exception, uri: str) -> str:
    """One line on why a report could not be logged: MLflow's own message for a run whose
    artifacts a server holds advises a server address that need not be this store's, so that case
    gets cemlab's words."""
    text = str(error)
    if "mlflow-artifacts" in text and not uri.startswith(("http://", "https://")):
        return (f"the parent run's artifacts are kept by the MLflow server that recorded it (mlflow-artifacts:), "
                f"and {uri} is not a server: give that server's address with --tracking-uri (or leave it out on "
                f"the project's own store, whose local server is then started), or add --no-log")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}"


def reports_root(out: str | Path | None) -> Path:
    """``out``, or ``cemlab.paths.reports_dir()`` (``$CEMLAB_REPORTS_DIR`` or ``./reports``)."""
    return Path(out).expanduser().resolve() if out is not None else reports_dir()


def report_dir(sweep: str, out: str | Path | None, rung_scale: str | None = None) -> Path:
    """Where a sweep's report goes: ``<out>/<sweep>/``; a ladder rung's (``rung_scale``, the rung's
    scale name) ``<out>/ladder/<sweep>/<rung_scale>/``, below the across-the-ladder page."""
    return reports_root(out) / "ladder" / sweep / rung_scale if rung_scale else reports_root(out) / sweep


def build(sweep: str, scale: str | None = None, out: str | Path | None = None, tracking_uri: str | None = None,
          store: RunStore | None = None, grids: SweepGrids | None = None, publish: bool = True,
          overrides: list[str] | None = None) -> ReportResult:
    """``build_report`` returning the full ``ReportResult``."""
    store = store or RunStore(tracking_uri or store_tracking_uri())
    grids = grids or SweepGrids(overrides)
    sweep = grids.add_file(sweep)
    if scale:  # an unknown sweep or scale (or overrides that do not fit it) fails here, before anything is written
        grids.spec(sweep).expand(scale, overrides=grids.overrides or None)
    else:
        grids.figure(sweep)
    scale = scale or choose_scale(sweep, store, grids)
    # one store lookup for every sweep's trials at this scale (claims and baselines read them)
    store.prefetch(t.config_hash for trials in _grids_at(grids.names(), [scale], grids).values() for t in trials)
    ctx = ReportContext(sweep, scale, store, grids)
    rung = scale if scale in grids.spec(sweep).rungs() else None
    return make_report(ctx, report_dir(sweep, out, rung), publish=publish)


def build_report(sweep: str, scale: str | None = None, out: str | Path | None = None,
                 tracking_uri: str | None = None, overrides: list[str] | None = None) -> Path:
    """Make ``<out>/<sweep>/`` (default ``./reports/<sweep>/``) from the runs in MLflow and log it
    to the sweep's latest parent run; returns the path of its ``index.html``. ``sweep``: a name in
    the sweeps folder or the path of a ``.yaml`` sweep file (the report is then ``<out>/<file name>/``).

    ``scale`` defaults to the scale with the most runs of this sweep; ``tracking_uri`` to
    ``$MLFLOW_TRACKING_URI`` or the project's store. Raises ``cemlab.sweeps.sweepfile.load.SweepError`` for
    an unknown sweep or scale."""
    result = build(sweep, scale, out, tracking_uri, overrides=overrides)
    if result.publish_error:
        print(f"cemlab report: the report of {sweep} was written but not logged to MLflow: {result.publish_error}",
              file=sys.stderr)
    return result.index_html


def build_overview(results: list[ReportResult], out: str | Path | None, store: RunStore, grids: SweepGrids,
                   scale: str | None) -> Path:
    """``<out>/index.html`` (and ``.md``): links to each sweep's report and every claim's verdict
    (claims evaluated at ``scale``, or each claim at the scale of its first sweep's report)."""
    root = reports_root(out)
    root.mkdir(parents=True, exist_ok=True)
    scales = {r.sweep: r.scale for r in results}
    verdicts = []
    contexts: dict[str, ReportContext] = {}
    for claim in all_claims():
        sweeps = list(claim.sweeps)
        s = scale or next((scales[n] for n in sweeps if n in scales), grids.default_scale)
        ctx = contexts.setdefault(s, ReportContext(sweeps[0] if sweeps else "", s, store, grids))
        verdicts += sweep_verdicts([claim], ctx, sweeps[0] if sweeps else None)
    total_runs = sum(r.counts.get("runs", 0) for r in results)
    banner = None
    if total_runs == 0:
        banner = (f"The MLflow store {store.uri} holds no runs of any sweep"
                  f"{' at scale ' + scale if scale else ''}. Run `cemlab sweep NAME` first.")
    summary = [("MLflow store", store.uri), ("scale", scale or "per sweep: the scale with most runs"),
               ("sweeps", ", ".join(f"{r.sweep} ({r.scale}: {r.counts.get('runs', 0)} runs)" for r in results)
                or "none")]
    links = [(r.sweep, f"{r.sweep}/index.html") for r in results]
    page = Page("cemlab reports", summary, banner, claims_frame(verdicts), [], None, links)
    (root / "index.html").write_text(render_html(page), encoding="utf-8")
    (root / "index.md").write_text(render_md(page), encoding="utf-8")
    _integers(verdict_frame(verdicts), ["n_seeds", "steps", "n_comparisons"]).to_csv(
        root / "claims.csv", index=False, lineterminator="\n")
    return root / "index.html"
