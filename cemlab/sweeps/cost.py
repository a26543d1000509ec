"""Planned and measured compute per trial, after a sweep: ``cemlab plan SWEEP --scale S --measured``.

Planned: the trial's training FLOPs (``cemlab plan``) at ``mfu`` of a GPU's dense bf16 peak
(the reference ``kind``). Measured: the trial's wall time, start-up included, as an allocation
is billed (``wall_seconds`` of the sweep's ``summary.json`` from its last invocation that ran the
trial; else the MLflow run's start to end, which begins after the data is mapped and the model
built), times the devices it held (``workers x gpus_per_worker`` GPUs, or
``workers x cpus_per_worker`` CPU cores when it held no GPU). Their ratio is how far the plan
was off; on CPU runs the two are different units (GPU-hours planned, CPU core-hours spent) and
no ratio is given. A separate table, not part of the report's verdict tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table

from cemlab.hardware import PEAK_BF16_FLOPS, gpu_hours
from cemlab.paths import sweep_log_dir
from cemlab.tracking import schema

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from cemlab.sweeps.plan import Plan


@dataclass
class CostRow:
    trial_id: str
    run_id: str
    flops: float
    planned_gpu_hours: float       # at ``mfu`` on ``kind``
    kind: str
    measured_hours: float          # wall hours x devices
    unit: str                      # "GPU-h" or "CPU core-h"
    devices: float
    wall_s: float
    wall_source: str               # "trial": the trial's wall time (summary.json); "run": the MLflow run's
    achieved_flops_per_s: float    # training FLOPs / wall time / devices
    logged_mfu: float | None       # the trainer's own MFU (GPU runs), last value

    @property
    def ratio(self) -> float | None:
        """Measured over planned (1.0: the plan was right), only when both are GPU-hours."""
        return self.measured_hours / self.planned_gpu_hours if self.unit == "GPU-h" and self.planned_gpu_hours else None


def trial_walls(sweep: str, scale: str) -> dict[str, float]:
    """run id -> wall seconds of its trial, from ``<runs>/logs/<sweep>-<scale>/summary.json``."""
    try:
        summary = json.loads((sweep_log_dir(sweep, scale) / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return {t["run_id"]: float(t["wall_seconds"]) for t in summary.get("trials", [])
            if t.get("run_id") and t.get("wall_seconds")}


def cost_rows(plan: "Plan", client: "MlflowClient", mfu: float = 0.4, kind: str = "H100 SXM") -> list[CostRow]:
    """One row per planned trial that has a finished run in the store (``plan`` read with a store)."""
    walls = trial_walls(plan.sweep, plan.scale)
    rows = []
    for r in plan.rows:
        if not r.run_id or not r.flops:
            continue
        run = client.get_run(r.run_id)
        if r.run_id in walls:
            wall, source = walls[r.run_id], "trial"
        elif run.info.end_time is not None and run.info.start_time is not None:
            wall, source = (run.info.end_time - run.info.start_time) / 1000.0, "run"
        else:
            continue
        res = r.trial.resources
        gpus = res.workers * res.gpus_per_worker
        devices, unit = (gpus, "GPU-h") if gpus > 0 else (res.workers * res.cpus_per_worker, "CPU core-h")
        logged = run.data.metrics.get(schema.MFU)
        rows.append(CostRow(
            trial_id=r.trial.trial_id, run_id=r.run_id, flops=r.flops, kind=kind,
            planned_gpu_hours=gpu_hours(r.flops, kind, mfu), measured_hours=wall * devices / 3600.0, unit=unit,
            devices=devices, wall_s=wall, wall_source=source, achieved_flops_per_s=r.flops / wall / max(devices, 1e-9),
            logged_mfu=logged))
    return rows


def render_cost_table(rows: list[CostRow], mfu: float) -> "object":
    """A rich Table of ``rows`` with a total line."""
    kind = rows[0].kind if rows else "H100 SXM"
    t = Table(title=f"Planned (training FLOPs at {mfu:.0%} MFU of {kind} bf16 peak, "
                    f"{PEAK_BF16_FLOPS[kind] / 1e12:.0f} TFLOP/s) vs measured (trial wall time x devices)")
    for col in ("trial", "FLOPs", "planned GPU-h", "measured", "unit", "devices", "wall s", "FLOP/s per device",
                "measured/planned"):
        t.add_column(col, justify="left" if col in ("trial", "unit") else "right")
    for c in rows:
        t.add_row(c.trial_id, f"{c.flops:.3g}", f"{c.planned_gpu_hours:.3g}", f"{c.measured_hours:.3g}", c.unit,
                  f"{c.devices:g}", f"{c.wall_s:.1f}" + ("" if c.wall_source == "trial" else " (run)"), f"{c.achieved_flops_per_s:.3g}",
                  f"{c.ratio:.2f}" if c.ratio is not None else "-")
    if rows:
        units = {c.unit for c in rows}
        t.add_row("total", f"{sum(c.flops for c in rows):.3g}", f"{sum(c.planned_gpu_hours for c in rows):.3g}",
                  f"{sum(c.measured_hours for c in rows):.3g}", "/".join(sorted(units)), "",
                  f"{sum(c.wall_s for c in rows):.1f}", "", "")
    return t
