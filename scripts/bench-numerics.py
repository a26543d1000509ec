#!/usr/bin/env python3
"""What each CPU numerics lever costs in training speed and what it does to a trial's numbers, in one
run (docs/reproducibility.md, "The levers and their price").

    .venv/bin/python scripts/bench-numerics.py [--scale workstation-tpp1.25] [--trial ID ...] [--rounds 2]

Each lever trains the same committed trials in a fresh process (the variables must be set before
the first torch kernel), one after the other, on this machine: native (no variable), torch's own
kernels pinned to AVX2 (ATEN_CPU_CAPABILITY=avx2), MKL's conditional numerical reproducibility
(MKL_CBWR=AVX2,STRICT and COMPATIBLE), oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2), the whole
avx2 mode of cemlab.numerics (CEMLAB_NUMERICS=avx2), torch.use_deterministic_algorithms(True), and
two threads instead of the trial's one. It prints, per lever, the seconds in Lightning's fit (training
and its validations) summed over the trials (the median over rounds, each round every lever once in
this order), the ratio to native's median, each trial's test perplexity with its relative difference
to native, and whether every round gave the same perplexities. Native runs first and last in each
round, so that the machine's drift shows as native's own spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LEVERS: list[tuple[str, dict[str, str]]] = [
    ("native", {}),
    ("ATEN_CPU_CAPABILITY=avx2", {"ATEN_CPU_CAPABILITY": "avx2"}),
    ("MKL_CBWR=AVX2,STRICT", {"MKL_CBWR": "AVX2,STRICT"}),
    ("MKL_CBWR=COMPATIBLE", {"MKL_CBWR": "COMPATIBLE"}),
    ("ONEDNN_MAX_CPU_ISA=AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ("CEMLAB_NUMERICS=avx2 (all three)", {"CEMLAB_NUMERICS": "avx2"}),
    ("use_deterministic_algorithms", {"BENCH_DETERMINISTIC": "1"}),
    ("2 threads", {"BENCH_THREADS": "2"}),
    ("native, again", {}),
]
LIBRARY_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                "CEMLAB_NUMERICS")
DEFAULT_TRIALS = ["86m__llama__lr2e-3__s0", "86m__cem-mlp_T2_dplr_eta-1__lr4e-3__s0"]

CHILD = r"""
import json, os, sys, time
import torch
import cemlab.train.run as run_mod
from cemlab.reproduce import trials as rp
if os.environ.get("BENCH_DETERMINISTIC"):
    torch.use_deterministic_algorithms(True)
scale, runs, cache = sys.argv[1], sys.argv[2], sys.argv[3]
fit_s = [0.0]
_fit = run_mod.fit
def timed_fit(*a, **k):
    t0 = time.perf_counter(); _fit(*a, **k); fit_s[0] += time.perf_counter() - t0
run_mod.fit = timed_fit
out = {}
for tid in sys.argv[4:]:
    c = next(c for c in rp.read_committed(os.path.join("docs/ladder/recursion_ablation", scale)) if c.trial_id == tid) \
        if scale != "tiny" else next(c for c in rp.read_committed("docs/main-job/recursion_ablation") if c.trial_id == tid)
    t = rp.rebuild(c)
    cfg = t.config.model_copy(deep=True)
    cfg.train.num_threads = int(os.environ.get("BENCH_THREADS") or max(1, int(t.resources.cpus_per_worker)))
    cfg.train.progress_bar = False
    cfg.train.checkpoint_dir = os.path.join(runs, "ckpt", tid)
    cfg.data.cache_dir = cache
    r = run_mod.train(cfg, tracking_uri=f"sqlite:///{runs}/mlflow.db", resume=False)
    out[tid] = r.metrics.get("test/ppl")
print(json.dumps({"fit_s": fit_s[0], "ppl": out, "isa": torch.backends.cpu.get_cpu_capability()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="workstation-tpp1.25", help="a ladder rung's scale, or tiny (the main job)")
    ap.add_argument("--trial", action="append", default=None, help="committed trial ids (default: a Llama and a CEM MLP)")
    ap.add_argument("--rounds", type=int, default=2, help="every lever this many times, interleaved (default 2)")
    ap.add_argument("--cache-dir", default=os.path.join("runs", "cache"), help="token cache (default runs/cache)")
    args = ap.parse_args()
    trials = args.trial or DEFAULT_TRIALS
    runs_by: dict[str, list[dict]] = {name: [] for name, _ in LEVERS}
    for rnd in range(args.rounds):
        for name, env in LEVERS:
            with tempfile.TemporaryDirectory(prefix="bench-numerics-") as runs:
                base = {k: v for k, v in os.environ.items() if k not in LIBRARY_VARS}
                done = subprocess.run([sys.executable, "-c", CHILD, args.scale, runs, os.path.abspath(args.cache_dir),
                                       *trials], env={**base, **env, "CEMLAB_RUNS_DIR": runs}, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                return 1
            runs_by[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {rnd + 1} {name}: {runs_by[name][-1]['fit_s']:.1f} s", file=sys.stderr, flush=True)
    med = {name: statistics.median(r["fit_s"] for r in rs) for name, rs in runs_by.items()}
    native = runs_by["native"][0]
    print(f"scale {args.scale}, trials {' '.join(trials)}; seconds in fit summed over the trials, one trial at a time, "
          f"median of {args.rounds} round(s)")
    print(f"{'lever':36s} {'kernels':8s} {'fit s':>7s} {'ratio':>6s} {'rounds':>18s}  test ppl per trial (relative "
          "difference to native); same in every round")
    for name, rs in runs_by.items():
        r = rs[0]
        ppl = "  ".join(f"{r['ppl'][t]!r} ({abs(r['ppl'][t] - native['ppl'][t]) / native['ppl'][t]:.1e})" for t in trials)
        same = all(x["ppl"] == r["ppl"] for x in rs)
        each = "/".join(f"{x['fit_s']:.1f}" for x in rs)
        print(f"{name:36s} {r['isa']:8s} {med[name]:7.1f} {med[name] / med['native']:6.2f} {each:>18s}  {ppl}; "
              f"{'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
