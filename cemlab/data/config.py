"""Data settings: which corpus, which tokenizer, how it is packed. Pydantic only (no heavy imports)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Default ``max_chars`` of the embedded ``stdlib`` corpus. The non-test standard library of
#: Python 3.11 holds about 12 M characters; 8 M of them give about 2.3 M tokens at the tiny
#: preset's vocab (4096), enough for CPU sweeps of minutes. The first (uncached) preparation (BPE
#: training and tokenisation) takes 15-25 s on two shared cores (2 M characters: ~3 s, 12 M: ~26 s);
#: every later run of the same data memory-maps the cache in about 0.1 s (``cemlab bench data``).
STDLIB_DEFAULT_MAX_CHARS = 8_000_000

#: Default ``bpe_max_chars`` when a BPE is trained on a streamed (``hf``) corpus, which has no end.
HF_DEFAULT_BPE_CHARS = 20_000_000


class DataConfig(BaseModel):
    """Where text comes from and how it becomes fixed-length token sequences.

    ``source``:
      - ``stdlib``: the embedded default corpus, the Python standard library's own ``.py`` files
        (found through ``sysconfig``, without ``site-packages`` and without test folders): real text
        that is present wherever cemlab runs, offline. It differs between Python versions.
      - ``text``: ``path`` is a folder of ``.txt``/``.md``/``.py`` files (one document per file),
        a ``.jsonl`` file (one document per record, text in ``text_field``), or one plain text file
        (one document per blank-line separated paragraph).
      - ``hf``: a Hugging Face dataset streamed with ``datasets`` (``hf_dataset`` is a hub name, or a
        local folder or file of JSONL / parquet / CSV records), e.g. SlimPajama for the paper scale.

    Relative ``path`` and ``cache_dir`` are made absolute when the config is made (Ray trials run in
    another working directory). Documents go to train / validation / test by a stable hash of their identity (the file's path,
    or a record's text) and ``split_seed``, so adding documents never moves the others.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    source: Literal["stdlib", "text", "hf"] = Field(default="stdlib", description="Corpus kind.")
    path: str | None = Field(default=None, description="File or folder for source='text'.")
    text_field: str = Field(default="text", description="Field holding the text in JSONL / HF records.")
    hf_dataset: str = Field(
        default="gmongaras/SlimPajama-627B_Reupload",
        description="HF dataset name, or a local folder / file of records (source='hf').",
    )
    hf_split: str = Field(default="train", description="HF split to stream (cemlab splits it again by document).")
    hf_config: str | None = Field(default=None, description="HF dataset config name.")
    hf_max_documents: int | None = Field(default=None, ge=1, description="Stop after this many documents (source='hf').")
    tokenizer: str = Field(
        default="bpe",
        description="'bpe': train a byte-level BPE on the training split (vocab = model.vocab_size), cached on disk; "
        "otherwise a tokenizer name or local path loaded with transformers.AutoTokenizer, e.g. "
        "'meta-llama/Llama-2-7b-hf'.",
    )
    bpe_max_chars: int | None = Field(
        default=None,
        ge=1,
        description=f"Train the BPE on at most this many characters of the training split "
        f"(None: all of it for local corpora, {HF_DEFAULT_BPE_CHARS:,} for source='hf').",
    )
    max_documents: int | None = Field(default=None, ge=1, description="Use the first this many documents (local sources).")
    max_chars: int | None = Field(
        default=None,
        ge=1,
        description=f"Use at most this many characters of text, any source, shared among the splits by their "
        f"fractions (None: {STDLIB_DEFAULT_MAX_CHARS:,} for source='stdlib', no limit otherwise).",
    )
    val_fraction: float = Field(default=0.05, gt=0, lt=0.5, description="Share of documents for validation.")
    test_fraction: float = Field(default=0.05, gt=0, lt=0.5, description="Share of documents for test.")
    split_seed: int = Field(default=0, description="Seed of the deterministic split by document.")
    seq_len: int | None = Field(default=None, ge=2, description="Packed sequence length; defaults to model.context_length.")
    # not part of the run identity (see NOT_IDENTITY in cemlab.models.config; data/ imports no other cemlab package)
    cache_dir: str | None = Field(json_schema_extra={"identity": False}, default=None, description="Token cache folder; defaults to <runs>/cache.")

    @field_validator("path", "cache_dir")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        # Made absolute where the config is made: Ray trials run in another working directory.
        return None if v is None else os.path.abspath(os.path.expanduser(v))

    @model_validator(mode="after")
    def _check_source_fields(self) -> "DataConfig":
        # A field of another source would be silently ignored: say so instead.
        if self.path is not None and self.source != "text":
            raise ValueError(f"data.path is only read with source='text' (source is {self.source!r}); "
                             f"set data.source='text' or remove data.path")
        if self.hf_max_documents is not None and self.source != "hf":
            raise ValueError("data.hf_max_documents is only read with source='hf'; use data.max_documents")
        if self.max_documents is not None and self.source == "hf":
            raise ValueError("data.max_documents is not read with source='hf'; use data.hf_max_documents")
        return self
