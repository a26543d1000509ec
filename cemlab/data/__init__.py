"""Data pipeline: corpora, tokenizers, packing into fixed-length sequences, on-disk token cache.

>>> bundle = prepare_data(DataConfig(), vocab_size=4096, seq_len=256)   # the embedded default
>>> ds = PackedDataset(bundle.train, 256)                               # (x, y) with y = next tokens

See :mod:`cemlab.data.pipeline` for the flow and :mod:`cemlab.data.corpus` for the sources.
"""

# The names are imported when first used (PEP 562), so that importing a light submodule (a config)
# does not load torch through this package.
from cemlab.lazy import lazy_exports

_EXPORTS = {
    "DataConfig": "cemlab.data.config",
    "PackedDataset": "cemlab.data.dataset",
    "unigram_perplexity": "cemlab.data.dataset",
    "DataError": "cemlab.data.errors",
    "DataBundle": "cemlab.data.pipeline",
    "prepare_data": "cemlab.data.pipeline",
    "token_dtype": "cemlab.data.pipeline",
    "check_data": "cemlab.data.preflight",
    "EOT_TOKEN": "cemlab.data.tokenizer",
    "TextTokenizer": "cemlab.data.tokenizer",
}
__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
