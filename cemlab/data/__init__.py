"""Data pipeline: corpora, tokenizers, packing into fixed-length sequences, on-disk token cache.

>>> bundle = prepare_data(DataConfig(), vocab_size=4096, seq_len=256)   # the embedded default
>>> ds = PackedDataset(bundle.train, 256)                               # (x, y) with y = next tokens

See :mod:`cemlab.data.pipeline` for the flow and :mod:`cemlab.data.corpus` for the sources.
"""

from cemlab.data.config import DataConfig
from cemlab.data.dataset import PackedDataset, unigram_perplexity
from cemlab.data.errors import DataError
from cemlab.data.pipeline import DataBundle, prepare_data, token_dtype
from cemlab.data.preflight import check_data
from cemlab.data.tokenizer import EOT_TOKEN, TextTokenizer

__all__ = [
    "DataBundle",
    "DataConfig",
    "DataError",
    "EOT_TOKEN",
    "PackedDataset",
    "TextTokenizer",
    "check_data",
    "prepare_data",
    "token_dtype",
    "unigram_perplexity",
]
