"""Pre-flight check of a data config: every source a run will read exists and is readable.

``check_data(cfg)`` is what ``cemlab train --dry-run`` and a sweep's start (once per distinct data
config of its trials) call, so that a wrong path is named in a second, before any run starts; it
reads no more than one byte of a file and tokenises nothing. What it checks:

- ``source='stdlib'``: the running Python ships its standard library's ``.py`` files;
- ``source='text'``: ``data.path`` exists; a file can be read; a folder holds text files;
- ``source='hf'``: a local ``data.hf_dataset`` path exists (a hub name is only reachable by
  trying, which the run does, with its own message);
- ``data.tokenizer`` other than ``bpe``: a local path exists; a hub name is in the local cache, or
  can still be downloaded (not in offline mode, ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``);
- ``data.cache_dir``, when it exists, is writable.

``huggingface_hub``'s cache lookup is imported only to check a pretrained tokenizer, so ``cemlab
--help`` and ``cemlab plan``, which import this module, do not load it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cemlab.data.config import DataConfig
from cemlab.data.corpus import FileCorpus, looks_like_path, open_corpus
from cemlab.data.errors import DataError


def check_data(cfg: DataConfig) -> None:
    """Raise :class:`DataError` naming the field and the fix when a source of ``cfg`` is missing
    or unreadable (see the module docstring)."""
    corpus = open_corpus(cfg)  # stdlib sources, text path and folder contents, local hf path
    if cfg.source == "text":
        files = corpus.files[:1] if isinstance(corpus, FileCorpus) else [Path(cfg.path)]
        for f in files:
            try:
                with open(f, "rb") as fh:
                    fh.read(1)
            except OSError as e:
                raise DataError(f"data.path={cfg.path!r}: {f} cannot be read ({e.strerror or e}); "
                                f"fix its permissions or point data.path elsewhere") from None
    if cfg.tokenizer != "bpe":
        _check_tokenizer(cfg.tokenizer)
    if cfg.cache_dir and Path(cfg.cache_dir).is_dir() and not os.access(cfg.cache_dir, os.W_OK | os.X_OK):
        raise DataError(f"data.cache_dir={cfg.cache_dir!r} is not writable; point it at a folder you can write "
                        f"or leave it unset (<runs>/cache)")


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _check_tokenizer(name: str) -> None:
    if looks_like_path(name):
        if not Path(name).expanduser().exists():
            raise DataError(f"data.tokenizer={name!r} looks like a local path but does not exist; give a folder "
                            f"saved with save_pretrained, a tokenizer name on the hub, or 'bpe' to train one")
        return
    if not _offline():
        return  # downloaded (and cached) by the run; a wrong or gated name is reported there
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return
    if not any(isinstance(try_to_load_from_cache(name, f), str)
               for f in ("tokenizer_config.json", "tokenizer.json", "tokenizer.model")):
        raise DataError(f"data.tokenizer={name!r} is not in the local Hugging Face cache and downloads are off "
                        f"(HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE); download it once online, give a local folder, "
                        f"or use data.tokenizer='bpe'")
