"""Stands in, on a machine without a GPU, for the commands of scripts/gpu-session.sh that need one
or need what one wrote (``GPU_SESSION_STAND_IN``): ``cemlab sweep``, ``cemlab bench``, ``cemlab
ui``, pytest and scripts/gpu-results.py. The script runs ``STAND_IN PYTHON ARGS...``.

Every command first asks the session's Python (PYTHON) for what the bundle brought: the toy
bundle's ``cemlab``, ``toy_a`` and ``toy_b`` (tests/test_gpu_session.py), as a real cemlab would
need its dependencies; without them it fails as a real one would. Then:

- ``-m cemlab.cli sweep ... size=[A,B] ...``: a "trial" per size in ``$CEMLAB_RUNS_DIR/trials.txt``,
  each size once (a later sweep of the same runs folder reuses what an earlier one ran), a stage
  line per trial in the sweep's ``stages.jsonl``, an ``mlflow/`` folder and a report's
  ``index.md``; with ``STAND_IN_HANG=SIZE`` it hangs after recording that size, as a sweep stopped
  at its limit would (SIGTERM ends it). ``--mark-interrupted``: nothing.
- ``scripts/gpu-results.py --runs RUNS``: the runs folder's trials and stage files, as a table.
- ``-m cemlab.cli bench ...``, ``-m cemlab.cli ui ...``, ``-m pytest ...``: a line of output.

Each call is appended to ``$STAND_IN_JOURNAL`` (JSON lines: argv, cwd, the runs folder, the trials
found there first, what the probe saw) before it acts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

PROBE = "import importlib.metadata as m, toy_a, toy_b; print(m.version('cemlab'), toy_a.VALUE, toy_b.VALUE)"


def main(argv: list[str]) -> int:
    py, args = argv[0], argv[1:]
    runs = Path(os.environ["CEMLAB_RUNS_DIR"]) if os.environ.get("CEMLAB_RUNS_DIR") else None
    if args and args[0].endswith("gpu-results.py"):
        runs = Path(args[args.index("--runs") + 1])
    trials = runs / "trials.txt" if runs else None
    before = trials.read_text().split() if trials and trials.is_file() else []
    probe = subprocess.run([py, "-c", PROBE], capture_output=True, text=True)
    entry = {"argv": args, "cwd": os.getcwd(), "runs": str(runs) if runs else None, "before": before,
             "probe": probe.stdout.split()}
    with open(os.environ["STAND_IN_JOURNAL"], "a") as f:
        f.write(json.dumps(entry) + "\n")
    if probe.returncode:
        print(f"stand-in: the session's Python lacks the bundle's packages:\n{probe.stderr}", file=sys.stderr)
        return 1

    if args[:3] == ["-m", "cemlab.cli", "sweep"] and "--mark-interrupted" not in args:
        sizes = next(re.fullmatch(r"size=\[(.*)\]", a).group(1).split(",") for a in args if a.startswith("size="))
        logs = runs / "logs" / "recursion_ablation-gpu"
        logs.mkdir(parents=True, exist_ok=True)
        (runs / "mlflow").mkdir(exist_ok=True)
        for size in sizes:
            if size in before:
                print(f"{size}: reused")
                continue
            with open(trials, "a") as f:
                f.write(size + "\n")
            with open(logs / "stages.jsonl", "a") as f:
                f.write(json.dumps({"name": "training", "trial": size, "start": time.time(), "end": time.time()}) + "\n")
            print(f"{size}: finished", flush=True)
            if os.environ.get("STAND_IN_HANG") == size:
                time.sleep(120)
        report = runs / "reports" / "recursion_ablation"
        report.mkdir(parents=True, exist_ok=True)
        (report / "index.md").write_text("sizes: " + " ".join(trials.read_text().split()) + "\n")
    elif args and args[0].endswith("gpu-results.py"):
        stages = sorted(p.name for p in runs.glob("logs/*/stages*.jsonl"))
        print("| trial |\n|---|\n" + "".join(f"| {t} |\n" for t in before) + f"stage files: {' '.join(stages)}")
    elif args[:3] == ["-m", "cemlab.cli", "bench"]:
        print("| variant | tokens/s | MFU |\n| llama | 1 | 0.1% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
