"""The ``cemlab`` command. Each subcommand lives in its area's ``cli`` module, imported lazily so
that ``cemlab --help`` and ``cemlab plan`` start fast.

Every command honours ``MLFLOW_TRACKING_URI`` (otherwise the project's embedded store under
``./runs``) and, for sweeps, ``RAY_ADDRESS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module with ``add_arguments(parser)`` and ``run(args) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("cemlab.train.cli", "train one model (a run config YAML plus key=value overrides)"),
    "sweep": ("cemlab.sweeps.cli_sweep", "run a sweep's grid with Ray Tune, every trial in MLflow"),
    "data": ("cemlab.data.cli", "data prepare SWEEP: tokenise a sweep's data into the token store, once, in parallel"),
    "slurm": ("cemlab.sweeps.cli_slurm", "write the sbatch script that runs a sweep on a SLURM allocation"),
    "plan": ("cemlab.sweeps.cli_plan", "list a sweep's trials, what is done, tokens, FLOPs, GPU-hours (no compute)"),
    "report": ("cemlab.report.cli", "make the paper's figures, Akima optima and claim verdicts from MLflow"),
    "ui": ("cemlab.tracking.cli_ui", "open the MLflow dashboard on the project's store"),
    "bench": ("cemlab.bench.cli", "benchmarks that print throughput and memory"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cemlab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as e:  # an area not built yet
            if e.name != module:
                raise
            p.set_defaults(_missing=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    if getattr(args, "_missing", False):
        print(f"cemlab {args.command}: not available in this build", file=sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
