"""``cemlab plan SWEEP --scale S``: a sweep's trials, which are done, tokens, FLOPs and GPU-hours.

No compute: the models are built on the ``meta`` device to count parameters, and the MLflow
store is only read. Without a sweep name it lists the sweeps with their trial counts.
"""

from __future__ import annotations

import argparse
import json
import sys

from cemlab.sweeps.spec import DEFAULT_SCALE

_STATUS_STYLE = {"done": "green", "diverged": "yellow", "failed": "red", "interrupted": "red",
                 "running": "cyan", "todo": "dim"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", nargs="?", help="sweep name (a file in sweeps/) or path; omit to list the sweeps")
    parser.add_argument("--scale", default=DEFAULT_SCALE, help=f"smoke | tiny | paper (default {DEFAULT_SCALE})")
    parser.add_argument("--mfu", type=float, default=0.4,
                        help="model FLOPs utilisation assumed for the GPU-hour estimate (default 0.4)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    parser.add_argument("--no-store", action="store_true", help="do not read the MLflow store (every trial todo)")


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


def _key_axes(axes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in axes.items() if k not in ("size", "group", "variant"))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from cemlab.sweeps.plan import make_plan
    from cemlab.sweeps.spec import SweepError, list_sweeps, load_sweep
    from cemlab.tracking.store import StoreError

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    if not 0 < args.mfu <= 1:
        console.print(f"cemlab plan: --mfu={args.mfu} must be in (0, 1], e.g. 0.4")
        return 2
    try:
        if not args.sweep:
            table = Table(title=f"Sweeps (trials at scale {args.scale})")
            for col in ("sweep", "figure", "trials"):
                table.add_column(col)
            for name in list_sweeps():
                spec = load_sweep(name)
                table.add_row(name, spec.figure, str(len(spec.expand(args.scale))))
            console.print(table)
            return 0
        plan = make_plan(args.sweep, args.scale, mfu=args.mfu, read_store=not args.no_store)
    except SweepError as e:
        print(f"cemlab plan: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"cemlab plan: {e}; or pass --no-store", file=sys.stderr)
        return 2

    if args.json:
        print(json.dumps({
            "sweep": plan.sweep, "figure": plan.figure, "scale": plan.scale, "store": plan.store,
            "trials": [{"trial_id": r.trial.trial_id, "variant": r.trial.variant, "group": r.trial.group,
                        "size": r.trial.size, "axes": r.trial.axes, "config_hash": r.trial.config_hash,
                        "params": r.params, "tokens": r.tokens, "steps": r.steps, "flops": r.flops,
                        "status": r.status, "run_id": r.run_id} for r in plan.rows],
            "total_tokens": plan.total_tokens, "total_flops": plan.total_flops,
            "paper_flops": plan.paper_flops, "mfu": plan.mfu, "gpu_hours_mfu": plan.gpu_hours_mfu,
            "gpu_hours_paper_throughput": plan.gpu_hours_paper_throughput,
            "paper_throughput_mfu": plan.paper_throughput_mfu,
        }, indent=2))
        return 0

    unit = "examples" if plan.rows and plan.rows[0].trial.task == "gp" else "tokens"
    table = Table(title=f"{plan.sweep} ({plan.figure}) at scale {plan.scale}: {len(plan.rows)} trials")
    for col, justify in (("trial", "left"), ("variant", "left"), ("size", "left"), ("axes", "left"),
                         ("params", "right"), (unit, "right"), ("FLOPs", "right"), ("status", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    for r in plan.rows:
        style = _STATUS_STYLE.get(r.status, "")
        table.add_row(r.trial.trial_id, r.trial.variant, r.trial.size or "-", _key_axes(r.trial.axes),
                      _si(r.params), _si(r.tokens), _sci(r.flops),
                      f"[{style}]{r.status}[/]" if style else r.status)
    console.print(table)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(plan.counts().items()))
    console.print(f"Total: {_si(plan.total_tokens)} {unit}, {_sci(plan.total_flops)} training FLOPs; {counts}")
    console.print(f"Store: {plan.store or 'not read'}")
    console.print(f"At the paper scale ({_sci(plan.paper_flops)} training FLOPs): {_hours(plan.gpu_hours_mfu)} "
                  f"at {plan.mfu:.0%} MFU of dense bf16 peak")
    if unit == "tokens":
        console.print(f"  or {_hours(plan.gpu_hours_paper_throughput)} at the paper's throughput (30k tokens/s "
                      f"per A100 at 86M = {plan.paper_throughput_mfu:.1%} MFU, same MFU on H100)")
    return 0
