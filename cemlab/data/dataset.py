"""Packed sequences for training and the unigram baseline perplexity.

A split is one 1-D token stream (documents joined by end-of-text). :class:`PackedDataset` cuts it
into consecutive, non-overlapping windows of ``seq_len`` inputs; the targets are the same window
shifted by one token, so the last target of window ``i`` is the first input of window ``i+1``.
No padding: the remainder that does not fill a window is dropped.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from cemlab.data.errors import DataError


class PackedDataset(Dataset):
    """Item ``i`` is ``(x, y)``: ``x = tokens[i*L : (i+1)*L]``, ``y = tokens[i*L+1 : (i+1)*L+1]``
    (``LongTensor[L]`` each, ``L = seq_len``); ``len`` is ``(len(tokens) - 1) // L``."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        if seq_len < 1:
            raise DataError(f"data.seq_len={seq_len} must be >= 1")
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be a 1-D stream, got shape {tokens.shape}")
        if len(tokens) < seq_len + 1:
            raise DataError(
                f"data.seq_len={seq_len}: a stream of {len(tokens)} tokens holds no sequence of {seq_len} "
                f"inputs plus targets; lower data.seq_len or give more text"
            )
        self.tokens = tokens
        self.seq_len = seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sequence {i} out of range for {n} sequences")
        start = i * self.seq_len
        window = np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int64)
        window = torch.from_numpy(window)
        return window[:-1], window[1:]


def unigram_perplexity(train_tokens: np.ndarray, test_tokens: np.ndarray, vocab_size: int) -> float:
    """Perplexity on ``test_tokens`` of the add-one smoothed unigram model of ``train_tokens``:
    ``p(v) = (count_train(v) + 1) / (N_train + vocab_size)``. The baseline a trained language model
    must beat clearly."""
    if len(test_tokens) == 0:
        raise ValueError("test_tokens is empty")
    counts = np.zeros(vocab_size, dtype=np.int64)
    chunk = 1 << 24
    for s in range(0, len(train_tokens), chunk):
        part = np.asarray(train_tokens[s : s + chunk])
        if part.size and int(part.max()) >= vocab_size:
            raise ValueError(f"train token id {int(part.max())} >= vocab_size={vocab_size}")
        counts += np.bincount(part, minlength=vocab_size)
    log_p = np.log(counts + 1.0) - np.log(counts.sum() + vocab_size)
    nll = 0.0
    for s in range(0, len(test_tokens), chunk):
        part = np.asarray(test_tokens[s : s + chunk])
        if int(part.max()) >= vocab_size:
            raise ValueError(f"test token id {int(part.max())} >= vocab_size={vocab_size}")
        nll -= float(log_p[part].sum())
    return float(np.exp(nll / len(test_tokens)))
