"""``cemlab sweep SWEEP --scale S [key=value ...]``: run a sweep's grid with Ray Tune, every trial in MLflow.

See ``cemlab.sweeps.runner`` for what happens. The sweep's report at the end is built by the
command (``cemlab.cli`` hands it in as ``after``, the judge of a seeded sweep's looks as ``looker`` and the
judge of a tuned sweep's bracketing steps as ``bracketer``, the reader of what a carried ladder rung's
rungs below found as ``carrier``: the sweep layer never imports the report).

Exit codes: 0 every trial has a result (finished, diverged, stopped early by ASHA, or already in
the store); 1 at least one trial failed after its retries (the others ran; the failures and their
log files are listed); 2 the sweep could not start (bad sweep file or scale, unreachable MLflow
server, resources the Ray cluster lacks); 3 the trials are fine but the report could not be built;
4 the MLflow store stopped answering during the sweep (the running trials were stopped; rerun once
it is back); 130 interrupted (Ctrl-C or SIGTERM): rerun the same command to resume.

The sweep runner (Ray, rich) and the store's and server's errors are imported inside ``run``, so
``cemlab --help``, which imports every command's ``cli`` module, does not load them.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
from typing import TYPE_CHECKING, Callable

from cemlab.links import COMMAND, print_link
from cemlab.sweeps.cli.args import add_ladder_arguments, add_overrides_argument, add_scale_argument, add_sweep_argument
from cemlab.sweeps.sweepfile.schema import SweepError

if TYPE_CHECKING:
    from rich.console import Console

    from cemlab.sweeps.stages.invocation import SweepResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sweep_argument(parser, "sweep name (a file in sweeps/) or path to a sweep file")
    add_overrides_argument(parser)
    add_scale_argument(parser)
    parser.add_argument("--retries", type=int, default=1,
                        help="times a failing trial is retried from its last checkpoint (default 1)")
    parser.add_argument("--cpus", type=int, default=None,
                        help="CPUs of the local Ray runtime (default: all of this machine's; ignored with RAY_ADDRESS)")
    parser.add_argument("--cache-dir", default=None,
                        help="token cache folder shared by the trials (default <runs>/cache)")
    parser.add_argument("--no-report", action="store_true", help="do not build the sweep's report at the end")
    parser.add_argument("--no-seeding", action="store_true",
                        help="run the grid's own seeds only, even where the sweep file gives a seed budget (no seeds "
                             "added by looks or a confirmation stage; the report still judges at the planned levels)")
    parser.add_argument("--no-bracketing", action="store_true",
                        help="run the grid's learning rates only, even where the sweep file's tuning: brackets them "
                             "(no rate added beyond a cell's best edge; the report then says which cells are not "
                             "bracketed)")
    parser.add_argument("--plain", action="store_true",
                        help="plain progress lines instead of a live table (the default when not a terminal)")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between summary lines in plain mode (default 30)")
    parser.add_argument("--gpu-slots", choices=("scale", "measured"), default="scale",
                        help="trials per GPU: the scale's gpus_per_worker (default) or measured: 1 / the count "
                             "`cemlab plan --scale S` prints from the store's finished GPU runs of this scale "
                             "(refused without them; docs/gpu.md)")
    add_ladder_arguments(parser, "run")
    parser.add_argument("--carry-from", default=None, metavar="DIR",
                        help="with ladder.carry: a committed report folder (a rung's, or the ladder's with a folder "
                             "per rung) to read a rung below from where the store has no runs of it")
    parser.add_argument("--mark-interrupted", action="store_true",
                        help="train nothing: mark the runs a dead driver of this sweep and scale left running "
                             "(killed, its node lost) interrupted; rerunning the sweep resumes them (the SLURM "
                             "job script does this after every stop)")


def resume_command(args: argparse.Namespace) -> str:
    """The command line that reruns (and so resumes) this sweep: its name, scale, overrides and
    every flag that differs from its default, quoted for a POSIX shell."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    ladder = getattr(args, "ladder", False) or getattr(args, "rung", None) is not None  # the rungs are its scales
    parts = ["cemlab", "sweep", str(args.sweep), *([] if ladder else ["--scale", str(args.scale)]), *args.overrides]
    for action in parser._actions:
        value = getattr(args, action.dest, action.default)
        if not action.option_strings or action.dest == "scale" or value == action.default:
            continue
        flag = action.option_strings[-1]
        parts += [flag] if action.nargs == 0 else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(parts)


def _mark_interrupted(args: argparse.Namespace, scale: str) -> int:
    """``cemlab sweep NAME --scale S --mark-interrupted`` (``cemlab.sweeps.stages.record.mark_left_running``)."""
    from cemlab.paths import runs_dir, sweep_log_dir
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.sweeps.stages.invocation import EXIT_USAGE
    from cemlab.sweeps.stages.record import mark_left_running
    from cemlab.tracking.store import StoreError, check_reachable, tracking_uri

    try:
        spec = load_sweep(args.sweep)
        uri = tracking_uri()
        check_reachable(uri)
        runs = runs_dir()
        marked = mark_left_running(uri, runs, sweep_log_dir(spec.name, scale, runs))
    except (SweepError, StoreError, RuntimeError) as e:
        print(f"cemlab sweep --mark-interrupted: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"cemlab sweep: {len(marked)} run(s) left running marked interrupted"
          + (f" ({', '.join(marked)}); rerun the sweep to resume them" if marked else ""))
    return 0


def run(args: argparse.Namespace, after: "Callable[[SweepResult, Console], None] | None" = None,
        looker: Callable | None = None, ladder_after: "Callable[[str, list[str], str], int] | None" = None,
        bracketer: Callable | None = None, confirmer: Callable | None = None, carrier: Callable | None = None) -> int:
    """``cemlab sweep``; ``after(result, console)``: what follows the sweep (the report), whose
    outcome counts in the exit code; ``looker``: judges the looks of a sweep with ``seeding``
    (``cemlab.report.looks.interim_look_store.sweep_look``); ``ladder_after(sweep, overrides, source)``: what follows
    the rungs of ``--ladder`` / ``--rung`` (the across-the-ladder report; returns an exit code); ``bracketer``:
    judges the bracketing steps of a sweep with ``tuning``
    (``cemlab.report.looks.interim_look_store.sweep_bracket``); ``confirmer``: judges the confirmation stage
    of a sweep with ``confirmation`` (``cemlab.report.looks.confirmation_look.sweep_confirm``); ``carrier``: what
    the rungs below a ladder rung with ``ladder.carry`` found (``cemlab.report.looks.carry_look.sweep_found``)."""
    if getattr(args, "ladder", False) or getattr(args, "rung", None) is not None:
        return _run_ladder(args, looker, ladder_after, bracketer, confirmer, carrier)
    return _run_scale(args, args.scale, after, looker, bracketer, confirmer, carrier)


def _run_scale(args: argparse.Namespace, scale: str, after: "Callable[[SweepResult, Console], None] | None",
               looker: Callable | None, bracketer: Callable | None = None, confirmer: Callable | None = None,
               carrier: Callable | None = None) -> int:
    """The sweep at ``scale``: ``--scale``, or one rung of ``--ladder`` / ``--rung``, which is
    resumed by rerunning the command as it was given (``resume_command(args)``)."""
    from rich.console import Console

    from cemlab.sweeps.stages.invocation import EXIT_INTERRUPTED, EXIT_USAGE
    from cemlab.sweeps.runner import ray_abandoned, run_sweep, wait_ray_stopped
    from cemlab.tracking.server import ServerError
    from cemlab.tracking.store import StoreError

    tty = sys.stdout.isatty()
    console = Console(highlight=False, width=None if tty else 160, soft_wrap=not tty)  # log lines unbroken
    if args.mark_interrupted:
        return _mark_interrupted(args, scale)
    if args.cpus is not None and args.cpus < 1:
        print(f"cemlab sweep: --cpus={args.cpus} must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = run_sweep(args.sweep, scale, overrides=args.overrides, retries=args.retries, cpus=args.cpus,
                           cache_dir=args.cache_dir, console=console, live=False if args.plain else None,
                           interval=args.interval, command=resume_command(args),
                           looker=None if args.no_seeding else looker, stop_ray_later=True,
                           bracketer=None if getattr(args, "no_bracketing", False) else bracketer,
                           gpu_slots=getattr(args, "gpu_slots", "scale"),
                           confirmer=None if args.no_seeding else confirmer,
                           carrier=None if carrier is None else functools.partial(
                               carrier, carry_from=getattr(args, "carry_from", None)))
        if after is not None and not args.no_report and not result.store_error:  # the report needs the store
            after(result, console)  # while Ray stops
    except (SweepError, StoreError, ServerError, ValueError) as e:
        print(f"cemlab sweep: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the trials started or while the report was built
        print_link("cemlab sweep: interrupted; to resume, run:", resume_command(args), COMMAND, file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        wait_ray_stopped()
    if ray_abandoned():  # everything is recorded: skip an exit that Ray's native side would crash
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(result.exit_code)
    return result.exit_code


def _run_ladder(args: argparse.Namespace, looker, ladder_after, bracketer=None, confirmer=None, carrier=None) -> int:
    """``cemlab sweep NAME --ladder`` (every rung, cheapest first) or ``--rung X``: each rung is the
    sweep at the rung's scale (``cemlab.sweeps.sweepfile.ladder_section``), run as ``cemlab sweep`` runs a scale,
    every rung checked (warm-up, epochs) before the first trial; then the across-the-ladder report,
    which builds each rung's report beside it. Stops at the first rung that was interrupted or could
    not start."""
    from cemlab.sweeps.ladder_plan import plan_ladder, rung_scales_to_run
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.sweeps.stages.invocation import EXIT_INTERRUPTED, EXIT_STORE_LOST, EXIT_USAGE

    try:
        spec = load_sweep(args.sweep)
        scales = rung_scales_to_run(spec, args.rung)
        plan_ladder(spec, args.rung, read_store=False, overrides=args.overrides,  # refuses a rung before any trial
                    note=lambda line: print(f"cemlab sweep: {line}", flush=True))
    except (SweepError, ValueError) as e:
        print(f"cemlab sweep: {e}", file=sys.stderr)
        return EXIT_USAGE
    code = 0
    for scale in scales:
        print(f"cemlab sweep: ladder rung {spec.rungs()[scale]:g} tokens per parameter (scale {scale})", flush=True)
        # each rung's report is built with the ladder's
        rc = _run_scale(args, scale, after=None, looker=looker, bracketer=bracketer, confirmer=confirmer,
                        carrier=carrier)
        code = max(code, rc) if rc != EXIT_INTERRUPTED else rc
        if rc in (EXIT_INTERRUPTED, EXIT_USAGE, EXIT_STORE_LOST):  # interrupted, could not start, store lost: stop
            break
    if ladder_after is not None and code not in (EXIT_INTERRUPTED, EXIT_USAGE, EXIT_STORE_LOST) and not args.no_report:
        code = max(code, ladder_after(spec.name, args.overrides, args.sweep) or 0)
    return code
