"""``cemlab plan SWEEP --scale S [key=value ...]``: a sweep's trials, which are done, tokens, FLOPs and GPU-hours.

No training: the models are built on the ``meta`` device to count parameters, and the MLflow
store is only read; ``--ladder`` tokenises the sweep's corpus into the token store once, saying so
first, to count the rungs' epochs. The summary comes first, then the table, whose cells fold at the
terminal's width. Without a sweep name it lists the sweeps with their trial counts; a file that
fails to load or expand is listed as broken with its error (exit code 2), the others still shown.

A ``search: optuna`` sweep is shown one row per grid cell, with its number of learning-rate samples
and their statuses; tokens and FLOPs per row are one run's, the totals count every sample (an
upper bound: ASHA stops some early). See ``cemlab.sweeps.plan``.

What the subcommand needs beyond its arguments (rich, the planner, the sweep files, the tasks, the
store) is imported inside the functions that use it, so ``cemlab --help``, which imports every
command's ``cli`` module, does not load it.
"""

from __future__ import annotations

import argparse
import json
import sys

from cemlab.sweeps.cli.args import add_ladder_arguments, add_overrides_argument, add_scale_argument, add_sweep_argument
from cemlab.sweeps.sweepfile.files import list_sweeps
from cemlab.sweeps.sweepfile.schema import SweepError

_STATUS_STYLE = {"done": "green", "diverged": "yellow", "failed": "red", "interrupted": "red",
                 "running": "cyan", "partial": "cyan", "todo": "dim"}
UPPER_BOUND = "an upper bound: ASHA stops some samples early"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sweep_argument(parser, "sweep name (a file in sweeps/) or path; omit to list the sweeps", optional=True)
    add_overrides_argument(parser)
    add_scale_argument(parser)
    parser.add_argument("--mfu", type=float, default=0.4,
                        help="model FLOPs utilisation assumed for the GPU-hour estimate (default 0.4)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    parser.add_argument("--no-store", action="store_true", help="do not read the MLflow store (every trial todo)")
    parser.add_argument("--measured", action="store_true",
                        help="after a sweep: planned vs measured GPU-hours of each finished trial at this scale")
    add_ladder_arguments(parser, "plan")


def _si(x: float | None) -> str:
    """1.73e9 -> '1.73B' (counts of parameters, tokens, examples)."""
    if x is None:
        return "-"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def _sci(x: float | None) -> str:
    """4.68e20 -> '4.68e20' (FLOPs)."""
    if x is None:
        return "-"
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant}e{int(exp)}"


def _hours(h: dict[str, float]) -> str:
    return "; ".join(f"{k} {v:,.0f}" if v >= 10 else f"{k} {v:.2g}" for k, v in h.items()) + " GPU-h"


def _key_axes(trial) -> str:
    """The trial's grid coordinates but size and variant; a searched learning rate as its range."""
    parts = []
    for k, v in trial.axes.items():
        if k == "lr" and trial.search is not None:
            parts.append(f"lr~[{trial.search.lr[0]:g}, {trial.search.lr[1]:g}]")
        elif k not in ("size", "group", "variant"):
            parts.append(f"{k}={v}")
    return " ".join(parts)


def _status(r) -> str:
    """A row's status, with a search: optuna cell's samples per status."""
    style = _STATUS_STYLE.get(r.status, "")
    text = f"[{style}]{r.status}[/]" if style else r.status
    if r.sample_statuses:
        text += " (" + ", ".join(f"{n} {s}" for s, n in r.sample_statuses.items()) + ")"
    return text


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cemlab.sweeps.plan import plan_sweep
    from cemlab.tracking.store import StoreError

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    if not 0 < args.mfu <= 1:
        console.print(f"cemlab plan: --mfu={args.mfu} must be in (0, 1], e.g. 0.4")
        return 2
    try:
        if not args.sweep:
            return _list_sweeps(args.scale, console)
        if args.ladder or args.rung is not None:
            return _plan_ladder(args, console)
        plan = plan_sweep(args.sweep, args.scale, mfu=args.mfu, read_store=not args.no_store, overrides=args.overrides)
    except SweepError as e:
        print(f"cemlab plan: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"cemlab plan: {e}; or pass --no-store", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_plan_json(plan), indent=2))
        return 0
    _print_plan(plan, console)
    if args.measured and plan.store:
        _print_measured(plan, args.mfu, console)
    return 0


def _plan_ladder(args: argparse.Namespace, console) -> int:
    """``cemlab plan NAME --ladder`` (or ``--rung X``): one row per rung (``cemlab.sweeps.ladder_plan``)."""
    from cemlab.sweeps.ladder_plan import plan_ladder

    lp = plan_ladder(args.sweep, args.rung, read_store=not args.no_store, overrides=args.overrides, mfu=args.mfu,
                     note=lambda line: print(f"cemlab plan: {line}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(lp.as_dict(), indent=2))
        return 0
    _print_ladder(lp, console)
    return 0


def _print_ladder(lp, console) -> None:
    """The ladder's summary and each rung's looks in order, then one row per rung (below a rung whose
    cells may add rates or seeds, its trials, FLOPs and time if every cell stayed open to the last
    look): borderless columns that fit 80 characters and fold, not cut, on a narrower terminal."""
    from rich import box
    from rich.table import Table

    from cemlab.sweeps.ladder_plan import CPU_FLOPS_PER_S, STEP_OVERHEAD_S, TRIAL_FIXED_S
    from cemlab.train.plan import duration

    total, most = lp.as_dict()["seconds"], lp.as_dict()["max_seconds"]
    lo, hi = sum(r.min_trials for r in lp.rungs), sum(r.max_trials for r in lp.rungs)
    console.print(f"{lp.sweep}: ladder at scale {lp.base_scale}, size {lp.size} (one width; the rungs differ in "
                  f"training length only; rung X is the scale {lp.base_scale}-tppX)", markup=False)
    console.print(f"Whole ladder: {lo}{f'-{hi}' if hi != lo else ''} trials, "
                  f"about {duration(total)}" + (f" to {duration(most)} (every cell open to the last look)"
                                                 if most != total else "")
                  + f" on this machine ({lp.rungs[0].slots} trial(s) at once; {CPU_FLOPS_PER_S / 1e9:.0f} GFLOP/s "
                  f"per trial, and besides training {TRIAL_FIXED_S:g} s per trial and {STEP_OVERHEAD_S * 1e3:g} ms per "
                  "step, measured on this project's 2-core machine; each look's trials packed onto the slots). Rung: tokens per parameter; tokens and steps: per trial; FLOPs: the rung's trials "
                  "together; epochs: passes over the corpus's training split; time: on this machine. Run: "
                  f"cemlab sweep {lp.sweep} --ladder (cheapest rung first) or --rung X.", markup=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for col in ("rung", "tokens", "steps", "warm-up", "epochs", "cells", "trials", "FLOPs", "time", "done"):
        table.add_column(col, justify="right", overflow="fold")
    for r in lp.rungs:
        table.add_row(f"{r.rung:g}", _si(r.tokens), str(r.steps), str(r.warmup_steps),
                      f"{r.epochs:.2g}" if r.train_tokens else "-", str(r.cells), str(r.min_trials),
                      _sci(r.min_flops), duration(r.seconds()), f"{r.done()}/{r.trials}")
        if r.max_trials != r.min_trials:
            table.add_row("at most", "", "", "", "", "", str(r.max_trials), _sci(r.max_flops),
                          duration(r.seconds(most=True)), "", style="dim")
    for r in lp.rungs:   # each rung's looks in order, with the summary: before the table
        if line := _rung_looks(r.plan):
            console.print(f"Rung {r.rung:g}: {line}", markup=False)
    if lp.carry:
        console.print("Carried rates (ladder.carry): every rung above the first starts each cell at 3 rates around "
                      "the optimum the rungs below found (not its lr axis) and brackets from there; the counts here "
                      "are the lr axis's (Policy.start gives a cell its rates, 3 for bracketing).", markup=False)
    console.print(table)


def _rung_looks(plan) -> str:
    """A rung's looks in order, for people: its bracketing steps (each step's trials at most), then its
    seed looks (seeds of each), and its trials at least and at most; '' where it plans neither."""
    parts = []
    if b := plan.bracketing():
        steps = ", ".join(f"step {s['step']} up to {s['max_trials']} trials" for s in b["steps"])
        parts.append(f"bracketing (lr x{b['ratio']:.3g} or /{b['ratio']:.3g} within [{b['bounds'][0]:g}, "
                     f"{b['bounds'][1]:g}]: {steps or 'nothing within the bounds'})")
    if sd := plan.seeding():
        parts.append("seed looks (" + "; ".join(f"look {lk['look']}: {len(lk['seeds'])} seeds"
                                                for lk in sd["looks"]) + ")")
    if not parts:
        return ""
    return " then ".join(parts) + f": {_span(plan.min_trials, plan.max_trials)} trials"


def _span(least: int, most: int) -> str:
    """'least-most', or one number where the two agree."""
    return f"{least}-{most}" if least != most else str(most)


def _list_sweeps(scale: str, console) -> int:
    """Every sweep with its trial count at ``scale``; a broken file is listed with its error (exit code 2)."""
    from rich.table import Table

    from cemlab.sweeps.sweepfile.load import load_sweep

    table = Table(title=f"Sweeps (trials at scale {scale})")
    for col in ("sweep", "figure", "trials"):
        table.add_column(col)
    broken: dict[str, str] = {}
    for name in list_sweeps():
        try:  # one broken file does not hide the others
            spec = load_sweep(name)
            trials = spec.expand(scale)
        except Exception as e:  # SweepError, or a bug a file exposes
            broken[name] = str(e) if isinstance(e, SweepError) else f"{type(e).__name__}: {e}"
            table.add_row(name, "-", "[red]BROKEN[/] (error below)")
            continue
        n = str(len(trials))
        if trials and trials[0].search is not None:
            n = f"{n} cells x {trials[0].search.samples} lr samples"
        table.add_row(name, spec.figure, n)
    console.print(table)
    for name, error in broken.items():
        console.print(f"[red]broken[/] {name}: {error}", soft_wrap=True)
    return 2 if broken else 0


def _plan_json(plan) -> dict:
    """``cemlab plan --json``."""
    return {
        "sweep": plan.sweep, "figure": plan.figure, "scale": plan.scale, "store": plan.store,
        "trials": [{"trial_id": r.trial.trial_id, "variant": r.trial.variant, "group": r.trial.group,
                    "size": r.trial.size, "axes": r.trial.axes, "config_hash": r.trial.config_hash,
                    "params": r.params, "tokens": r.tokens, "steps": r.steps, "flops": r.flops,
                    "tokens_per_param": r.tokens / r.llama_params if r.llama_params else None,
                    "status": r.status, "run_id": r.run_id, "samples": r.samples,
                    "sample_statuses": r.sample_statuses} for r in plan.rows],
        "search": "optuna" if plan.searched else "grid", "grid": plan.grid(),
        "total_tokens": plan.total_tokens, "total_flops": plan.total_flops,
        "paper_flops": plan.paper_flops, "mfu": plan.mfu, "gpu_hours_mfu": plan.gpu_hours_mfu,
        "gpu_hours_paper_throughput": plan.gpu_hours_paper_throughput,
        "paper_throughput_mfu": plan.paper_throughput_mfu, "paper_samples": plan.paper_samples,
        "data_prep": plan.data_prep, "bracketing": plan.bracketing(), "seeding": plan.seeding(),
        "seeding_note": plan.seeding_note, "bracketing_note": plan.bracketing_note, "min_trials": plan.min_trials,
        "max_trials": plan.max_trials,
        "gpu_time": plan.gpu_time, "gpu_slots": plan.gpu_slots,
    }


def _print_plan(plan, console) -> None:
    """The plan's summary first (its totals, the store read, the looks and the paper-scale
    estimates), then its trials as a table whose cells fold at the console's width."""
    from rich.table import Table

    from cemlab.tasks import get_task

    unit = get_task(plan.rows[0].trial.task).unit if plan.rows else "tokens"
    searched = plan.searched
    what = f"{len(plan.rows)} grid cells, learning rate searched by Optuna" if searched else f"{len(plan.rows)} trials"
    most = "" if searched or plan.max_trials == len(plan.rows) else \
        f" ({_span(plan.min_trials, plan.max_trials)} trials with the added rates and seeds)"
    console.print(f"{plan.sweep} ({plan.figure}) at scale {plan.scale}: {what}{most}", markup=False)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(plan.counts().items()))
    every = f" for every sample ({UPPER_BOUND})" if searched else ""
    console.print(f"Total: {_si(plan.total_tokens)} {unit}, {_sci(plan.total_flops)} training FLOPs{every}; {counts}")
    console.print(f"Store: {plan.store or 'not read'}")
    if plan.gpu_time:
        console.print(_gpu_time_line(plan.gpu_time), soft_wrap=True)
    if plan.gpu_slots:
        console.print(plan.gpu_slots["line"], markup=False, soft_wrap=True)
    brackets = plan.bracketing()
    if brackets:
        console.print(_bracketing_line(brackets), markup=False)
    if plan.bracketing_note:
        console.print(f"Bracketing: {plan.bracketing_note}", markup=False)
    conf = plan.confirmation()
    if conf:
        first = (f"{conf['primary_seeds']} fresh seeds first for {conf['primary']}'s primary condition, the other cells "
                 f"at most as many" if conf.get("primary_seeds") else
                 f"the rest to {conf['primary']}'s primary condition" if conf.get("primary") else "")
        console.print(f"Confirmation: each cell's rate chosen on seeds {','.join(map(str, conf['selection_seeds']))}, then "
                      f"fresh seeds at the chosen rates of the cells it is compared with, as many as a budget of "
                      f"{conf['budget']} trials buys{f' ({first})' if first else ''}"
                      + (f", and at least {conf['fresh']} trials (the budget raised to the selection's trials + "
                         f"{conf['fresh']} where its steps spent more)" if conf.get("fresh") else "")
                      + f"; each tuned comparison at "
                      f"alpha {conf['alpha']:g} (one-sided {conf['alpha'] / 2:g}): {conf['min_trials']} trials at least "
                      f"(the selection stage), {conf['max_trials']} at most", markup=False)
    seeding = plan.seeding()
    if seeding:
        looks = "; ".join(f"look {lk['look']}: seeds {','.join(map(str, lk['seeds']))} at alpha {lk['alpha']:.4g} "
                          f"(one-sided {lk['alpha_one_sided']:.4g})" for lk in seeding["looks"])
        console.print(f"Seeding: {len(seeding['looks'])} planned looks ({looks}; alpha shared {seeding['split']}), "
                      f"the report judging each comparison at the look that decided it; seeds are added only to "
                      f"cells whose comparison is still open: {plan.min_trials} trials at least, "
                      f"{seeding['max_trials']} at most" + (f" ({seeding['split_note']})" if seeding["split_note"] else ""))
    if plan.seeding_note:
        console.print(f"Seeding: {plan.seeding_note}")
    paper = f", {plan.paper_samples} samples per cell, {UPPER_BOUND}" if plan.paper_samples else ""
    console.print(f"At the paper scale ({_sci(plan.paper_flops)} training FLOPs{paper}): {_hours(plan.gpu_hours_mfu)} "
                  f"at {plan.mfu:.0%} MFU of dense bf16 peak")
    if unit == "tokens":
        console.print(f"  or {_hours(plan.gpu_hours_paper_throughput)} at the paper's throughput (30k tokens/s "
                      f"per A100 at 86M = {plan.paper_throughput_mfu:.1%} MFU, same MFU on H100)")
    d = plan.data_prep
    if d and d["tokens_once"]:
        console.print(f"Data step at the paper scale (`cemlab data prepare`, on CPUs before the trials): "
                      f"{_si(d['tokens_once'])} tokens once, {d['cpu_core_hours']:,.1f} CPU core-hours at "
                      f"{d['tokens_per_core_s'] / 1e3:.0f}k tokens/s per core, 0 GPU-hours (tokenised inside the "
                      f"trials once per budget: {_si(d['tokens_per_budget'])} tokens, "
                      f"{d['gpu_hours_idle_before']:,.1f} GPU-hours idle)")
    table = Table(title="Grid cells" if searched else "Trials")
    columns = [("trial", "left"), ("variant", "left"), ("size", "left"), ("axes", "left"), ("params", "right")]
    columns += [("samples", "right"), (f"{unit}/run", "right"), ("FLOPs/run", "right")] if searched else \
        [(unit, "right"), ("FLOPs", "right")]
    for col, justify in columns + [("status", "left")]:
        table.add_column(col, justify=justify, overflow="fold")
    for r in plan.rows:
        cells = [r.trial.trial_id, r.trial.variant, r.trial.size or "-", _key_axes(r.trial), _si(r.params)]
        cells += ([str(r.samples)] if searched else []) + [_si(r.tokens), _sci(r.flops), _status(r)]
        table.add_row(*cells)
    console.print(table)


def _bracketing_line(b: dict) -> str:
    """``Plan.bracketing`` for people: steps per end, ratio and bounds, each step's trials at most."""
    n = b["max_steps"]
    what = "cell rates" if b.get("shared") else "cells"
    steps = "; ".join(f"step {s['step']} adds up to {s['max_trials']} trials ({s['cells']} {what} x {b['seeds']} seeds)"
                      for s in b["steps"]) or "no rate beyond the grid's ends lies within the bounds"
    shared = ", each rate also to every cell compared with it" if b.get("shared") else ""
    return (f"Bracketing: up to {n} step{'s' if n > 1 else ''} per end (lr x{b['ratio']:.3g} or /{b['ratio']:.3g} "
            f"within [{b['bounds'][0]:g}, {b['bounds'][1]:g}]), before the later stages, for the cells whose best "
            f"rate is an end of theirs{shared}: {steps}; {b['min_trials']} trials at least, {b['max_trials']} at most")


def _duration(s: float) -> str:
    return f"{s:.2g} s" if s < 60 else f"{s / 60:.1f} min" if s < 3600 else f"{s / 3600:.1f} h"


def _gpu_time_line(g: dict) -> str:
    """The training time of a GPU scale's trials (``cemlab.sweeps.plan.gpu_time_estimate``)."""
    peak = f"{g['peak_flops'] / 1e12:.0f} TFLOP/s dense bf16"
    if g["found"]:
        on = f"on this machine's {g['gpus']} x {g['device']} ({g['kind']}, {peak})"
    elif g["device"]:
        on = f"on the {g['kind']} ({peak}): this machine's {g['device']} is not in cemlab.hardware's table"
    else:
        on = f"no GPU here; estimated for the {g['kind']} ({peak})"
    gpus = max(g["gpus"], 1)
    return (f"GPU time, {on}, at {g['mfu']:.0%} MFU: {_duration(g['gpu_seconds'])} of training for "
            f"{g['trials']} trials ({_duration(g['trial_seconds'][0])} to {_duration(g['trial_seconds'][1])} "
            f"each), {_duration(g['wall_seconds'])} on {gpus} GPU{'s' if gpus > 1 else ''} "
            f"({g['trials_per_gpu']:g} trials at once per GPU); training FLOPs only: compile, evaluation and "
            f"start-up come on top, most of a trial at small sizes (docs/gpu.md)")


def _print_measured(plan, mfu: float, console) -> None:
    """``--measured``: planned vs measured GPU-hours of each finished trial (``cemlab.sweeps.cost``)."""
    from cemlab.sweeps.cost import cost_rows, render_cost_table
    from cemlab.tracking.store import get_client

    rows = cost_rows(plan, get_client(plan.store), mfu=mfu)
    if rows:
        console.print(render_cost_table(rows, mfu))
    else:
        console.print("No finished run of this sweep at this scale in the store: nothing measured yet.")
