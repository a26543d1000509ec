"""``prepare_data``: corpus -> split by document -> tokenizer -> packed token streams on disk.

Each split becomes one token stream: every document of the split, in corpus order, followed by
the end-of-text token (paper: documents concatenated and cut into fixed-length sequences, no
padding; :class:`~cemlab.data.dataset.PackedDataset` does the cutting). The streams are written
once per (corpus, split settings, tokenizer, packing format) into the cache as raw ``uint16``
(vocabularies up to 65536 tokens) or ``uint32`` arrays and memory-mapped read-only afterwards, so
a second run of the same data starts in well under a second (``stats["cache_hit"]``).

Local corpora are tokenised whole (within ``max_documents`` / ``max_chars``); the trainer cycles
through the training stream as often as its token budget asks. A streamed Hugging Face corpus has
no end, so it is read until the training split holds ``min_train_tokens`` tokens (or the
``hf_max_documents`` / ``max_chars`` caps, or its end), and that target is part of the cache key.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from cemlab import paths
from cemlab.data import cache
from cemlab.data.config import HF_DEFAULT_BPE_CHARS, DataConfig
from cemlab.data.corpus import SPLITS, Corpus, Document, effective_max_chars, open_corpus, select, take_chars
from cemlab.data.errors import DataError
from cemlab.data.tokenizer import BPE_MIN_FREQUENCY, BPE_VERSION, TextTokenizer, cached_bpe, load_pretrained

#: Bumped when the layout or meaning of the cached streams changes.
FORMAT_VERSION = 1
#: Documents / characters tokenised per batch.
BATCH_DOCS, BATCH_CHARS = 512, 4_000_000


@dataclass
class DataBundle:
    """What ``prepare_data`` returns: read-only 1-D token streams, the tokenizer and statistics."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    tokenizer: TextTokenizer
    stats: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def split(self, name: str) -> np.ndarray:
        return {"train": self.train, "val": self.val, "test": self.test}[name]


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits (``vocab_size <= 65536``), else ``uint32``."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def prepare_data(
    data_cfg: DataConfig, vocab_size: int, seq_len: int, min_train_tokens: int | None = None
) -> DataBundle:
    """Tokenised, packed train / validation / test streams of ``data_cfg``'s corpus.

    ``vocab_size`` is ``model.vocab_size`` (the BPE is trained to it; a pretrained tokenizer must fit
    in it), ``seq_len`` the packed sequence length (every split must hold one sequence of it),
    ``min_train_tokens`` how many training tokens to stream from a Hugging Face corpus.
    Bad input raises :class:`DataError` naming the field, before any training."""
    t0 = time.perf_counter()
    if seq_len < 1:
        raise DataError(f"data.seq_len={seq_len} must be >= 1 (tokens per packed sequence)")
    corpus = open_corpus(data_cfg)
    hf = data_cfg.source == "hf"
    max_docs = data_cfg.hf_max_documents if hf else data_cfg.max_documents
    max_chars = effective_max_chars(data_cfg)
    if hf and min_train_tokens is None and max_docs is None and max_chars is None:
        raise DataError(
            "data.source='hf' streams a corpus without end: set data.hf_max_documents or data.max_chars, "
            "or give a token budget (min_train_tokens, from train.tokens)"
        )
    root = (Path(data_cfg.cache_dir).expanduser().resolve() if data_cfg.cache_dir else paths.cache_dir()) / "data"
    selection = {
        "corpus": corpus.fingerprint(),
        "max_documents": max_docs,
        "max_chars": max_chars,
        "split": [data_cfg.split_seed, data_cfg.val_fraction, data_cfg.test_fraction],
    }

    def documents() -> Iterator[tuple[str, Document]]:
        return select(corpus.documents(), data_cfg.split_seed, data_cfg.val_fraction, data_cfg.test_fraction,
                      max_docs, max_chars)

    tok_hit: bool | None = None
    if data_cfg.tokenizer == "bpe":
        bpe_chars = data_cfg.bpe_max_chars or (HF_DEFAULT_BPE_CHARS if hf else None)
        tok_key = f"bpe{vocab_size}-" + cache.stable_key(
            {**selection, "vocab_size": vocab_size, "bpe_max_chars": bpe_chars,
             "min_frequency": BPE_MIN_FREQUENCY, "version": BPE_VERSION})

        def train_texts() -> list[str]:
            texts = take_chars((doc.text for split, doc in documents() if split == "train"), bpe_chars)
            if not texts:
                _raise_empty(data_cfg, corpus, sum(1 for _ in documents()))
            return texts

        tokenizer, tok_hit, _ = cached_bpe(root / "tokenizers", tok_key, vocab_size, train_texts)
    else:
        tokenizer = load_pretrained(data_cfg.tokenizer, vocab_size)

    data_key = f"{corpus.kind}-{tokenizer.name.replace('/', '_')[-40:]}-" + cache.stable_key(
        {**selection, "tokenizer": tokenizer.fingerprint(), "eot_id": tokenizer.eot_id,
         "min_train_tokens": min_train_tokens if hf else None, "format": FORMAT_VERSION})
    entry, meta, hit = _cached_streams(
        root / "tokens", data_key,
        lambda build: _write_streams(build, tokenizer, documents(), min_train_tokens if hf else None, data_cfg, corpus))
    dtype = np.dtype(meta["dtype"])
    arrays = {s: _open_stream(entry / f"{s}.bin", dtype, meta["tokens"][s]) for s in SPLITS}
    stats = {
        "source": corpus.describe(),
        "documents": dict(meta["documents"]),
        "tokens": dict(meta["tokens"]),
        "chars": dict(meta["chars"]),
        "cache_hit": hit,
        "tokenizer_cache_hit": tok_hit,
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "dtype": dtype.name,
        "stream_stopped_early": meta["stopped_early"],
        "cache_path": str(entry),
        "build_seconds": meta["seconds"],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if min_train_tokens:  # how often a run with this budget goes through the training stream
        stats["min_train_tokens"] = min_train_tokens
        stats["train_repeats"] = round(min_train_tokens / max(1, stats["tokens"]["train"]), 3)
    _check_sizes(stats, seq_len, data_cfg)
    return DataBundle(arrays["train"], arrays["val"], arrays["test"], tokenizer, stats, entry)


def _raise_empty(cfg: DataConfig, corpus: Corpus, n_docs: int) -> None:
    where = "data.hf_dataset" if cfg.source == "hf" else "data.path"
    if n_docs == 0:
        raise DataError(
            f"{where}: the corpus {corpus.describe()} holds no text (empty files or records); "
            f"point {where} at a corpus with text"
        )
    raise DataError(
        f"data.val_fraction / data.test_fraction: none of the corpus's {n_docs} document(s) landed in the "
        f"training split; add documents ({where}, data.max_documents, data.max_chars) or change data.split_seed"
    )


def _open_stream(path: Path, dtype: np.dtype, n: int) -> np.ndarray:
    if n == 0:
        a = np.zeros(0, dtype=dtype)
        a.flags.writeable = False
        return a
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


def _entry_ok(entry: Path) -> dict[str, Any] | None:
    """The meta of a complete cache entry, or None when there is none (or it is damaged)."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        itemsize = np.dtype(meta["dtype"]).itemsize
        if all((entry / f"{s}.bin").stat().st_size == meta["tokens"][s] * itemsize for s in SPLITS):
            return meta
    except (OSError, ValueError, KeyError):
        pass
    return None


def _cached_streams(root: Path, key: str, build: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any], bool]:
    """(entry folder, meta, cache hit) of the token streams ``key``; ``build(folder)`` writes them
    on a miss, under the lock, into a temporary folder that is then renamed into place."""
    entry = root / key
    meta = _entry_ok(entry)
    if meta is not None:
        return entry, meta, True
    with cache.locked(root, key):
        meta = _entry_ok(entry)  # another process may have built it while we waited
        if meta is not None:
            return entry, meta, True
        folder = cache.new_build_dir(root, key)
        meta = build(folder)
        cache.publish(folder, entry)
    return entry, meta, False


def _write_streams(
    build: Path, tokenizer: TextTokenizer, docs: Iterator[tuple[str, Document]], min_train_tokens: int | None,
    cfg: DataConfig, corpus: Corpus,
) -> dict[str, Any]:
    """Tokenise documents into ``<split>.bin`` streams (each document followed by end-of-text)."""
    t0 = time.perf_counter()
    dtype = token_dtype(tokenizer.vocab_size)
    counts = {k: dict.fromkeys(SPLITS, 0) for k in ("documents", "tokens", "chars")}
    files = {s: open(build / f"{s}.bin", "wb") for s in SPLITS}
    eot = np.array([tokenizer.eot_id], dtype=dtype)
    stopped_early = False

    def flush(batch: list[tuple[str, Document]]) -> bool:
        """Write a batch; True once the training split holds ``min_train_tokens``."""
        ids = tokenizer.encode_batch([doc.text for _, doc in batch])
        for (split, doc), doc_ids in zip(batch, ids):
            arr = np.asarray(doc_ids, dtype=np.int64)
            if arr.size and int(arr.max()) >= tokenizer.vocab_size:
                raise DataError(f"data.tokenizer={tokenizer.name!r} produced id {int(arr.max())} >= its vocab_size")
            files[split].write(arr.astype(dtype).tobytes())
            files[split].write(eot.tobytes())
            counts["documents"][split] += 1
            counts["tokens"][split] += arr.size + 1
            counts["chars"][split] += len(doc.text)
            if min_train_tokens is not None and counts["tokens"]["train"] >= min_train_tokens:
                return True
        return False

    try:
        batch: list[tuple[str, Document]] = []
        batch_chars = 0
        for split, doc in docs:
            batch.append((split, doc))
            batch_chars += len(doc.text)
            if len(batch) >= BATCH_DOCS or batch_chars >= BATCH_CHARS:
                if flush(batch):
                    stopped_early = True
                    break
                batch, batch_chars = [], 0
        else:
            if batch:
                stopped_early = flush(batch)
    finally:
        for fh in files.values():
            fh.close()
    if sum(counts["documents"].values()) == 0:
        _raise_empty(cfg, corpus, 0)
    meta = {**counts, "dtype": dtype.name, "eot_id": tokenizer.eot_id, "tokenizer": tokenizer.name,
            "source": corpus.describe(), "min_train_tokens": min_train_tokens, "stopped_early": stopped_early,
            "format": FORMAT_VERSION, "seconds": round(time.perf_counter() - t0, 3)}
    cache.write_json_atomic(build / "meta.json", meta)
    return meta


def _check_sizes(stats: dict[str, Any], seq_len: int, cfg: DataConfig) -> None:
    """Every split must hold at least one packed sequence (``seq_len`` inputs + 1 target)."""
    fix = {"train": "give more text (data.max_chars, data.max_documents, data.path)",
           "val": "raise data.val_fraction or give more documents",
           "test": "raise data.test_fraction or give more documents"}
    n_docs = sum(stats["documents"].values())
    for s in ("val", "test"):
        if stats["documents"][s] == 0:
            raise DataError(
                f"data.{s}_fraction={getattr(cfg, s + '_fraction')}: no document of the {n_docs} landed in the "
                f"{s} split (documents are split whole); raise data.{s}_fraction, add documents, or change "
                f"data.split_seed"
            )
    for s in SPLITS:
        n = stats["tokens"][s]
        if n < seq_len + 1:
            raise DataError(
                f"data.seq_len={seq_len}: the {s} split has {n} tokens in {stats['documents'][s]} document(s), "
                f"fewer than the {seq_len + 1} one sequence needs; lower data.seq_len (or model.context_length), "
                f"or {fix[s]}"
            )
