"""``cemlab data prepare SWEEP --scale S``: tokenise a sweep's data into the token store, once.

See :mod:`cemlab.sweeps.data_step`. Exit codes: 0 the store holds every trial's data; 2 bad sweep,
scale or data settings (the message names the field).

What ``run`` needs (the sweep files, the preparation, rich, Ray) is imported inside it, so ``cemlab
--help``, which imports every command's ``cli`` module, does not load it.
"""

from __future__ import annotations

import argparse
import os
import sys

from cemlab.data.errors import DataError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p = sub.add_parser("prepare", help="tokenise what a sweep's trials read into the token store")
    p.add_argument("sweep", help="sweep name (a file in sweeps/) or path to a sweep file")
    p.add_argument("--scale", default=None, help="smoke | tiny | paper (default: the sweeps' default scale)")
    p.add_argument("--workers", type=int, default=None,
                   help="local tokeniser processes (default: every core); with RAY_ADDRESS the cluster's CPUs are used")
    p.add_argument("--cache-dir", default=None, help="token cache folder (default <runs>/cache), as cemlab sweep --cache-dir")


def run(args: argparse.Namespace) -> int:
    from cemlab.sweeps.data_step import prepare_sweep_data
    from cemlab.sweeps.sweepfile.load import DEFAULT_SCALE, SweepError, load_sweep

    if args.workers is not None and args.workers < 1:
        print(f"cemlab data prepare: --workers={args.workers} must be at least 1", file=sys.stderr)
        return 2
    try:
        trials = load_sweep(args.sweep).expand(args.scale or DEFAULT_SCALE)
    except (SweepError, ValueError) as e:
        print(f"cemlab data prepare: {e}", file=sys.stderr)
        return 2
    from rich.console import Console

    if os.environ.get("RAY_ADDRESS"):
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
    try:
        prepare_sweep_data(trials, cache_dir=os.path.abspath(args.cache_dir) if args.cache_dir else None,
                           workers=args.workers, console=Console(highlight=False))
    except DataError as e:
        print(f"cemlab data prepare: {e}", file=sys.stderr)
        return 2
    return 0
