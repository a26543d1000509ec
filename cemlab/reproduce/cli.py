"""``cemlab reproduce SOURCE (--trials N [--seed S] | --trial ID ...)``: rerun a sample of a committed
report's trials in a fresh runs folder and say whether each holds the stated guarantee.

SOURCE is a report folder holding ``trials.csv`` (``docs/main-job/recursion_ablation``, a ladder rung's
folder such as ``docs/ladder/recursion_ablation/workstation-tpp5``), a runs folder, or a tracking URI.
Before anything trains it prints the trials it chose (and the seed that chose them), the guarantee
for each (bit-identical on the committed run's environment kind, else within a relative tolerance)
and how long the reruns are planned to take. Then, per trial, the committed and new test and
validation metrics and their relative differences, and a verdict. Exit codes: 0 every trial holds,
1 at least one does not, 2 bad input (nothing trained). docs/reproducibility.md says what is
guaranteed and what was measured; ``cemlab.reproduce.trials`` does the work.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_DIFFERS, EXIT_INPUT = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a report folder with trials.csv (e.g. docs/main-job/recursion_ablation), "
                                       "a runs folder or a tracking URI")
    parser.add_argument("--trials", type=int, default=None, metavar="N", help="rerun N trials chosen at random")
    parser.add_argument("--seed", type=int, default=None, help="the seed of the random choice (default: drawn and printed)")
    parser.add_argument("--trial", action="append", default=None, metavar="ID",
                        help="rerun this trial (repeatable), e.g. 86m__llama__lr2e-3__s0")
    parser.add_argument("--runs", default=None, metavar="DIR",
                        help="the fresh runs folder of the reruns (must not exist or be empty; "
                             "default runs/reproduce-<UTC time>)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR",
                        help="token cache to read the corpus from (default <runs folder of this project>/cache)")
    parser.add_argument("--dry-run", action="store_true", help="print the choice, guarantee and time, train nothing")


def _fresh_runs(arg: str | None) -> Path:
    from cemlab.paths import runs_dir
    from cemlab.reproduce.trials import ReproduceError

    path = Path(arg) if arg else runs_dir() / time.strftime("reproduce-%Y%m%d-%H%M%S", time.gmtime())
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ReproduceError(f"--runs {path}: exists and is not empty; give a new folder (nothing is deleted)")
    return path.resolve()


def _fmt(x: float) -> str:
    return f"{x:.10g}"


def run(args: argparse.Namespace) -> int:
    from cemlab import numerics
    from cemlab.paths import cache_dir
    from cemlab.reproduce import trials as rp
    from cemlab.tracking import environment as env_mod

    try:
        numerics.apply()  # before any kernel runs: the mode this command's trials train in
        trials = rp.read_committed(args.source)
        chosen, seed = rp.choose(trials, args.trials, args.trial, args.seed)
        rebuilt = [rp.rebuild(c) for c in chosen]
        runs = _fresh_runs(args.runs)
    except (rp.SweepError, numerics.NumericsError) as e:  # ReproduceError is a SweepError
        print(f"cemlab reproduce: {e}", file=sys.stderr)
        return EXIT_INPUT
    here = env_mod.environment(threads=rp.threads_of(rebuilt[0]))
    how = f"{len(chosen)} named trial(s)" if seed is None else \
        f"{len(chosen)} of {len(trials)} trials chosen at random with --seed {seed}"
    print(f"cemlab reproduce {args.source}: {how}", flush=True)
    print(f"this machine: {env_mod.describe(here)}")
    planned = [rp.planned_seconds(t) for t in rebuilt]
    for c, t, s in zip(chosen, rebuilt, planned):
        why = rp.expected(c, rp.threads_of(t))[2]
        print(f"  {c.scale} {c.trial_id} ({c.config_hash}): expect {why}; committed on {env_mod.describe(c.env)}; "
              f"planned {s:.0f} s")
    print(f"planned time: {sum(planned):.0f} s one after the other (cemlab plan's per-trial figures); runs folder {runs}",
          flush=True)
    if args.dry_run:
        return EXIT_OK
    runs.mkdir(parents=True, exist_ok=True)
    cache = args.cache_dir or str(cache_dir())
    outcomes = []
    for c, t in zip(chosen, rebuilt):
        o = rp.rerun(c, t, runs, cache)
        outcomes.append(o)
        print(f"  {c.trial_id}: test {_fmt(c.test)} -> {_fmt(o.test)} (rel {o.rel('test'):.2e}), val {_fmt(c.val)} -> "
              f"{_fmt(o.val)} (rel {o.rel('val'):.2e}), status {c.status} -> {o.status}, {o.seconds:.0f} s: "
              f"{'holds' if o.holds else 'DOES NOT HOLD'} ({'bit-identical' if o.exact else f'within {o.rtol:g}'} "
              "expected)", flush=True)
    bad = [o for o in outcomes if not o.holds]
    print(f"verdict: {len(outcomes) - len(bad)} of {len(outcomes)} trials hold the guarantee"
          + (f"; {', '.join(o.committed.trial_id for o in bad)} do not" if bad else "")
          + f" (docs/reproducibility.md); reruns in {runs}")
    return EXIT_DIFFERS if bad else EXIT_OK
