"""``prepare_data``: corpus -> split by document -> tokenizer -> packed token streams on disk.

Each split becomes one token stream: every document of the split, in corpus order, followed by
the end-of-text token (paper: documents concatenated and cut into fixed-length sequences, no
padding; :class:`~cemlab.data.dataset.PackedDataset` does the cutting). The streams are written
once per (corpus, split settings, tokenizer, packing format) into the token store
(:mod:`cemlab.data.store`) as raw ``uint16`` (vocabularies up to 65536 tokens) or ``uint32``
arrays and memory-mapped read-only afterwards, so a second run of the same data starts in well
under a second (``stats["cache_hit"]``). ``cemlab data prepare`` fills the store for a whole sweep
before its trials start, in parallel; a run that finds its data missing tokenises it inline.

Local corpora are tokenised whole (within ``max_documents`` / ``max_chars``); the trainer cycles
through the training stream as often as its token budget asks. A streamed Hugging Face corpus has
no end, so it is read until the training split holds ``min_train_tokens`` tokens (or the
``hf_max_documents`` / ``max_chars`` caps, or its end). The budget is not part of the store's key:
a run maps the prefix up to the document that fills its budget, and a larger budget extends the
same store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from cemlab import paths
from cemlab.data import cache, store
from cemlab.data.config import HF_DEFAULT_BPE_CHARS, DataConfig
from cemlab.data.corpus import SPLITS, Corpus, Document, effective_max_chars, open_corpus, select, take_chars
from cemlab.data.errors import DataError
from cemlab.data.tokenizer import BPE_MIN_FREQUENCY, BPE_VERSION, TextTokenizer, cached_bpe, load_pretrained



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
    data_cfg: DataConfig, vocab_size: int, seq_len: int, min_train_tokens: int | None = None, *,
    workers: int = 0, use_ray: bool = False, progress: store.Progress | None = None,
    shard_chars: int = store.SHARD_CHARS,
) -> DataBundle:
    """Tokenised, packed train / validation / test streams of ``data_cfg``'s corpus.

    ``vocab_size`` is ``model.vocab_size`` (the BPE is trained to it; a pretrained tokenizer must fit
    in it), ``seq_len`` the packed sequence length (every split must hold one sequence of it),
    ``min_train_tokens`` how many training tokens to stream from a Hugging Face corpus.
    The streams live in the token store (:mod:`cemlab.data.store`); when it lacks them they are
    tokenised here, inline (``workers=0``), in ``workers`` processes, or as Ray tasks (``use_ray``).
    Bad input raises :class:`DataError` naming the field, before any training."""
    t0 = time.perf_counter()
    if seq_len < 1:
        raise DataError(f"data.seq_len={seq_len} must be >= 1 (tokens per packed sequence)")
    sel = _selection(data_cfg, min_train_tokens)
    tokenizer, tok_hit = _tokenizer(sel, vocab_size)
    target = min_train_tokens if sel.hf else None
    entry, manifest, hit = _token_streams(sel, tokenizer, target, workers=workers, use_ray=use_ray,
                                          shard_chars=shard_chars, progress=progress)
    if manifest["totals"]["docs"] == 0:
        _raise_empty(data_cfg, sel.corpus, 0)
    prefix = store.open_prefix(entry, manifest, target)
    stats = {
        "source": sel.corpus.describe(),
        "documents": dict(prefix.documents),
        "tokens": dict(prefix.tokens),
        "chars": dict(prefix.chars),
        "cache_hit": hit,
        "tokenizer_cache_hit": tok_hit,
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "dtype": np.dtype(manifest["dtype"]).name,
        "stream_stopped_early": prefix.stopped_early,
        "cache_path": str(entry),
        "build_seconds": manifest["seconds"],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if min_train_tokens:  # how often a run with this budget goes through the training stream
        stats["min_train_tokens"] = min_train_tokens
        stats["train_repeats"] = round(min_train_tokens / max(1, stats["tokens"]["train"]), 3)
    _check_sizes(stats, seq_len, data_cfg)
    arrays = prefix.arrays
    return DataBundle(arrays["train"], arrays["val"], arrays["test"], tokenizer, stats, entry)


@dataclass
class _Selection:
    """The documents a run reads (corpus, caps, split) and the cache folder of its tokenizer and streams."""

    cfg: DataConfig
    corpus: Corpus
    max_docs: int | None
    max_chars: int | None
    root: Path
    key: dict[str, Any]   # identifies the selection in the cache keys of the tokenizer and the streams

    @property
    def hf(self) -> bool:
        return self.cfg.source == "hf"

    def documents(self) -> Iterator[tuple[str, Document]]:
        return select(self.corpus.documents(), self.cfg.split_seed, self.cfg.val_fraction, self.cfg.test_fraction,
                      self.max_docs, self.max_chars)


def _selection(data_cfg: DataConfig, min_train_tokens: int | None) -> _Selection:
    """Open the corpus and its caps; a Hugging Face stream needs a cap or a token budget."""
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
    key = {
        "corpus": corpus.fingerprint(),
        "max_documents": max_docs,
        "max_chars": max_chars,
        "split": [data_cfg.split_seed, data_cfg.val_fraction, data_cfg.test_fraction],
    }
    return _Selection(data_cfg, corpus, max_docs, max_chars, root, key)


def _tokenizer(sel: _Selection, vocab_size: int) -> tuple[TextTokenizer, bool | None]:
    """The run's tokenizer and whether it came from the cache (None for a pretrained one): a BPE
    trained on the training split (once per selection and vocabulary), or a pretrained one."""
    cfg = sel.cfg
    if cfg.tokenizer != "bpe":
        return load_pretrained(cfg.tokenizer, vocab_size), None
    bpe_chars = cfg.bpe_max_chars or (HF_DEFAULT_BPE_CHARS if sel.hf else None)
    tok_key = f"bpe{vocab_size}-" + cache.stable_key(
        {**sel.key, "vocab_size": vocab_size, "bpe_max_chars": bpe_chars,
         "min_frequency": BPE_MIN_FREQUENCY, "version": BPE_VERSION})

    def train_texts() -> list[str]:
        texts = take_chars((doc.text for split, doc in sel.documents() if split == "train"), bpe_chars)
        if not texts:
            _raise_empty(cfg, sel.corpus, sum(1 for _ in sel.documents()))
        return texts

    if store.read_only() and not (sel.root / "tokenizers" / tok_key / "tokenizer.json").is_file():
        raise DataError(f"the BPE tokenizer {tok_key} is not prepared and {store.READ_ONLY_ENV} forbids training it "
                        f"here; run `cemlab data prepare` for the sweep first (or unset {store.READ_ONLY_ENV})")
    tokenizer, tok_hit, _ = cached_bpe(sel.root / "tokenizers", tok_key, vocab_size, train_texts)
    return tokenizer, tok_hit


def _token_streams(
    sel: _Selection, tokenizer: TextTokenizer, target: int | None, *, workers: int, use_ray: bool,
    shard_chars: int, progress: store.Progress | None,
) -> tuple[Path, dict[str, Any], bool]:
    """The token store's entry of this selection and tokenizer, built (under its lock) when it does
    not cover ``target`` training tokens yet: ``(entry folder, manifest, cache hit)``."""
    data_key = f"{sel.corpus.kind}-{tokenizer.name.replace('/', '_')[-40:]}-" + cache.stable_key(
        {**sel.key, "tokenizer": tokenizer.fingerprint(), "eot_id": tokenizer.eot_id, "format": store.STORE_VERSION})
    tokens_root = sel.root / "tokens"
    entry = tokens_root / data_key
    manifest = store.read_manifest(entry)
    hit = store.covers(manifest, target)
    if hit:
        return entry, manifest, hit
    if store.read_only():
        raise DataError(
            f"the token store {entry} does not hold this run's data, and {store.READ_ONLY_ENV} forbids "
            f"tokenising here; run `cemlab data prepare` for the sweep first (or unset {store.READ_ONLY_ENV})")
    with cache.locked(tokens_root, data_key):
        manifest = store.read_manifest(entry)  # another process may have built it while we waited
        hit = store.covers(manifest, target)
        if not hit:
            cfg = sel.cfg
            manifest = store.build(
                entry, sel.corpus, dict(seed=cfg.split_seed, val_fraction=cfg.val_fraction,
                                        test_fraction=cfg.test_fraction, max_documents=sel.max_docs,
                                        max_chars=sel.max_chars),
                tokenizer, target, dtype=token_dtype(tokenizer.vocab_size), workers=workers, use_ray=use_ray,
                shard_chars=shard_chars, progress=progress, total_chars=sel.max_chars or _corpus_bytes(sel.corpus))
    return entry, manifest, hit


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


def _corpus_bytes(corpus: Corpus) -> int | None:
    """The corpus's size in bytes from its fingerprint (an estimate of its characters, for the ETA)."""
    fp = corpus.fingerprint()
    entries = fp.get("files") or ([fp["stat"]] if "stat" in fp else [])
    return sum(int(e[1]) for e in entries) or None


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
