"""Data-preparation benchmark: tokens/s of the token store on 1 and 2 worker processes, and the
wall time of a ``paper``-shaped sweep's data step before (tokenised once per token budget, inside
the trials) and after (``cemlab data prepare``: once, to the largest budget, in parallel).

    cemlab bench prepare [--chars 6000000] [--workers 1,2] [--sweep recursion_ablation]

Two corpora: the embedded ``stdlib`` corpus and a local stand-in for SlimPajama, JSONL shards of
SlimPajama's record format (``{"text": ..., "meta": {"redpajama_set_name": ...}}``) written from
standard-library text (the real corpus is out of reach here), streamed through ``datasets`` as the
paper scale streams SlimPajama. The tokenizer is the byte-level BPE trained once beforehand (its
training is not timed). The paper-shaped step takes the sweep's paper-scale token budgets (one
per model size), scaled down by one factor so the largest fills the stand-in's training split.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cemlab.data import DataConfig, prepare_data
from cemlab.data.corpus import stdlib_corpus
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tasks import task_of
from cemlab.train.plan import make_plan

RECORD_CHARS = 4000
SETS = ("RedPajamaCommonCrawl", "RedPajamaC4", "RedPajamaGithub", "RedPajamaBook", "RedPajamaArXiv",
        "RedPajamaWikipedia", "RedPajamaStackExchange")


def write_standin(folder: Path, chars: int, shards: int = 4) -> int:
    """JSONL shards of SlimPajama's record format from standard-library text; returns characters."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [open(folder / f"chunk_{i}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    n = 0
    i = 0
    for doc in stdlib_corpus().documents():
        for start in range(0, len(doc.text), RECORD_CHARS):  # records of about SlimPajama's mean length
            if n >= chars:
                break
            text = doc.text[start:start + RECORD_CHARS][: chars - n]
            record = {"text": text, "meta": {"redpajama_set_name": SETS[i % len(SETS)]}}
            files[i % shards].write(json.dumps(record) + "\n")
            n += len(text)
            i += 1
    for fh in files:
        fh.close()
    return n


def timed(cfg, vocab: int, seq_len: int, target: int | None, workers: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    b = prepare_data(cfg, vocab, seq_len, min_train_tokens=target, workers=workers)
    return time.perf_counter() - t0, b.stats


def clear_tokens(cache: Path) -> None:
    shutil.rmtree(cache / "data" / "tokens", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cemlab bench prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("--chars", type=int, default=6_000_000, help="characters of each corpus (default 6 M)")
    p.add_argument("--workers", default="1,2", help="worker process counts to time (default 1,2)")
    p.add_argument("--sweep", default="recursion_ablation", help="sweep whose paper budgets shape the data step")
    p.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary (default 4096, the tiny preset's)")
    args = p.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="cemlab-bench-prepare-"))
    try:
        write_standin(tmp / "slimpajama", args.chars)
        corpora = {
            "stdlib (embedded)": DataConfig(max_chars=args.chars, cache_dir=str(tmp / "c1")),
            "SlimPajama stand-in (JSONL, hf streaming)": DataConfig(
                source="hf", hf_dataset=str(tmp / "slimpajama"), cache_dir=str(tmp / "c2"), bpe_max_chars=2_000_000),
        }
        print(f"tokens/s of the token store ({args.chars:,} characters per corpus, BPE {args.vocab}):")
        print(f"{'corpus':<44}" + "".join(f"{f'{w} worker(s)':>16}" for w in workers) + f"{'ratio':>8}")
        totals = {}
        for name, cfg in corpora.items():
            hf = cfg.source == "hf"
            timed(cfg, args.vocab, 256, 10**12 if hf else None, 0)  # trains and caches the BPE (not timed)
            rates = []
            for w in workers:
                clear_tokens(Path(cfg.cache_dir))
                secs, stats = timed(cfg, args.vocab, 256, 10**12 if hf else None, w)
                tokens = sum(stats["tokens"].values())
                totals[name] = stats["tokens"]["train"]
                rates.append(tokens / secs)
            print(f"{name:<44}" + "".join(f"{r / 1e3:>12.0f} k/s" for r in rates) + f"{rates[-1] / rates[0]:>8.2f}")

        # the paper-shaped data step on the stand-in
        trials = [t for t in load_sweep(args.sweep).expand("paper") if task_of(t.config).prepared_data]
        budgets = sorted({make_plan(t.config, t.resources.workers).tokens for t in trials})
        cfg = corpora["SlimPajama stand-in (JSONL, hf streaming)"]
        scale = 0.95 * totals["SlimPajama stand-in (JSONL, hf streaming)"] / budgets[-1]
        scaled = [max(1, int(b * scale)) for b in budgets]
        before = 0.0
        for b in scaled:  # before: each budget was its own cache entry, tokenised inline in a trial
            clear_tokens(Path(cfg.cache_dir))
            before += timed(cfg, args.vocab, 256, b, 0)[0]
        clear_tokens(Path(cfg.cache_dir))
        w = max(workers)
        after = timed(cfg, args.vocab, 256, scaled[-1], w)[0]  # after: once, to the largest budget
        after += sum(timed(cfg, args.vocab, 256, b, 0)[0] for b in scaled)  # every budget maps its prefix
        print(f"\n{args.sweep} at paper scale: {len(trials)} trials, budgets {[f'{b / 1e9:.2f}B' for b in budgets]} "
              f"tokens, scaled by {scale:.2e} to {[f'{b / 1e6:.2f}M' for b in scaled]}")
        print(f"data step before (once per budget, inline in the trials): {before:8.2f} s")
        print(f"data step after  (cemlab data prepare, {w} workers, + {len(scaled)} prefix maps): {after:8.2f} s")
        print(f"ratio before / after: {before / after:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
