"""Data settings: which corpus, which tokenizer, how it is packed. Pydantic only (no heavy imports)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DataConfig(BaseModel):
    """Where text comes from and how it becomes fixed-length token sequences.

    ``source``:
      - ``stdlib``: the embedded default corpus, the Python standard library's own source files
        (found through ``sysconfig``): real text that is present wherever cemlab runs, offline.
      - ``text``: a file, or a folder of ``.txt``/``.md``/``.py`` files, or JSONL (``text_field``).
      - ``hf``: a Hugging Face dataset by name (streamed), e.g. SlimPajama for the paper scale.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    source: Literal["stdlib", "text", "hf"] = Field(default="stdlib", description="Corpus kind.")
    path: str | None = Field(default=None, description="File or folder for source='text'.")
    text_field: str = Field(default="text", description="Field holding the text in JSONL / HF records.")
    hf_dataset: str = Field(default="gmongaras/SlimPajama-627B_Reupload", description="HF dataset name or local path (source='hf').")
    hf_split: str = Field(default="train", description="HF split to stream.")
    hf_config: str | None = Field(default=None, description="HF dataset config name.")
    hf_max_documents: int | None = Field(default=None, ge=1, description="Stop after this many documents (source='hf').")
    tokenizer: str = Field(
        default="bpe",
        description="'bpe': train a byte-level BPE on the corpus (vocab = model.vocab_size), cached on disk; "
        "otherwise a tokenizer name or path, e.g. 'meta-llama/Llama-2-7b-hf'.",
    )
    max_documents: int | None = Field(default=None, ge=1, description="Use at most this many documents (local sources).")
    max_chars: int | None = Field(default=None, ge=1, description="Use at most this many characters of text (local sources).")
    val_fraction: float = Field(default=0.05, gt=0, lt=0.5, description="Share of documents for validation.")
    test_fraction: float = Field(default=0.05, gt=0, lt=0.5, description="Share of documents for test.")
    split_seed: int = Field(default=0, description="Seed of the deterministic split by document.")
    seq_len: int | None = Field(default=None, ge=2, description="Packed sequence length; defaults to model.context_length.")
    cache_dir: str | None = Field(default=None, description="Token cache folder; defaults to <runs>/cache.")
