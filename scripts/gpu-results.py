#!/usr/bin/env python3
"""What a sweep on a GPU measured, as the Markdown tables of docs/gpu.md: the stage table (where the
slot-time went, ``cemlab.timing``), one row per trial (wall time, steps, the first step's seconds,
which hold the model's compile, then tokens/s and MFU as the trainer logged them at the end), and,
for every cell run more than once (seeds), each later trial's first step against the first one's:
what the runs folder's compile cache saved (``cemlab.train.trainer.use_compile_cache``).

    python3 scripts/gpu-results.py --runs RUNS_DIR --sweep recursion_ablation --scale gpu

The first step's seconds are ``tokens per step / tokens/s logged at step 1`` (the trainer's rate
over its window, one step long then); compiling happens inside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cell_of(trial_id: str) -> str:
    """The trial's cell: its id without the seed (``86m__llama__lr2e-3__s1`` -> ``86m__llama__lr2e-3``)."""
    return re.sub(r"__s\d+$", "", trial_id)


def compile_pairs(rows: list[dict]) -> list[dict]:
    """For every cell with several trials: each later-started trial's first step against the
    earliest one's (the compile it paid against the one served from the cache)."""
    cells: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["start"]):
        if r.get("first_step_s"):
            cells.setdefault(cell_of(r["trial"]), []).append(r)
    out = []
    for cell, rs in cells.items():
        for later in rs[1:]:
            out.append({"cell": cell, "first": rs[0]["trial"], "later": later["trial"],
                        "first_s": rs[0]["first_step_s"], "later_s": later["first_step_s"],
                        "ratio": later["first_step_s"] / rs[0]["first_step_s"]})
    return out


def trial_walls(log_dir: Path) -> dict[str, float]:
    """run id -> wall seconds of its trial, from every ``summary*.json`` of the sweep's log folder
    (the sweep keeps one per invocation, ``summary-<parent run id>.json``, beside the last one's)."""
    walls: dict[str, float] = {}
    for f in sorted(log_dir.glob("summary*.json")):
        for t in json.loads(f.read_text()).get("trials", []):
            if t.get("run_id") and t.get("wall_seconds"):
                walls[t["run_id"]] = float(t["wall_seconds"])
    return walls


def trial_rows(client, sweep: str, scale: str, walls: dict[str, float]) -> list[dict]:
    """One row per trial run of ``sweep`` at ``scale`` in the store."""
    from cemlab.tracking import schema
    from cemlab.tracking.store import search_runs

    exps = [e.experiment_id for e in client.search_experiments()]
    runs = search_runs(client, exps, f"tags.`{schema.SWEEP}` = '{sweep}' and tags.`{schema.SCALE}` = '{scale}' "
                                     f"and tags.`{schema.ROLE}` = 'trial'")
    rows = []
    for run in runs:
        rate = {m.step: m.value for m in client.get_metric_history(run.info.run_id, schema.TOKENS_PER_S)}
        seen = {m.step: m.value for m in client.get_metric_history(run.info.run_id, schema.TOKENS_SEEN)}
        first = seen.get(1, 0) / rate[1] if rate.get(1) else None
        m = run.data.metrics
        rows.append({"trial": run.data.tags.get(schema.TRIAL_ID, run.info.run_name), "run_id": run.info.run_id,
                     "status": run.data.tags.get(schema.STATUS, "?"), "start": run.info.start_time or 0,
                     "wall_s": walls.get(run.info.run_id), "steps": max(rate, default=0), "first_step_s": first,
                     "tokens_per_s": m.get(schema.TOKENS_PER_S), "mfu": m.get(schema.MFU),
                     "test_ppl": m.get(schema.TEST_PPL), "gpu_util": m.get("system/gpu_0_utilization_percentage"),
                     "gpu_mb": m.get("system/gpu_0_memory_usage_megabytes")})
    return sorted(rows, key=lambda r: r["start"])


def _f(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def markdown(rows: list[dict], pairs: list[dict], stage_table: str | None) -> str:
    lines = ["## Where the slot-time went", "", stage_table or "(no stages.jsonl)", "",
             "## Trials", "",
             "| trial | status | wall s | steps | first step s | tokens/s | MFU | test ppl | GPU util % | GPU MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:   # tokens/s, MFU and the GPU's system metrics: their last logged values
        lines.append(f"| {r['trial']} | {r['status']} | {_f(r['wall_s'], '{:.1f}')} | {r['steps']} | "
                     f"{_f(r['first_step_s'], '{:.1f}')} | {_f(r['tokens_per_s'], '{:,.0f}')} | "
                     f"{_f(r['mfu'], '{:.1%}')} | {_f(r['test_ppl'], '{:.2f}')} | {_f(r.get('gpu_util'), '{:.0f}')} | "
                     f"{_f(r.get('gpu_mb'), '{:,.0f}')} |")
    lines += ["", "## The compile cache: a later trial's first step against its cell's first", "",
              "| cell | first trial | its first step s | later trial | its first step s | ratio |",
              "|---|---|---:|---|---:|---:|"]
    for p in pairs:
        lines.append(f"| {p['cell']} | {p['first']} | {p['first_s']:.1f} | {p['later']} | {p['later_s']:.1f} | "
                     f"{p['ratio']:.2f} |")
    if not pairs:
        lines.append("| (no cell ran twice) | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="the sweep's runs folder")
    p.add_argument("--sweep", default="recursion_ablation")
    p.add_argument("--scale", default="gpu")
    args = p.parse_args(argv)
    if not (args.runs / "mlflow").is_dir():
        p.error(f"{args.runs}: no MLflow store (mlflow/) in this runs folder")
    os.environ["CEMLAB_RUNS_DIR"] = str(args.runs.resolve())
    sys.path.insert(0, str(ROOT))
    from cemlab import timing
    from cemlab.paths import sweep_log_dir
    from cemlab.tracking.store import default_tracking_uri, get_client

    logs = sweep_log_dir(args.sweep, args.scale)
    # one table per invocation: scripts/gpu-session.sh keeps each one's stages as stages-<label>.jsonl
    files = sorted(logs.glob(timing.STAGES_NAME.replace(".jsonl", "*.jsonl")))
    label = lambda f: f.stem.partition("-")[2] or "sweep"  # noqa: E731
    table = timing.format_table({label(f): timing.summarize(timing.read_spans(f)) for f in files}) if files else None
    rows = trial_rows(get_client(default_tracking_uri()), args.sweep, args.scale, trial_walls(logs))
    print(markdown(rows, compile_pairs(rows), table), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
