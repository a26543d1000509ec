"""Data pipeline: corpora, tokenizers, packing into fixed-length sequences, on-disk token cache.

>>> bundle = prepare_data(DataConfig(), vocab_size=4096, seq_len=256)   # the embedded default
>>> ds = PackedDataset(bundle.train, 256)                               # (x, y) with y = next tokens

See :mod:`cemlab.data.pipeline` for the flow and :mod:`cemlab.data.corpus` for the sources.
"""

# The names are imported when first used (PEP 562), so that importing a light submodule (a config)
# does not load torch through this package.
from cemlab.lazy import lazy_exports

_EXPORTS = {
    ".config": ("DataConfig",),
    ".dataset": ("PackedDataset", "unigram_perplexity"),
    ".errors": ("DataError",),
    ".pipeline": ("DataBundle", "prepare_data", "token_dtype"),
    ".preflight": ("check_data",),
    ".tokenizer": ("EOT_TOKEN", "TextTokenizer"),
}
__all__ = [name for names in _EXPORTS.values() for name in names]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
