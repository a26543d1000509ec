"""``cemlab report``: regenerate sweep reports from the runs in MLflow.

Exit codes (``EPILOG``): 0 reports built (without sweep names: at least one with runs); 2 unknown
sweep or scale, or the store does not answer; 3 no runs (a named sweep, or every sweep); 4 the
store stopped answering during the report; 5 the reports were written but not logged to MLflow.

The reports are logged to each sweep's parent run through the store's server: a sweep's runs keep
their artifacts on the server that recorded them (``mlflow-artifacts:``), which the sqlite file
alone cannot write to, so on the project's own store the local server is started (or reused).

What ``run`` needs (the report builder with pandas, the runs and the store) is imported inside it,
so ``cemlab --help``, which imports every command's ``cli`` module, does not load it.
"""

from __future__ import annotations

import argparse
import sys

from cemlab.links import COMMAND, PATH, URL, print_link

EPILOG = """\
Reports go to DIR/<sweep>/ (index.html, index.md, figures as PNG and PDF, a CSV per figure,
claims.csv, trials.csv, cells.csv, missing.csv) and are logged as artifacts (report/) of the
sweep's latest parent run in MLflow, through the store's server (on the project's own store the
local server is started, as `cemlab ui` does). With several sweeps, DIR/index.html lists them all
with every claim's verdict.

exit codes:
  0  the reports were built and logged; without SWEEP names, at least one sweep has runs (the
     sweeps without runs are listed)
  2  unknown sweep or scale, or the tracking store does not answer
  3  no runs: a named sweep has none, or no sweep has any (each page is written and says so)
  4  the tracking store stopped answering while the reports were built (one line names it)
  5  the reports were written but could not be logged to MLflow (one line says why)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP",
                        help="sweep names (files in sweeps/; none: every sweep with runs in the store), and the "
                             "key=value overrides the sweep ran with (as for `cemlab sweep`)")
    parser.add_argument("--all", action="store_true", help="every sweep file, with runs or not")
    parser.add_argument("--scale", default=None,
                        help="smoke | tiny | paper (default: for each sweep, the scale with most runs)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="reports folder (default: $CEMLAB_REPORTS_DIR or ./reports)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: $MLFLOW_TRACKING_URI or the project's store)")
    parser.add_argument("--no-log", action="store_true", help="do not log the reports to MLflow")
    parser.add_argument("--ladder", action="store_true",
                        help="the across-the-ladder report of SWEEP (its ladder: rungs), in DIR/<sweep>/ladder/")


def run(args: argparse.Namespace) -> int:
    from cemlab.report.pages.build import EXIT_STORE_LOST, EXIT_USAGE, reports_root
    from cemlab.tracking.store import probe_store

    try:
        uri, not_logged = _store_uri(args)
        probe_store(uri)  # MLflow would retry a dead server for minutes
    except RuntimeError as e:  # StoreError among them
        print(f"cemlab report: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _report(args, uri, not_logged)
    except Exception as e:
        lost = _store_problem(uri)
        if lost is None:
            raise
        print(f"cemlab report: the MLflow store {uri} stopped answering during the report ({lost}; "
              f"{type(e).__name__}); the pages written before are in {reports_root(args.out)}; run the same "
              f"command again once the store answers", file=sys.stderr)
        return EXIT_STORE_LOST


def _store_uri(args) -> tuple[str, str | None]:
    """The store to read and log through, and why the reports will not be logged (or None). On the
    project's own store (no ``--tracking-uri``, no ``$MLFLOW_TRACKING_URI``) that is the local
    server (started if needed): the parent runs' artifacts are the server's (``mlflow-artifacts:``)."""
    from cemlab.tracking.server import ServerError, start_server
    from cemlab.tracking.store import configured_tracking_uri, store_exists, tracking_uri

    uri = args.tracking_uri or tracking_uri()
    if args.no_log or args.tracking_uri or configured_tracking_uri() or not store_exists(uri):
        return uri, None
    try:
        return start_server(), None
    except ServerError as e:  # read the sqlite file; the reports are written, not logged
        args.no_log = True
        return uri, f"the local MLflow server of {uri} could not be started ({str(e).splitlines()[0]})"


def _store_problem(uri: str) -> str | None:
    """Why the store ``uri`` does not answer now (a few seconds), or None when it does."""
    from cemlab.tracking.store import StoreError, probe_store

    try:
        probe_store(uri, timeout_s=5.0)
    except StoreError as e:
        return str(e).split(" does not answer (", 1)[-1].split(")", 1)[0]
    return None


def _report(args, uri: str, not_logged: str | None) -> int:
    from cemlab.report.pages.build import (EXIT_NO_RUNS, EXIT_NOT_LOGGED, EXIT_OK, EXIT_USAGE, SweepGrids, build,
                                     build_overview, count_runs)
    from cemlab.sweeps.sweepfile.load import SweepError
    from cemlab.tracking.runs import RunStore

    store = RunStore(uri)
    # key=value: the overrides the sweep ran with (as `cemlab sweep NAME key=value ...`)
    overrides = [s for s in args.sweeps if "=" in s]
    args.sweeps = [s for s in args.sweeps if "=" not in s]
    grids = SweepGrids(overrides)
    if args.ladder:
        return _ladder(args, store, grids, overrides)
    try:
        available = grids.names()
        if args.scale is not None and args.scale not in grids.scales():
            raise SweepError(f"unknown scale {args.scale!r}; choose one of {grids.scales()}")
        args.sweeps = [grids.add_file(s) for s in args.sweeps]  # a path to a .yaml file: its name
        unknown = [s for s in args.sweeps if s not in available and s not in grids.loaded()]
        if unknown:
            raise SweepError(f"unknown sweep(s) {unknown}; available: {available}")
        if args.sweeps:
            names = args.sweeps
        elif args.all:
            names = available
        else:  # every sweep with at least one run in the store
            names = [n for n in available if count_runs(n, args.scale, store, grids)]
        results = [build(name, args.scale, args.out, store=store, grids=grids, publish=not args.no_log,
                         overrides=overrides) for name in names]
    except SweepError as e:
        print(f"cemlab report: {e}", file=sys.stderr)
        return EXIT_USAGE

    for r in results:
        _print_result(r)
        if r.empty:
            _name_other_scales(r, store, grids, count_runs)
    if len(results) != 1:
        overview = build_overview(results, args.out, store, grids, args.scale)
        print_link("overview:", overview, PATH)
    with_runs = [r for r in results if not r.empty]
    if not with_runs:
        print(f"cemlab report: the MLflow store {uri} holds no runs of any sweep; run `cemlab sweep NAME` first",
              file=sys.stderr)
        return EXIT_NO_RUNS
    if not args.sweeps:  # every sweep asked for: those without runs are listed, not an error
        built = {r.sweep for r in with_runs}
        without = [n for n in available if n not in built]
        if without:
            print(f"sweeps without runs{' at scale ' + args.scale if args.scale else ''}: {', '.join(without)}")
    elif len(with_runs) < len(results):
        return EXIT_NO_RUNS
    if not_logged:
        print(f"cemlab report: reports written, not logged to MLflow: {not_logged}", file=sys.stderr)
    if not_logged or any(r.publish_error for r in with_runs):
        return EXIT_NOT_LOGGED
    return EXIT_OK


def _ladder(args, store, grids, overrides: list[str]) -> int:
    """``cemlab report SWEEP --ladder``: the across-the-ladder page of one sweep (``cemlab.report.pages.ladder_page``)."""
    from cemlab.report.pages.build import EXIT_NO_RUNS, EXIT_NOT_LOGGED, EXIT_OK, EXIT_USAGE
    from cemlab.report.pages.ladder_page import build_ladder
    from cemlab.sweeps.sweepfile.load import SweepError

    if len(args.sweeps) != 1:
        print("cemlab report: --ladder takes one SWEEP, e.g. cemlab report recursion_ablation --ladder", file=sys.stderr)
        return EXIT_USAGE
    try:
        r = build_ladder(args.sweeps[0], args.out, store=store, grids=grids, overrides=overrides,
                         publish=not args.no_log)
    except SweepError as e:
        print(f"cemlab report: {e}", file=sys.stderr)
        return EXIT_USAGE
    judged = [rg for rg in r.rungs if rg.has_runs]
    n = len(r.comparisons[["claim", "condition", "comparison"]].drop_duplicates())
    print(f"{r.sweep} ladder: rungs with runs {', '.join(f'{rg.rung:g}' for rg in judged) or 'none'} of "
          f"{', '.join(f'{rg.rung:g}' for rg in r.rungs)}; {n} comparisons")
    print_link("  ladder report:", r.index_html, PATH)
    if not judged:
        return EXIT_NO_RUNS
    if r.publish_error:
        print(f"cemlab report: the ladder report was written, not logged to MLflow: {r.publish_error}", file=sys.stderr)
        return EXIT_NOT_LOGGED
    return EXIT_OK


def _name_other_scales(r, store, grids, count_runs) -> None:
    """A sweep with no runs at the asked scale: name the scales where it has some."""
    others = []
    for s in grids.scales():
        try:
            if s != r.scale and count_runs(r.sweep, s, store, grids):
                others.append(s)
        except ValueError:  # the sweep has no grid at that scale
            continue
    if others:
        print(f"  {r.sweep} has runs at scale {', '.join(others)}: add --scale {others[0]}")


def _print_result(r) -> None:
    c = r.counts
    if r.empty:
        print(f"{r.sweep} [{r.scale}]: NO RUNS in {r.tracking_uri}")
        print_link("  run first:", f"cemlab sweep {r.sweep} --scale {r.scale}", COMMAND)
        print_link("  page:", r.index_html, PATH)
        return
    verdicts = ", ".join(f"{v.id}{f' ({v.condition})' if v.condition else ''}: {v.verdict}" for v in r.verdicts) \
        or "no claims"
    others = ", ".join(f"{n} {s}" for s, n in c.items() if s not in ("trials", "runs", "reused", "finished") and n)
    print(f"{r.sweep} [{r.scale}]: {c['finished']}/{c['trials']} trials finished"
          f"{' (' + others + ')' if others else ''}; figures: {', '.join(r.figures) or 'none'}")
    print(f"  claims: {verdicts}")
    print_link("  report:", r.index_html, PATH)
    if r.publish_error:
        print(f"cemlab report: the report of {r.sweep} was written, not logged to MLflow run {r.parent_run_id}: "
              f"{r.publish_error}", file=sys.stderr)
    elif r.parent_run_id and r.published:
        from cemlab.tracking.conventions import run_link

        # the parent run's page (its trials listed as child runs), not the server's bare address
        print_link(f"  logged to MLflow run {r.parent_run_id} (artifacts report/):",
                   run_link(r.tracking_uri, r.experiment_id, r.parent_run_id), URL)
