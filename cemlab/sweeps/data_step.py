"""The data step of a sweep (``cemlab data prepare``): tokenise what its trials will read, once,
before any trial starts.

The trials of a sweep share a few data sets (usually one: same corpus, tokenizer and split for
every size and variant). :func:`prepare_sweep_data` groups the trials by data set and fills the
token store (:mod:`cemlab.data.store`) for each: everything for a local corpus, the largest
trial's token budget for a streamed one (smaller budgets read a prefix). ``cemlab sweep`` calls
it before the trials start and then forbids the trials to tokenise (``CEMLAB_DATA_READ_ONLY``),
so GPU nodes never sit idle tokenising, and a paper grid tokenises SlimPajama once instead of once
per trial and budget.

Parallel over local processes (``workers``, default: every core), or over the cluster's CPUs as
Ray tasks when ``$RAY_ADDRESS`` is set and Ray is connected.

Ray is imported inside :func:`prepare_sweep_data`, so ``cemlab plan``, which reads
:func:`sweep_data_needs`, does not load it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cemlab.data import prepare_data
from cemlab.data.store import print_progress
from cemlab.links import PATH, print_link
from cemlab.tasks import task_of
from cemlab.train.plan import make_plan

if TYPE_CHECKING:
    from rich.console import Console

    from cemlab.sweeps.sweepfile.schema import Trial


@dataclass
class DataNeed:
    """One data set a sweep reads: its config, vocabulary, longest sequence, largest budget."""

    data: Any            # DataConfig
    vocab_size: int
    seq_len: int
    target: int | None   # training tokens the largest trial streams (source='hf'); None: everything
    trials: int


def sweep_data_needs(trials: list["Trial"], cache_dir: str | None = None) -> list[DataNeed]:
    """The distinct data sets of a sweep's trials whose task reads a corpus prepared ahead (language
    models; GP trials draw their data)."""
    needs: dict[str, DataNeed] = {}
    for t in trials:
        cfg = t.config
        if not task_of(cfg).prepared_data:
            continue
        data = cfg.data.model_copy(update={"cache_dir": cache_dir}) if cache_dir else cfg.data
        plan = make_plan(cfg, max(1, int(t.resources.workers)))
        key = f"{data.model_dump_json()}|{cfg.model.vocab_size}"
        target = plan.tokens if data.source == "hf" else None
        need = needs.get(key)
        if need is None:
            needs[key] = DataNeed(data, cfg.model.vocab_size, plan.seq_len, target, 1)
        else:
            need.seq_len = max(need.seq_len, plan.seq_len)
            need.target = None if target is None else max(need.target or 0, target)
            need.trials += 1
    return list(needs.values())


def prepare_sweep_data(trials: list["Trial"], *, cache_dir: str | None = None, workers: int | None = None,
                       console: "Console | None" = None, progress: bool = True) -> list[dict[str, Any]]:
    """Fill the token store for every data set of ``trials``; returns one stats dict per data set.
    A data set already in the store costs a memory map. Bad data settings raise ``DataError``."""
    import ray

    use_ray = bool(os.environ.get("RAY_ADDRESS")) and ray.is_initialized()
    workers = workers or os.cpu_count() or 1
    out = []
    for need in sweep_data_needs(trials, cache_dir):
        t0 = time.perf_counter()
        bundle = prepare_data(need.data, need.vocab_size, need.seq_len, min_train_tokens=need.target,
                              workers=workers, use_ray=use_ray, progress=print_progress("data") if progress else None)
        stats = {**bundle.stats, "trials": need.trials, "prepare_seconds": round(time.perf_counter() - t0, 3)}
        out.append(stats)
        if console is not None:
            tokens = sum(stats["tokens"].values())
            how = ("in the store" if stats["cache_hit"] else
                   f"tokenised in {stats['prepare_seconds']:.1f} s ({tokens / max(stats['prepare_seconds'], 1e-9) / 1e3:.0f} k tokens/s)")
            console.print(f"Data for {need.trials} trial(s): {stats['source']}, {stats['tokenizer']}, "
                          f"{tokens:,} tokens {how}", highlight=False, markup=False)
            print_link("  token cache:", stats["cache_path"], PATH, console=console)
    return out
