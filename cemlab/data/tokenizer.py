"""Tokenizers: a byte-level BPE trained on the corpus (cached on disk), or a pretrained one.

Both are wrapped in :class:`TextTokenizer`, the small interface the pipeline and the trainer use:
``encode``, ``decode``, ``encode_batch``, ``eot_id`` (the end-of-text token that separates packed
documents), ``vocab_size`` and a content ``fingerprint`` that keys the token cache. Text that
happens to contain the end-of-text marker is encoded as ordinary text, so only the packer puts
end-of-text tokens into a stream.

``tokenizers`` and ``transformers`` are imported inside the functions that train or load a
tokenizer, so ``cemlab --help`` and ``cemlab plan``, which import this module, load neither.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable, Iterable

from cemlab.data import cache
from cemlab.data.errors import DataError

#: End-of-text special token of the trained BPE (id 0).
EOT_TOKEN = "<|endoftext|>"
#: A merge must be seen at least this often in the training text.
BPE_MIN_FREQUENCY = 2
#: The smallest byte-level BPE: 256 byte tokens plus end-of-text.
BPE_MIN_VOCAB = 257
#: Bumped when the BPE recipe changes, so that old cached tokenizers are not reused.
BPE_VERSION = 1


class TextTokenizer:
    """The tokenizer interface of cemlab: ``encode(str) -> list[int]``, ``decode``, ``eot_id``,
    ``vocab_size`` (ids are ``< vocab_size``) and ``name``."""

    name: str
    eot_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A hash of everything that decides the token ids (keys the token cache)."""
        raise NotImplementedError


class BPETokenizer(TextTokenizer):
    """A ``tokenizers`` byte-level BPE with ``<|endoftext|>`` as id 0."""

    def __init__(self, tok, name: str, path: Path | None = None):
        self.tok = tok
        self.tok.encode_special_tokens = True  # a literal "<|endoftext|>" in a document stays text
        self.name = name
        self.path = path
        self.eot_id = tok.token_to_id(EOT_TOKEN)
        self.vocab_size = tok.get_vocab_size()

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.tok.to_str().encode()).hexdigest()[:16]


class PretrainedTokenizer(TextTokenizer):
    """A ``transformers.AutoTokenizer`` (e.g. the Llama tokenizer); its EOS token ends documents.
    No BOS or other special tokens are added (``add_special_tokens=False``)."""

    def __init__(self, tok, name: str):
        self.tok = tok
        self.name = name
        if tok.eos_token_id is None:
            raise DataError(
                f"data.tokenizer={name!r} has no end-of-sequence token, which packing needs to separate "
                f"documents; use a tokenizer with an eos_token (or data.tokenizer='bpe')"
            )
        self.eot_id = int(tok.eos_token_id)
        self.vocab_size = len(tok)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode(list(ids))

    def fingerprint(self) -> str:
        backend = getattr(self.tok, "backend_tokenizer", None)
        body = backend.to_str() if backend is not None else repr(sorted(self.tok.get_vocab().items()))
        return hashlib.sha256(f"{body}\0{self.eot_id}\0{self.vocab_size}".encode()).hexdigest()[:16]


def load_pretrained(name: str, vocab_size: int) -> PretrainedTokenizer:
    """Load a tokenizer by hub name or local path; its vocabulary must fit ``model.vocab_size``."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as e:  # unknown name, no network, broken folder
        raise DataError(
            f"data.tokenizer={name!r} could not be loaded with transformers.AutoTokenizer "
            f"({type(e).__name__}: {e}); give a tokenizer name or a local folder saved with save_pretrained, "
            f"or data.tokenizer='bpe' to train one on the corpus"
        ) from None
    wrapped = PretrainedTokenizer(tok, name)
    if wrapped.vocab_size > vocab_size:
        raise DataError(
            f"model.vocab_size={vocab_size} is smaller than the vocabulary of data.tokenizer={name!r} "
            f"({wrapped.vocab_size} tokens); set model.vocab_size >= {wrapped.vocab_size}"
        )
    return wrapped


def train_bpe(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE (GPT-2 style pre-tokenisation) to ``vocab_size`` tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=BPE_MIN_FREQUENCY,
        special_tokens=[EOT_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def cached_bpe(
    root: Path, key: str, vocab_size: int, train_texts: Callable[[], Iterable[str]]
) -> tuple[BPETokenizer, bool, float]:
    """The BPE of cache entry ``key`` under ``root``, trained from ``train_texts()`` on a miss.

    Returns (tokenizer, cache_hit, seconds spent training). Raises :class:`DataError` when the
    text cannot support ``vocab_size`` tokens."""
    from tokenizers import Tokenizer

    if vocab_size < BPE_MIN_VOCAB:
        raise DataError(
            f"model.vocab_size={vocab_size} is below the {BPE_MIN_VOCAB} tokens a byte-level BPE needs "
            f"(256 bytes + end-of-text); set model.vocab_size >= {BPE_MIN_VOCAB}"
        )
    final = root / key
    name = f"bpe-{vocab_size}"
    if (final / "tokenizer.json").is_file():
        return BPETokenizer(Tokenizer.from_file(str(final / "tokenizer.json")), name, final / "tokenizer.json"), True, 0.0
    with cache.locked(root, key):
        if (final / "tokenizer.json").is_file():  # built by another process while we waited
            return BPETokenizer(Tokenizer.from_file(str(final / "tokenizer.json")), name, final / "tokenizer.json"), True, 0.0
        t0 = time.perf_counter()
        n_chars = 0

        def counted() -> Iterable[str]:
            nonlocal n_chars
            for text in train_texts():
                n_chars += len(text)
                yield text

        tok = train_bpe(counted(), vocab_size)
        seconds = time.perf_counter() - t0
        if n_chars == 0:
            raise DataError(
                "the training split has no text to train the BPE on; add documents (data.path, data.max_chars) "
                "or lower data.val_fraction / data.test_fraction"
            )
        reached = tok.get_vocab_size()
        if reached < vocab_size:
            raise DataError(
                f"model.vocab_size={vocab_size} is too large for this corpus: a byte-level BPE on its "
                f"{n_chars:,} training characters stops at {reached} tokens (no pair occurs "
                f"{BPE_MIN_FREQUENCY}+ times). Set model.vocab_size <= {reached}, or give more text "
                f"(data.max_chars, data.bpe_max_chars, data.path)"
            )
        build = cache.new_build_dir(root, key)
        tok.save(str(build / "tokenizer.json"))
        cache.write_json_atomic(build / "meta.json", {"vocab_size": vocab_size, "train_chars": n_chars,
                                                      "seconds": round(seconds, 3), "version": BPE_VERSION})
        cache.publish(build, final)
    return BPETokenizer(tok, name, final / "tokenizer.json"), False, seconds
