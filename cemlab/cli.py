"""The ``cemlab`` command. Each subcommand lives in its area's ``cli`` module, imported lazily so
that ``cemlab --help`` and ``cemlab plan`` start fast; the report builder (pandas) and argcomplete
are imported where they are used, for the same reason.

Every command honours ``MLFLOW_TRACKING_URI`` (otherwise the project's embedded store under
``./runs``) and, for sweeps, ``RAY_ADDRESS``.
"""

# PYTHON_ARGCOMPLETE_OK
from __future__ import annotations

import argparse
import importlib
import shlex
import sys

import cemlab
from cemlab.links import COMMAND, PATH, print_link

#: subcommand -> (module with ``add_arguments(parser)`` and ``run(args) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("cemlab.train.cli", "train one model (a run config YAML plus key=value overrides)"),
    "sweep": ("cemlab.sweeps.cli.sweep", "run a sweep's grid with Ray Tune, every trial in MLflow"),
    "data": ("cemlab.sweeps.cli.data", "data prepare SWEEP: tokenise a sweep's data into the token store, once, in parallel"),
    "slurm": ("cemlab.sweeps.cli.slurm", "write the sbatch script that runs a sweep on a SLURM allocation"),
    "plan": ("cemlab.sweeps.cli.plan", "list a sweep's trials, what is done, tokens, FLOPs, GPU-hours (trains nothing)"),
    "reproduce": ("cemlab.reproduce.cli", "rerun a sample of a committed report's trials and check them "
                  "against the reproducibility guarantee"),
    "report": ("cemlab.report.cli", "make the paper's figures, Akima optima and claim verdicts from MLflow"),
    "ui": ("cemlab.tracking.cli_ui", "open the MLflow dashboard on the project's store"),
    "bench": ("cemlab.bench.cli", "benchmarks that print throughput and memory"),
}


#: subcommand -> its parser, filled by :func:`build_parser`
SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` with flags and positionals (``key=value`` overrides, sweep names) in any
    order: argparse alone stops filling positionals at the first flag, so ``train cfg.yaml
    --dry-run a=1`` would refuse ``a=1``; the subcommand's arguments are then parsed again
    intermixed (``parse_intermixed_args``, which does not take the top-level subparsers)."""
    args, extras = parser.parse_known_args(argv)
    if not extras:
        return args
    sub = SUBPARSERS.get(args.command or "")
    if sub is None or any(a.nargs in (argparse.REMAINDER, argparse.PARSER) for a in sub._actions):
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    rest = argv[argv.index(args.command) + 1:]
    return sub.parse_intermixed_args(rest, namespace=argparse.Namespace(command=args.command))


DESCRIPTION = """\
cemlab trains Transformers with Causal Energy Minimization (CEM) attention and MLP layers beside
Llama baselines, runs the paper's experiments as sweeps, records every run in MLflow and rebuilds
the paper's figures and verdicts from those runs.

Everyday use:
  cemlab sweep recursion_ablation     run a sweep (same as: make sweep SWEEP=recursion_ablation);
                                      rerun the same command to resume; --scale smoke|tiny|...(see --help)
  cemlab ui                           the MLflow dashboard of every run (prints its address)
  cemlab report recursion_ablation    the sweep's figures, learning-rate optima and claim verdicts

`cemlab plan SWEEP` shows what a sweep would run and costs; `cemlab COMMAND --help` explains each
command. Runs are logged to $MLFLOW_TRACKING_URI, else to the project's store under ./runs."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cemlab", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cemlab {cemlab.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        SUBPARSERS[name] = p
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as e:  # an area not built yet
            if e.name != module:
                raise
            p.set_defaults(_missing=True)
    return parser


def _sweep_look(*args):
    """The report's judge of a seeded sweep's looks (imported when a look is made)."""
    from cemlab.report.looks.interim_look_store import sweep_look

    return sweep_look(*args)


def _sweep_bracket(*args):
    """The report's judge of a tuned sweep's bracketing steps (imported when a step is judged)."""
    from cemlab.report.looks.interim_look_store import sweep_bracket

    return sweep_bracket(*args)


def _sweep_confirm(*args):
    """The report's judge of a sweep's confirmation stage (imported when the stage is judged)."""
    from cemlab.report.looks.confirmation_look import sweep_confirm

    return sweep_confirm(*args)


def _sweep_found(*args, **kwargs):
    """The report's reading of what the rungs below a carried ladder rung found (imported when asked)."""
    from cemlab.report.looks.carry_look import sweep_found

    return sweep_found(*args, **kwargs)


def report_after_sweep(result, console, overrides: list[str] | None = None, source: str | None = None) -> None:
    """The end of ``cemlab sweep``: the sweep's report (``cemlab.report.build_report``), composed
    here so that the sweep layer never imports the report. Sets ``result.report``, or
    ``result.report_error`` (exit code 3) when it fails: the runs are safe in MLflow and
    ``cemlab report`` can retry. Not built after an interrupted sweep or a lost store. With
    ``overrides``, the report reads the overridden trials and names the overrides. ``source``: the
    sweep as the command named it (a name, or the path of a ``.yaml`` file, which the report reads too)."""
    if result.interrupted or result.store_error:
        return
    from cemlab import timing

    try:
        from cemlab.report import build_report

        with timing.stage("report"):
            result.report = build_report(source or result.sweep, scale=result.scale, tracking_uri=result.tracking_uri,
                                         overrides=overrides)
    except Exception as e:  # the sweep's runs are safe in MLflow; `cemlab report` can retry
        result.report_error = f"{type(e).__name__}: {e}"
        again = shlex.join(["cemlab", "report", source or result.sweep, *(overrides or [])])
        console.print(f"Report: not built ({result.report_error})", highlight=False, markup=False)
        print_link("To retry, run:", again, COMMAND, console=console)
        return
    finally:
        timing.flush()
    print_link("Report:", result.report, PATH, console=console)


def report_after_ladder(sweep: str, overrides: list[str] | None = None, source: str | None = None) -> int:
    """The end of ``cemlab sweep NAME --ladder`` (or ``--rung X``): the across-the-ladder report
    (``cemlab.report.pages.ladder_page``) from the store. Returns 0, or 3 when it could not be built (the runs
    are safe in MLflow; ``cemlab report NAME --ladder`` retries)."""
    try:
        from cemlab.report.pages.ladder_page import build_ladder

        result = build_ladder(source or sweep, overrides=overrides)
    except Exception as e:  # the rungs' runs are safe in MLflow
        print(f"Ladder report: not built ({type(e).__name__}: {e})")
        print_link("To retry, run:", shlex.join(["cemlab", "report", source or sweep, "--ladder", *(overrides or [])]),
                   COMMAND)
        return 3
    print_link("Ladder report:", result.index_html, PATH)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:  # shell completion (see README): answers the shell and exits when it asks
        import argcomplete

        argcomplete.autocomplete(parser)
    except ImportError:
        pass
    args = parse(parser, list(sys.argv[1:] if argv is None else argv))
    if not args.command:
        parser.print_help()
        return 0
    if getattr(args, "_missing", False):
        print(f"cemlab {args.command}: not available in this build", file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    if args.command == "sweep":  # the sweep, then its report
        return int(module.run(args, after=lambda result, console: report_after_sweep(result, console, args.overrides,
                                                                                 args.sweep), looker=_sweep_look,
                              ladder_after=report_after_ladder, bracketer=_sweep_bracket, confirmer=_sweep_confirm,
                              carrier=_sweep_found))
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
