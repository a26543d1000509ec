"""Measure the wall times the README quotes and print its table, with the machine and the date.

    python3 scripts/measure-timings.py install train   # measure these rows now (any of: sweep install train)
    python3 scripts/measure-timings.py sweep           # the main job alone
    python3 scripts/measure-timings.py                 # print the table of what docs/timings.json holds
    python3 scripts/measure-timings.py stages --save after.json   # where one sweep's time goes
    python3 scripts/measure-timings.py --compare before.json after.json  # two stage tables side by side
    python3 scripts/measure-timings.py --read RUNS/logs/SWEEP-SCALE/stages.jsonl  # a finished sweep's stages
    python3 scripts/measure-timings.py --read A/stages.jsonl B/stages.jsonl --csv stages.csv  # ... as a CSV row each
    python3 scripts/measure-timings.py cli [--against OTHER_CHECKOUT]  # how fast the CLI answers

Each row is measured on its own, from a clean state in a temporary folder, with the command a new
user types:

* ``sweep``: ``make sweep SWEEP=recursion_ablation`` (the main job, default scale) with a fresh
  runs folder, token cache and reports folder, on the repository's ``.venv`` (installed first);
* ``install``: ``make install VENV=<tmp>/.venv``, a fresh virtual environment (pip's download
  cache as the machine has it);
* ``train``: ``cemlab train configs/default.yaml`` with a fresh runs folder, so the corpus is
  tokenised as on a first run.

* ``stages``: ``cemlab sweep recursion_ablation --scale tiny seed=[0] --no-seeding --no-bracketing`` (18
  trials: no seeds or rates added) with a fresh runs folder, run by this interpreter on this checkout; its wall
  time broken into stages from the timestamps the sweep writes (``cemlab.timing``:
  ``<runs>/logs/<sweep>-<scale>/stages.jsonl``): seconds
  and share of the slot-time (wall x trials at once) of each stage, and the training share. Not a
  README row: ``--save FILE`` keeps the summary (with the machine and its load) for ``--compare``.
  ``--read FILE`` prints the same table for a sweep that already ran (any sweep, scale or ladder
  rung: its ``stages.jsonl``), running nothing; ``--csv FILE`` also writes one row per sweep (its
  label, wall time, trials at once, trials and the seconds of every stage), as
  ``docs/ladder-stages.csv`` holds the ladder's rungs.

* ``cli``: the wall time of ``cemlab --help``, a refused argument, ``cemlab plan recursion_ablation
  --scale smoke`` and a tab completion, each in a fresh interpreter on this checkout (median of
  ``--rounds``); ``--against DIR`` times another checkout in the same rounds, interleaved, and
  prints the ratios. Not a README row either.

A measured row replaces that row in ``docs/timings.json`` (``--no-write``: only print); the
table is rendered from that file, and the README quotes it verbatim (``tests/test_docs.py``
checks both). The machine line says the CPU, its cores, the GPU if any, and the 1-minute load
average when the measurement started and ended: on a shared machine a loaded run is slower, and
the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "docs" / "timings.json"
#: Row id -> (what, the command as the README shows it), in the table's order.
ROWS = {
    "sweep": ("the main job", "make sweep SWEEP=recursion_ablation"),
    "install": ("install (fresh `.venv`)", "make install"),
    "train": ("one training run", "cemlab train configs/default.yaml"),
}


def machine() -> str:
    """``<CPU model>, <n> cores[, <GPU>]`` of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [cpu, f"{os.cpu_count()} cores"]
    if shutil.which("nvidia-smi"):
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
        parts += [g.split(" (UUID")[0] for g in gpus]
    return ", ".join(parts)


def _env(tmp: Path) -> dict[str, str]:
    """A clean environment: this folder's runs, cache and reports; no remote store or cluster."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env.update(CEMLAB_RUNS_DIR=str(tmp / "runs"), CEMLAB_REPORTS_DIR=str(tmp / "reports"),
               RAY_TMPDIR=str(tmp / "ray"))
    (tmp / "ray").mkdir(exist_ok=True)
    return env


def _commands(row: str, tmp: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(setup commands, not timed; the timed commands) of a row."""
    make = ["make", "-C", str(ROOT)]
    if row == "install":
        return [], [make + ["install", f"VENV={tmp / '.venv'}"]]
    cemlab = str(ROOT / ".venv" / "bin" / "cemlab")
    if row == "train":
        return [make + ["install"]], [[cemlab, "train", str(ROOT / "configs" / "default.yaml")]]
    return [make + ["install"]], [make + ["sweep", "SWEEP=recursion_ablation"]]


def measure(row: str, keep: Path | None = None) -> dict:
    """Run a row's commands in a fresh folder; its wall time, the machine and the date. ``keep``: a
    folder to copy the row's reports into (the sweep's claim table) before the fresh folder goes."""
    with tempfile.TemporaryDirectory(prefix=f"cemlab-timing-{row}-") as d:
        tmp = Path(d)
        env = _env(tmp)
        setup, timed = _commands(row, tmp)
        for cmd in setup:
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        load, start = os.getloadavg()[0], time.perf_counter()
        try:
            for cmd in timed:
                print(f"measure-timings: {' '.join(cmd)}", file=sys.stderr, flush=True)
                subprocess.run(cmd, env=env, check=True, cwd=ROOT)
        finally:
            if row == "sweep":  # the sweep's local MLflow server serves this folder's store: stop it
                subprocess.run([str(ROOT / ".venv" / "bin" / "cemlab"), "ui", "--stop"], env=env, check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        if keep is not None and (tmp / "reports").is_dir():
            shutil.copytree(tmp / "reports", keep / row, dirs_exist_ok=True)
            for stages in (tmp / "runs" / "logs").glob("*/stages.jsonl"):   # the sweep's stage timestamps
                shutil.copy(stages, keep / row / f"{stages.parent.name}-stages.jsonl")
    where = f"{machine()}, load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    return {"seconds": round(seconds, 1), "machine": where,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def stages_command(scale: str = "tiny", all_seeds: bool = False, grid: bool = False,
                   overrides: list[str] | None = None) -> list[str]:
    """The one-seed sweep, its grid only (default); the main job as ``make sweep`` runs it
    (``all_seeds``); or the main job's grid of every seed without the seeds its looks add or the rates
    its bracketing adds (``grid``). ``overrides``: more ``key=value`` for every trial (e.g.
    ``train.tokens=655360``: longer trials)."""
    seeds = [] if all_seeds or grid else ["seed=[0]"]
    return ["sweep", "recursion_ablation", "--scale", scale, *seeds, *(overrides or []),
            *([] if all_seeds else ["--no-seeding", "--no-bracketing"]), "--plain"]


def measure_stages(command: list[str]) -> dict:
    """Run ``cemlab <command>`` from a fresh runs folder with this interpreter and this checkout; the
    stage summary of its ``stages.jsonl`` (``cemlab.timing.summarize``), the machine and its load."""
    sys.path.insert(0, str(ROOT))
    from cemlab import timing

    with tempfile.TemporaryDirectory(prefix="cemlab-timing-stages-") as d:
        tmp = Path(d)
        env = _env(tmp)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cemlab = [sys.executable, "-m", "cemlab.cli"]
        load, start = os.getloadavg()[0], time.perf_counter()
        try:
            print(f"measure-timings: cemlab {' '.join(command)}", file=sys.stderr, flush=True)
            subprocess.run(cemlab + command, env=env, check=True, cwd=ROOT, stdout=sys.stderr)
        finally:
            subprocess.run(cemlab + ["ui", "--stop"], env=env, check=False, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        files = sorted((tmp / "runs" / "logs").glob(f"*/{timing.STAGES_NAME}"))
        if not files:
            raise SystemExit("measure-timings: the sweep wrote no stages.jsonl")
        summary = timing.summarize(timing.read_spans(files[0]))
    summary.update(command="cemlab " + " ".join(command), run_seconds=round(seconds, 1),
                   machine=f"{machine()}, load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
                   date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    return summary


def read_stages(paths: list[Path]) -> dict[str, dict]:
    """The stage summaries of sweeps that already ran (``cemlab.timing.summarize`` of each
    ``stages.jsonl``), labelled by their log folder (``<sweep>-<scale>``); a missing or empty file is
    named before anything is printed."""
    sys.path.insert(0, str(ROOT))
    from cemlab import timing

    out = {}
    for p in paths:
        if not p.is_file():
            raise SystemExit(f"measure-timings: --read {p}: no such file (a sweep writes "
                             f"<runs>/logs/<sweep>-<scale>/{timing.STAGES_NAME})")
        spans = timing.read_spans(p)
        if not spans:
            raise SystemExit(f"measure-timings: --read {p}: the file holds no stage")
        label = p.parent.name if p.name == timing.STAGES_NAME else p.stem
        began = min(s["start"] for s in spans if "start" in s)
        out[label] = dict(timing.summarize(spans), source=str(p),
                          started=datetime.fromtimestamp(began, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    return out


def write_stage_csv(summaries: dict[str, dict], path: Path) -> None:
    """One row per summary: its label (``<sweep>-<scale>``), when it started, wall seconds, trials at once, trials
    run, then the seconds of every stage in the stage table's order (``cemlab.timing.ROWS``)."""
    import csv

    from cemlab import timing

    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label", "started", "wall", "slots", "trials", *timing.ROWS])
        for label, s in summaries.items():
            w.writerow([label, s.get("started", ""), f"{s['wall']:.1f}", s["slots"], s["trials"],
                        *(f"{s['seconds'][name]:.1f}" for name in timing.ROWS)])


CLI_COMMANDS = {
    "cemlab --help": (["--help"], {}),
    "refused argument": (["plan", "--no-such-flag"], {}),
    "cemlab plan (smoke)": (["plan", "recursion_ablation", "--scale", "smoke"], {}),
    "tab completion": ([], {"_ARGCOMPLETE": "1", "COMP_LINE": "cemlab sw", "COMP_POINT": "9", "COMP_TYPE": "9",
                            "_ARGCOMPLETE_STDOUT_FILENAME": os.devnull}),
}


def measure_cli(roots: list[Path], rounds: int) -> dict[str, dict[str, float]]:
    """Median seconds of each CLI command per checkout, the checkouts interleaved in every round."""
    import statistics

    times: dict[str, dict[str, list[float]]] = {str(r): {c: [] for c in CLI_COMMANDS} for r in roots}
    with tempfile.TemporaryDirectory(prefix="cemlab-timing-cli-") as d:
        env = _env(Path(d))
        for _ in range(rounds):
            for root in roots:
                for name, (args, extra) in CLI_COMMANDS.items():
                    run_env = {**env, **extra, "PYTHONPATH": str(root)}
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-m", "cemlab.cli", *args], env=run_env, cwd=d,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    times[str(root)][name].append(time.perf_counter() - t0)
    return {root: {c: statistics.median(v) for c, v in per.items()} for root, per in times.items()}


def stage_tables(summaries: dict[str, dict]) -> str:
    sys.path.insert(0, str(ROOT))
    from cemlab import timing

    notes = [f"- {label}: `{s['command']}`, {s['run_seconds']} s, {s['machine']}, {s['date']}" if "command" in s
             else f"- {label}: read from {s.get('source', 'a stages file')}" for label, s in summaries.items()]
    return timing.format_table(summaries) + "\n\n" + "\n".join(notes)


def _duration(s: float) -> str:
    s = round(s)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def table(timings: dict) -> str:
    """The Markdown table the README quotes: every row, measured or not yet."""
    lines = ["| what | command | wall time | machine (1-minute load average) | measured |",
             "|---|---|---:|---|---|"]
    for row, (what, command) in ROWS.items():
        t = timings.get(row)
        if t is None:
            lines.append(f"| {what} | `{command}` | not measured yet: "
                         f"`python3 scripts/measure-timings.py {row}` | | |")
        else:
            lines.append(f"| {what} | `{command}` | {_duration(t['seconds'])} | {t['machine']} | {t['date']} |")
    return "\n".join(lines)


def read_timings(path: Path = TIMINGS) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # no argparse `choices` here: Python 3.11's argparse refuses an empty list against them
    parser.add_argument("rows", nargs="*", help=f"rows to measure now, of {', '.join(ROWS)} (none: print the table)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {TIMINGS.relative_to(ROOT)}")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="copy each row's reports (and a sweep's stages.jsonl) into DIR/<row>/")
    parser.add_argument("--save", type=Path, metavar="FILE", help="stages: write the stage summary to FILE (JSON)")
    parser.add_argument("--against", type=Path, metavar="DIR", help="cli: also time this checkout, interleaved")
    parser.add_argument("--rounds", type=int, default=5, help="cli: rounds (default 5)")
    parser.add_argument("--all-seeds", action="store_true",
                        help="stages: the main job as make sweep runs it (every seed, the rates its bracketing adds and "
                             "the seeds its looks add) instead of seed=[0] --no-seeding --no-bracketing")
    parser.add_argument("--grid", action="store_true",
                        help="stages: the main job's grid (every seed and rate of its file) without the seeds its "
                             "looks add or the rates its bracketing adds")
    parser.add_argument("--scale", default="tiny", help="stages: the sweep's scale (default tiny)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="stages: an override for every trial (repeatable), e.g. train.tokens=655360")
    parser.add_argument("--compare", type=Path, nargs="+", metavar="FILE",
                        help="print the stage tables of these saved summaries side by side (labels: file names)")
    parser.add_argument("--read", type=Path, nargs="+", metavar="STAGES_JSONL",
                        help="print the stage table of sweeps that already ran (their <runs>/logs/<sweep>-<scale>/"
                             "stages.jsonl), side by side; runs nothing")
    parser.add_argument("--csv", type=Path, metavar="FILE",
                        help="with --read: also write one CSV row per sweep (label, wall, slots, trials, every stage's seconds)")
    args = parser.parse_args(argv)
    # every row is checked before any is measured: a typo must not cost a sweep's minutes first
    unknown = [r for r in args.rows if r not in (*ROWS, "cli", "stages")]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}: choose from {', '.join((*ROWS, 'cli', 'stages'))}"
                     + ("; a finished sweep's stages.jsonl is read with --read FILE"
                        if any(r.endswith(".jsonl") for r in unknown) else ""))
    if args.read:
        summaries = read_stages(args.read)
        print(stage_tables(summaries))
        if args.csv:
            write_stage_csv(summaries, args.csv)
        return 0
    if args.csv:
        parser.error("--csv writes what --read reads: give the stages.jsonl files with --read")
    if args.compare:
        print(stage_tables({p.stem: json.loads(p.read_text()) for p in args.compare}))
        return 0
    if "cli" in args.rows:
        roots = [ROOT] + ([args.against.resolve()] if args.against else [])
        load = os.getloadavg()[0]
        medians = measure_cli(roots, args.rounds)
        head = "| command | " + " | ".join(f"{r} (s)" for r in medians) + (" | ratio |" if len(roots) > 1 else " |")
        print(head + "\n|---|" + "---:|" * (len(medians) + (len(roots) > 1)))
        for name in CLI_COMMANDS:
            cells = [f"{m[name]:.2f}" for m in medians.values()]
            if len(roots) > 1:
                cells.append(f"{medians[str(roots[0])][name] / medians[str(roots[1])][name]:.2f}")
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"\n{machine()}, load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
              f"median of {args.rounds} rounds, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
        args.rows = [r for r in args.rows if r != "cli"]
        if not args.rows:
            return 0
    if "stages" in args.rows:
        summary = measure_stages(stages_command(args.scale, args.all_seeds, args.grid, args.set))
        if args.save:
            args.save.write_text(json.dumps(summary, indent=2) + "\n")
        print(stage_tables({"this run": summary}))
        args.rows = [r for r in args.rows if r != "stages"]
        if not args.rows:
            return 0
    timings = read_timings()
    for row in args.rows:
        timings[row] = measure(row, args.keep)
        print(f"measure-timings: {row}: {_duration(timings[row]['seconds'])}", file=sys.stderr, flush=True)
        if not args.no_write:
            TIMINGS.write_text(json.dumps(timings, indent=2, sort_keys=True) + "\n")
    print(table(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
