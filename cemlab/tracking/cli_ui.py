"""``cemlab ui``: the MLflow dashboard on the project's store, and its address.

Without ``$MLFLOW_TRACKING_URI`` it starts (or reuses) the local ``mlflow server`` on the project's
store under ``<runs>/mlflow`` (``cemlab.tracking.server``; the same server ``cemlab sweep`` uses),
on port 5000 (``--port`` or ``$CEMLAB_UI_PORT``; the next free one if taken), prints its link
and returns; the server keeps running in its own session until
``cemlab ui --stop``. With ``$MLFLOW_TRACKING_URI`` set to a server, it prints that server's link.
The link opens the runs of every cemlab experiment in one table (the server's bare address opens
MLflow 3's welcome page, which lists no runs); below it, one link per cemlab experiment to its runs
table in MLflow's model-training view (``cemlab.tracking.conventions.experiment_url``; MLflow 3
opens an experiment on its GenAI overview otherwise); then the server's address, as the command
that points other MLflow clients at it. Each is printed whole (``cemlab.links``).
Exit codes: 0 the dashboard is up (or stopped with ``--stop``); 1 nothing to stop; 2 the server
could not be started or does not answer.

The server and the store are imported inside ``run``, so ``cemlab --help``, which imports every
command's ``cli`` module, does not load them.
"""

from __future__ import annotations

import argparse
import sys

from cemlab.links import COMMAND, print_link


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None,
                        help="port of a newly started local server (default: 5000, or $CEMLAB_UI_PORT; the next free "
                             "one if taken)")
    parser.add_argument("--stop", action="store_true", help="stop the local server of this project's store")


def run(args: argparse.Namespace) -> int:
    from cemlab.tracking.server import ServerError, running_server, start_server, stop_server
    from cemlab.tracking.store import StoreError, check_reachable, configured_tracking_uri, default_tracking_uri

    remote = configured_tracking_uri()
    if args.stop:
        if stop_server():
            print(f"stopped the MLflow server of {default_tracking_uri()}")
            return 0
        print(f"no local MLflow server is running for {default_tracking_uri()}", file=sys.stderr)
        return 1
    if remote:
        if not remote.startswith(("http://", "https://")):
            print(f"cemlab ui: MLFLOW_TRACKING_URI={remote} is not a server; unset it to serve the project's "
                  f"store, or run `mlflow ui --backend-store-uri {remote}`", file=sys.stderr)
            return 2
        try:
            check_reachable(remote)
        except StoreError as e:
            print(f"cemlab ui: {e}", file=sys.stderr)
            return 2
        _print_dashboard(remote, "MLFLOW_TRACKING_URI")
        return 0
    was_running = running_server()
    if args.port is not None and was_running is not None and was_running.port != args.port:
        print(f"cemlab ui: a server for this store already runs at {was_running.url}; stop it first "
              f"(cemlab ui --stop) to use port {args.port}", file=sys.stderr)
        return 2
    try:
        url = start_server(port=args.port)
    except ServerError as e:
        print(f"cemlab ui: {e}", file=sys.stderr)
        return 2
    state = "running" if was_running else "started"
    _print_dashboard(url, f"{state}; store {default_tracking_uri()}")
    print_link("Point other clients at it:", f"export MLFLOW_TRACKING_URI={url}", COMMAND)
    print_link("Stop it with:", "cemlab ui --stop", COMMAND)
    return 0


def _print_dashboard(url: str, note: str) -> None:
    """The dashboard's link, ``note`` below it, then one line per cemlab experiment: its runs table
    in the model-training view. The dashboard's link opens the runs of every cemlab experiment in
    one table (the server's bare address opens MLflow's welcome page, which lists no runs); the
    address itself without any experiment yet."""
    from cemlab.tracking.conventions import experiment_url, experiments_url
    from cemlab.tracking.store import get_client

    try:
        experiments = get_client(url).search_experiments(filter_string="name LIKE 'cemlab%'", max_results=200)
    except Exception as e:  # the address is what was asked for; the list is a convenience
        experiments, note = [], f"{note}; experiments not listed: {type(e).__name__}"
    experiments = sorted(experiments, key=lambda e: e.name)
    print_link("MLflow dashboard:", experiments_url(url, [e.experiment_id for e in experiments]) if experiments else url)
    print(f"  ({note})")
    for exp in experiments:
        print_link(f"  {exp.name}:", experiment_url(url, exp.experiment_id))
