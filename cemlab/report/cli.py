"""``cemlab report``: regenerate sweep reports from the runs in MLflow.

Exit codes: 0 every report has runs; 2 unknown sweep or scale, or the store does not answer; 3 a report (or the whole store) has
no runs, in which case its page is still written and says so.

What ``run`` needs (the report builder with pandas, the runs and the store) is imported inside it,
so ``cemlab --help``, which imports every command's ``cli`` module, does not load it.
"""

from __future__ import annotations

import argparse
import sys

EPILOG = """\
Reports go to DIR/<sweep>/ (index.html, index.md, figures as PNG and PDF, a CSV per figure,
claims.csv, trials.csv, cells.csv, missing.csv) and are logged as artifacts (report/) of the
sweep's latest parent run in MLflow. With several sweeps, DIR/index.html lists them all with
every claim's verdict.

exit codes:
  0  every report made has at least one run
  2  unknown sweep or scale, or the tracking store does not answer
  3  a report, or the whole store, has no runs (its page is written and says so)
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


def run(args: argparse.Namespace) -> int:
    from cemlab.report.build import (EXIT_NO_RUNS, EXIT_OK, EXIT_USAGE, SweepGrids, build, build_overview,
                                     count_runs)
    from cemlab.tracking.runs import RunStore
    from cemlab.tracking.store import tracking_uri
    from cemlab.sweeps.spec import SweepError

    from cemlab.tracking.store import probe_store

    try:
        uri = args.tracking_uri or tracking_uri()
        probe_store(uri)  # MLflow would retry a dead server for minutes
    except RuntimeError as e:  # StoreError among them
        print(f"cemlab report: {e}", file=sys.stderr)
        return EXIT_USAGE
    store = RunStore(uri)
    # key=value: the overrides the sweep ran with (as `cemlab sweep NAME key=value ...`)
    overrides = [s for s in args.sweeps if "=" in s]
    args.sweeps = [s for s in args.sweeps if "=" not in s]
    grids = SweepGrids(overrides)
    try:
        available = grids.names()
        if args.scale is not None and args.scale not in grids.scales():
            raise SweepError(f"unknown scale {args.scale!r}; choose one of {grids.scales()}")
        unknown = [s for s in args.sweeps if s not in available]
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
        print(f"overview: {overview}")
    if not results:
        print(f"cemlab report: the MLflow store {uri} holds no runs of any sweep; run `cemlab sweep NAME` first",
              file=sys.stderr)
    if not results or any(r.empty for r in results):
        return EXIT_NO_RUNS
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
        print(f"{r.sweep} [{r.scale}]: NO RUNS in {r.tracking_uri}; run `cemlab sweep {r.sweep} --scale {r.scale}` "
              f"first. Page: {r.index_html}")
        return
    verdicts = ", ".join(f"{v.id}{f' ({v.condition})' if v.condition else ''}: {v.verdict}" for v in r.verdicts) \
        or "no claims"
    others = ", ".join(f"{n} {s}" for s, n in c.items() if s not in ("trials", "runs", "reused", "finished") and n)
    print(f"{r.sweep} [{r.scale}]: {c['finished']}/{c['trials']} trials finished"
          f"{' (' + others + ')' if others else ''}; figures: {', '.join(r.figures) or 'none'}")
    print(f"  claims: {verdicts}")
    print(f"  report: {r.index_html}")
    if r.parent_run_id:
        print(f"  logged to MLflow run {r.parent_run_id} (artifacts report/) at {r.tracking_uri}"
              + (f" -- FAILED: {r.publish_error}" if r.publish_error else ""))
