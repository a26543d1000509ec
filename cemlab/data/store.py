"""The token store: a corpus tokenised once, in shards, and memory-mapped by every run that reads it.

A store entry is a folder keyed by corpus + selection (split seed and fractions, document and
character caps) + tokenizer + format, and *not* by a token budget: runs with different budgets
read prefixes of the same store. It holds

- ``train.bin``, ``val.bin``, ``test.bin``: the three token streams (each document followed by the
  end-of-text token), raw ``uint16``/``uint32``;
- ``index.bin``: one record per document in corpus order (split, tokens, characters), so that a
  run with a token budget on a streamed corpus takes exactly the prefix the old per-run
  tokenisation would have read (up to the document that fills its budget) without reading the
  streams;
- ``shards.bin``: one record per committed shard (documents, corpus position, tokens, documents
  and characters per split), appended like the streams, so a commit costs the same at shard 10
  and at shard 100 000;
- ``store.json``: the manifest, the only thing readers trust: how many shards are committed, the
  totals, how far into the corpus they reach (raw documents read, the selection's state), and
  whether the corpus (or its caps) is exhausted.

**Shards and commits.** The corpus is read in order and cut into shards of about ``shard_chars``
characters. Shards are tokenised in parallel (local processes, or Ray tasks on a cluster) and
committed in order: the shard's tokens are appended to the streams, flushed, and then the manifest
is replaced atomically (write to a temporary file, rename). A shard that was being written when
the process died lies beyond the manifest's counts: it is never read (readers map only the
manifest's prefix) and is cut off when the build resumes. Resuming skips the committed part of
the corpus without tokenising it (files and JSONL lines are skipped unread or unparsed; Hugging
Face streams use ``skip``); the shards that were in flight at the kill are tokenised again.
Builders of one entry serialise on the cache lock (:mod:`cemlab.data.cache`).

cemlab keeps this small format instead of Ray Data / ``datasets.map`` because trials need one
contiguous, memory-mappable stream per split with exact document-prefix cuts.

``tokenizers`` and Ray are imported where a tokenizer is loaded and where shards go to a Ray
cluster, so ``cemlab --help`` and ``cemlab plan``, which import this module, load neither.
"""

from __future__ import annotations

import collections
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from cemlab.data import cache
from cemlab.data.corpus import SPLITS, Corpus, Selector
from cemlab.data.errors import DataError
from cemlab.data.tokenizer import BPETokenizer, load_pretrained

#: Bumped when the layout or meaning of a store changes.
STORE_VERSION = 2
#: Characters per shard (about 2-4 M tokens; a few seconds of one core's tokenisation).
SHARD_CHARS = 4_000_000
#: Documents tokenised per ``encode_batch`` call inside a shard.
BATCH_DOCS = 512
#: Environment variable that forbids tokenising (set for trials after ``cemlab data prepare``).
READ_ONLY_ENV = "CEMLAB_DATA_READ_ONLY"
#: One ``index.bin`` record per document.
INDEX_DTYPE = np.dtype([("split", "u1"), ("tokens", "<u4"), ("chars", "<u4")])
SPLIT_ID = {s: i for i, s in enumerate(SPLITS)}
#: One ``shards.bin`` record per committed shard.
SHARD_FIELDS = ("docs", "raw_end", *(f"{k}_{s}" for k in ("tokens", "documents", "chars") for s in SPLITS))
SHARD_DTYPE = np.dtype([(f, "<i8") for f in SHARD_FIELDS])

Progress = Callable[[dict[str, Any]], None]


def read_only() -> bool:
    return os.environ.get(READ_ONLY_ENV, "") not in ("", "0")


# ---------------------------------------------------------------------------------------------
# Tokenising one shard (in this process, a worker process or a Ray task)
# ---------------------------------------------------------------------------------------------

_WORKER_TOKENIZERS: dict[tuple, Any] = {}


def load_tokenizer(spec: tuple):
    """A tokenizer from its picklable spec: ``("bpe", tokenizer.json, name)`` or
    ``("pretrained", name, vocab_size)``. Cached per process."""
    if spec not in _WORKER_TOKENIZERS:
        if spec[0] == "bpe":
            from tokenizers import Tokenizer

            _WORKER_TOKENIZERS[spec] = BPETokenizer(Tokenizer.from_file(spec[1]), spec[2], Path(spec[1]))
        else:
            _WORKER_TOKENIZERS[spec] = load_pretrained(spec[1], spec[2])
    return _WORKER_TOKENIZERS[spec]


def tokenizer_spec(tokenizer) -> tuple:
    path = getattr(tokenizer, "path", None)
    if path is not None:
        return ("bpe", str(path), tokenizer.name)
    return ("pretrained", tokenizer.name, tokenizer.vocab_size)


def tokenize_shard(tokenizer, docs: list[tuple[int, str]], dtype_name: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The token streams of one shard's ``(split id, text)`` documents, and their index records."""
    dtype = np.dtype(dtype_name)
    parts: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    index = np.zeros(len(docs), dtype=INDEX_DTYPE)
    eot = np.array([tokenizer.eot_id], dtype=dtype)
    for start in range(0, len(docs), BATCH_DOCS):
        chunk = docs[start:start + BATCH_DOCS]
        ids = tokenizer.encode_batch([text for _, text in chunk])
        for j, ((split_id, text), doc_ids) in enumerate(zip(chunk, ids)):
            arr = np.asarray(doc_ids, dtype=np.int64)
            if arr.size and int(arr.max()) >= tokenizer.vocab_size:
                raise DataError(f"data.tokenizer={tokenizer.name!r} produced id {int(arr.max())} >= its vocab_size")
            split = SPLITS[split_id]
            parts[split].append(arr.astype(dtype))
            parts[split].append(eot)
            index[start + j] = (split_id, arr.size + 1, len(text))
    streams = {s: (np.concatenate(p) if p else np.zeros(0, dtype=dtype)) for s, p in parts.items()}
    return streams, index


def _pool_init() -> None:
    # one single-threaded tokenizer per process: the parallelism is the processes'
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("RAYON_NUM_THREADS", "1")


def _pool_task(spec: tuple, docs: list[tuple[int, str]], dtype_name: str):
    return tokenize_shard(load_tokenizer(spec), docs, dtype_name)


class _Executor:
    """Runs shard tasks in order with a bounded number in flight: inline (``workers=0``), in a pool
    of ``workers`` local processes, or as Ray tasks on the cluster at ``$RAY_ADDRESS``."""

    def __init__(self, workers: int, use_ray: bool, spec: tuple, dtype_name: str, tokenizer):
        self.spec, self.dtype_name, self.tokenizer = spec, dtype_name, tokenizer
        self.pool = None
        self.ray_task = None
        self.kind = "inline"
        if use_ray:
            import ray

            if not ray.is_initialized():
                ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
            self.ray_task = ray.remote(num_cpus=1, runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})(_pool_task)
            self.in_flight = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
            self.kind = f"ray ({int(ray.cluster_resources().get('CPU', 1))} CPUs)"
        elif workers >= 1:
            self.pool = mp.get_context("spawn").Pool(workers, initializer=_pool_init)
            self.in_flight = 2 * workers
            self.kind = f"{workers} process(es)"
        else:
            self.in_flight = 1

    def map(self, jobs: Iterator[Any], docs_of: Callable[[Any], list], stop: Callable[[], bool]) -> Iterator[tuple[Any, Any]]:
        """``(job, result)`` in job order; no new job is submitted once ``stop()`` is true."""
        pending: collections.deque = collections.deque()
        jobs = iter(jobs)
        exhausted = False
        while True:
            while not exhausted and len(pending) < self.in_flight and not stop():
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                pending.append((job, self._submit(docs_of(job))))
            if not pending:
                return
            job, handle = pending.popleft()
            yield job, self._result(handle)

    def _submit(self, docs):
        if self.ray_task is not None:
            return self.ray_task.remote(self.spec, docs, self.dtype_name)
        if self.pool is not None:
            return self.pool.apply_async(_pool_task, (self.spec, docs, self.dtype_name))
        return tokenize_shard(self.tokenizer, docs, self.dtype_name)

    def _result(self, handle):
        if self.ray_task is not None:
            import ray

            return ray.get(handle)
        if self.pool is not None:
            return handle.get()
        return handle

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


# ---------------------------------------------------------------------------------------------
# The entry: manifest, commits, prefixes
# ---------------------------------------------------------------------------------------------


def read_manifest(entry: Path) -> dict[str, Any] | None:
    """The manifest of a sound entry (every stream at least as long as it says), else None."""
    try:
        m = json.loads((entry / "store.json").read_text())
        if m.get("version") != STORE_VERSION:
            return None
        itemsize = np.dtype(m["dtype"]).itemsize
        for s in SPLITS:
            if (entry / f"{s}.bin").stat().st_size < m["totals"]["tokens"][s] * itemsize:
                return None
        if (entry / "index.bin").stat().st_size < m["totals"]["docs"] * INDEX_DTYPE.itemsize:
            return None
        if (entry / "shards.bin").stat().st_size < m["shards"] * SHARD_DTYPE.itemsize:
            return None
        return m
    except (OSError, ValueError, KeyError, TypeError):
        return None


def covers(m: dict[str, Any] | None, target: int | None) -> bool:
    """True when the store holds what a run needs: everything (``target`` None) or ``target``
    training tokens (or all the corpus has)."""
    if m is None:
        return False
    return m["exhausted"] or (target is not None and m["totals"]["tokens"]["train"] >= target)


@dataclass
class Prefix:
    arrays: dict[str, np.ndarray]
    documents: dict[str, int]
    tokens: dict[str, int]
    chars: dict[str, int]
    stopped_early: bool


def open_prefix(entry: Path, m: dict[str, Any], target: int | None) -> Prefix:
    """Memory-map what a run reads: all of it, or the documents up to the one that brings the
    training split to ``target`` tokens (and the validation / test documents read before it)."""
    totals = m["totals"]
    counts = {k: dict(totals[k]) for k in ("documents", "tokens", "chars")}
    stopped = False
    if target is not None and totals["tokens"]["train"] >= target:
        stopped = True
        before = {k: dict.fromkeys(SPLITS, 0) for k in ("documents", "tokens", "chars")}
        shards = np.fromfile(entry / "shards.bin", dtype=SHARD_DTYPE, count=m["shards"])
        k = int(np.argmax(np.cumsum(shards["tokens_train"]) >= target))  # the shard that fills the budget
        for key in before:
            for s in SPLITS:
                before[key][s] = int(shards[f"{key}_{s}"][:k].sum())
        doc0 = int(shards["docs"][:k].sum())
        index = np.memmap(entry / "index.bin", dtype=INDEX_DTYPE, mode="r", shape=(totals["docs"],))
        rows = np.array(index[doc0:doc0 + int(shards["docs"][k])])
        is_train = rows["split"] == SPLIT_ID["train"]
        cum = before["tokens"]["train"] + np.cumsum(np.where(is_train, rows["tokens"], 0).astype(np.int64))
        last = int(np.argmax(cum >= target))  # the document that fills the budget
        rows = rows[: last + 1]
        for s in SPLITS:
            mine = rows["split"] == SPLIT_ID[s]
            counts["documents"][s] = before["documents"][s] + int(mine.sum())
            counts["tokens"][s] = before["tokens"][s] + int(rows["tokens"][mine].astype(np.int64).sum())
            counts["chars"][s] = before["chars"][s] + int(rows["chars"][mine].astype(np.int64).sum())
    dtype = np.dtype(m["dtype"])
    arrays = {}
    for s in SPLITS:
        n = counts["tokens"][s]
        if n == 0:
            a = np.zeros(0, dtype=dtype)
            a.flags.writeable = False
        else:
            a = np.memmap(entry / f"{s}.bin", dtype=dtype, mode="r", shape=(n,))
        arrays[s] = a
    return Prefix(arrays, counts["documents"], counts["tokens"], counts["chars"], stopped)


def _empty_manifest(dtype: np.dtype, tokenizer, corpus: Corpus, shard_chars: int) -> dict[str, Any]:
    zero = dict.fromkeys(SPLITS, 0)
    return {"version": STORE_VERSION, "dtype": dtype.name, "eot_id": tokenizer.eot_id, "tokenizer": tokenizer.name,
            "source": corpus.describe(), "shard_chars": shard_chars, "shards": 0, "raw_read": 0,
            "selection": {"used": dict(zero), "n_docs": 0}, "exhausted": False, "seconds": 0.0,
            "totals": {"docs": 0, "documents": dict(zero), "tokens": dict(zero), "chars": dict(zero)}}


def _discard(entry: Path) -> None:
    """Move a damaged entry out of the way (readers that have its files mapped keep them)."""
    if entry.exists():
        aside = entry.with_name(f"{entry.name}.tmp-damaged-{uuid.uuid4().hex[:8]}")
        os.rename(entry, aside)
        shutil.rmtree(aside, ignore_errors=True)


def build(
    entry: Path, corpus: Corpus, selector_args: dict[str, Any], tokenizer, target: int | None, *,
    dtype: np.dtype, workers: int = 0, use_ray: bool = False, shard_chars: int = SHARD_CHARS,
    progress: Progress | None = None, total_chars: int | None = None,
) -> dict[str, Any]:
    """Tokenise the corpus into ``entry`` until the store covers ``target`` (see :func:`covers`),
    resuming what is committed there. Call it holding the entry's cache lock. Returns the manifest."""
    m = _open_entry(entry, dtype, tokenizer, corpus, shard_chars)
    if covers(m, target):
        return m
    _cut_to_manifest(entry, m)
    selector = Selector(**selector_args, used=m["selection"]["used"], n_docs=m["selection"]["n_docs"])
    reader = _ShardReader(corpus, selector, m["raw_read"], m["shard_chars"])  # a resumed store keeps its cut

    t0 = time.perf_counter()
    seconds_before = m["seconds"]
    new_tokens = new_chars = 0
    start_chars = sum(m["totals"]["chars"].values())
    executor = _Executor(workers, use_ray, tokenizer_spec(tokenizer), m["dtype"], tokenizer)
    files = {s: open(entry / f"{s}.bin", "ab") for s in SPLITS}
    files["index"] = open(entry / "index.bin", "ab")
    files["shards"] = open(entry / "shards.bin", "ab")
    try:
        for job, (streams, index) in executor.map(reader.shards(), lambda j: j["docs"], stop=lambda: covers(m, target)):
            if covers(m, target):
                break  # shards in flight past the budget are not committed
            shard = _shard_counts(streams, index, job["raw_end"])
            _append_shard(files, streams, index, shard)
            _add_shard(m, shard, job["selection"])
            new_tokens += sum(shard["tokens"].values())
            new_chars += sum(shard["chars"].values())
            m["seconds"] = round(seconds_before + time.perf_counter() - t0, 3)
            cache.write_json_atomic(entry / "store.json", m)  # the commit
            if progress is not None:
                _report(progress, m, target, new_tokens, new_chars, start_chars, total_chars, t0, executor.kind)
        if reader.ended and not covers(m, target):
            m["exhausted"] = True
            cache.write_json_atomic(entry / "store.json", m)
    finally:
        for fh in files.values():
            fh.close()
        executor.close()
    return m


def _open_entry(entry: Path, dtype: np.dtype, tokenizer, corpus: Corpus, shard_chars: int) -> dict[str, Any]:
    """The entry's manifest; a missing or damaged entry is started afresh, empty."""
    m = read_manifest(entry)
    if m is None:
        _discard(entry)
        entry.mkdir(parents=True)
        m = _empty_manifest(dtype, tokenizer, corpus, shard_chars)
        for name in (*(f"{s}.bin" for s in SPLITS), "index.bin", "shards.bin"):
            (entry / name).write_bytes(b"")
        cache.write_json_atomic(entry / "store.json", m)
    return m


def _cut_to_manifest(entry: Path, m: dict[str, Any]) -> None:
    """Cut off a shard that was being appended at a kill: the files end where the manifest says."""
    itemsize = np.dtype(m["dtype"]).itemsize
    for s in SPLITS:
        os.truncate(entry / f"{s}.bin", m["totals"]["tokens"][s] * itemsize)
    os.truncate(entry / "index.bin", m["totals"]["docs"] * INDEX_DTYPE.itemsize)
    os.truncate(entry / "shards.bin", m["shards"] * SHARD_DTYPE.itemsize)


class _ShardReader:
    """Reads the corpus from raw document ``raw`` on, through the selector, in shards of about
    ``shard_chars`` characters; ``ended`` once the corpus (or the selection) has no more."""

    def __init__(self, corpus: Corpus, selector: Selector, raw: int, shard_chars: int):
        self.corpus, self.selector, self.raw, self.shard_chars = corpus, selector, raw, shard_chars
        self.ended = False

    def shards(self) -> Iterator[dict[str, Any]]:
        docs: list[tuple[int, str]] = []
        chars = 0
        for doc in self.corpus.documents_from(self.raw):
            kept = self.selector.offer(doc)
            if self.selector.done:
                break
            self.raw += 1
            if kept is not None:
                docs.append((SPLIT_ID[kept[0]], kept[1].text))
                chars += len(kept[1].text)
                if chars >= self.shard_chars:
                    yield {"docs": docs, "raw_end": self.raw, "selection": self.selector.state(), "chars": chars}
                    docs, chars = [], 0
        if docs:
            yield {"docs": docs, "raw_end": self.raw, "selection": self.selector.state(), "chars": chars}
        self.ended = True


def _shard_counts(streams: dict[str, np.ndarray], index: np.ndarray, raw_end: int) -> dict[str, Any]:
    """A tokenised shard's documents, corpus position, and documents, tokens, characters per split."""
    shard = {"docs": len(index), "raw_end": raw_end, "documents": {}, "tokens": {}, "chars": {}}
    for s in SPLITS:
        mine = index["split"] == SPLIT_ID[s]
        shard["documents"][s] = int(mine.sum())
        shard["tokens"][s] = int(len(streams[s]))
        shard["chars"][s] = int(index["chars"][mine].astype(np.int64).sum())
    return shard


def _append_shard(files: dict[str, Any], streams: dict[str, np.ndarray], index: np.ndarray,
                  shard: dict[str, Any]) -> None:
    """Append a shard's streams, document index and shard record, and flush them to disk."""
    for s in SPLITS:
        files[s].write(streams[s].tobytes())
    files["index"].write(index.tobytes())
    record = np.zeros(1, dtype=SHARD_DTYPE)
    record["docs"], record["raw_end"] = shard["docs"], shard["raw_end"]
    for k in ("tokens", "documents", "chars"):
        for s in SPLITS:
            record[f"{k}_{s}"] = shard[k][s]
    files["shards"].write(record.tobytes())
    for fh in files.values():
        fh.flush()
        os.fsync(fh.fileno())


def _add_shard(m: dict[str, Any], shard: dict[str, Any], selection: dict[str, Any]) -> None:
    """Count an appended shard in the manifest (committed when the manifest is written)."""
    m["shards"] += 1
    m["raw_read"] = shard["raw_end"]
    m["selection"] = selection
    tot = m["totals"]
    tot["docs"] += shard["docs"]
    for k in ("documents", "tokens", "chars"):
        for s in SPLITS:
            tot[k][s] += shard[k][s]


def _report(progress: Progress, m: dict[str, Any], target: int | None, new_tokens: int, new_chars: int,
            start_chars: int, total_chars: int | None, t0: float, kind: str) -> None:
    elapsed = max(time.perf_counter() - t0, 1e-9)
    fraction = None
    if target is not None:
        fraction = min(1.0, m["totals"]["tokens"]["train"] / target)
    elif total_chars:
        fraction = min(0.999, (start_chars + new_chars) / total_chars)
    eta = None
    if fraction is not None and new_chars:
        done_before = start_chars / total_chars if (target is None and total_chars) else 0.0
        rate = (fraction - done_before) / elapsed
        eta = (1 - fraction) / rate if rate > 0 else None
    progress({"shards": m["shards"], "tokens": sum(m["totals"]["tokens"].values()), "new_tokens": new_tokens,
              "tokens_per_s": new_tokens / elapsed, "fraction": fraction, "eta_s": eta, "elapsed_s": elapsed,
              "workers": kind})


def print_progress(prefix: str = "data") -> Progress:
    """A progress callback that prints one line per ~2 s: tokens, tokens/s, share done, ETA."""
    last = [0.0]

    def show(p: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - last[0] < 2.0 and not (p["fraction"] or 0) >= 0.999:
            return
        last[0] = now
        done = f"{100 * p['fraction']:.0f}%" if p["fraction"] is not None else "?"
        eta = f", ETA {_hms(p['eta_s'])}" if p["eta_s"] is not None else ""
        print(f"{prefix}: {p['shards']} shard(s), {p['tokens'] / 1e6:.2f} M tokens, "
              f"{p['tokens_per_s'] / 1e3:.1f} k tokens/s on {p['workers']}, {done}{eta}", file=sys.stderr, flush=True)

    return show


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
