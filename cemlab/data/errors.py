"""The one exception of the data pipeline."""

from __future__ import annotations


class DataError(ValueError):
    """Bad data input (path, corpus, split, vocabulary, field), raised before any training.

    The message names the config field (``data.path``, ``model.vocab_size``, ...) and says the fix.
    """
