"""Data start-up benchmark: the first preparation of a corpus (cache miss) and the second (hit).

    cemlab bench data [--preset tiny] [--max-chars N] [--cache-dir DIR] [--repeat 2]

Defaults: the embedded ``stdlib`` corpus at the ``tiny`` preset's vocabulary (4096) and context
(256). Every run is a fresh Python process, as a training run or a Ray trial would be; for each
the table prints the seconds inside ``prepare_data`` and the wall seconds of the whole process
(interpreter start and imports included; their difference, mostly importing torch, is shown
apart), with documents and tokens per split. The cache is a
fresh temporary folder (removed afterwards) unless ``--cache-dir`` is given, so the first run is a
true miss: it trains the BPE and tokenises the corpus; the later runs only memory-map the cache.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time

from cemlab.data import DataConfig, prepare_data
from cemlab.models.config import PRESETS


def _child(spec: dict) -> None:
    """Run in the measured process: prepare once and print the stats as JSON."""
    bundle = prepare_data(DataConfig(**spec["data"]), spec["vocab_size"], spec["seq_len"])
    print(json.dumps(bundle.stats))


def run_once(spec: dict) -> tuple[dict, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cemlab.bench.data", "--child", json.dumps(spec)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"data preparation failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="tiny", help="model preset giving vocab and context (default: tiny)")
    p.add_argument("--source", default="stdlib", choices=["stdlib", "text"], help="corpus (default: stdlib)")
    p.add_argument("--path", default=None, help="data.path for --source text")
    p.add_argument("--max-chars", type=int, default=None, help="data.max_chars (default: the source's default)")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: a fresh temporary one)")
    p.add_argument("--repeat", type=int, default=2, help="runs in a row (default: 2, the miss then a hit)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cemlab bench data", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(json.loads(args.child))
        return 0
    preset = PRESETS[args.preset]
    cache = args.cache_dir or tempfile.mkdtemp(prefix="cemlab-bench-data-")
    data = {"source": args.source, "path": args.path, "max_chars": args.max_chars, "cache_dir": cache}
    spec = {"data": {k: v for k, v in data.items() if v is not None},
            "vocab_size": preset["vocab_size"], "seq_len": preset["context_length"]}
    print(f"data start-up: source={args.source} vocab={spec['vocab_size']} seq_len={spec['seq_len']} "
          f"cache={cache}")
    try:
        rows = []
        for i in range(args.repeat):
            try:
                stats, wall = run_once(spec)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                return 2
            rows.append((i + 1, stats, wall))
            if i == 0:
                docs, toks, chars = stats["documents"], stats["tokens"], stats["chars"]
                print(f"corpus: {stats['source']}")
                print(f"  characters: {sum(chars.values()):,}   documents train/val/test: "
                      f"{docs['train']}/{docs['val']}/{docs['test']}")
                print(f"  tokens train/val/test: {toks['train']:,}/{toks['val']:,}/{toks['test']:,} "
                      f"({stats['dtype']}, {sum(chars.values()) / max(1, sum(toks.values())):.2f} characters per token)")
        print(f"{'run':>3}  {'cache':<5} {'tokenizer':<9} {'prepare_data s':>14} {'start+imports s':>15} "
              f"{'process wall s':>14}")
        for i, stats, wall in rows:
            print(f"{i:>3}  {'hit' if stats['cache_hit'] else 'miss':<5} "
                  f"{'hit' if stats['tokenizer_cache_hit'] else 'miss':<9} {stats['seconds']:>14.2f} "
                  f"{wall - stats['seconds']:>15.2f} {wall:>14.2f}")
    finally:
        if args.cache_dir is None:
            shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
