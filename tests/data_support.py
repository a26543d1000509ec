"""Helpers for tests/test_data.py: real text files, local datasets and tokenizers, a worker process."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path


def sample_texts(n: int, chars: int = 2500) -> list[str]:
    """``n`` different pieces of real text: the starts of standard-library modules, in name order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for f in sorted(root.glob("*.py")):
        text = f.read_text(encoding="utf-8", errors="replace")[:chars].strip()
        if len(text) > chars // 2 and text not in texts:
            texts.append(text)
        if len(texts) == n:
            return texts
    raise RuntimeError(f"only {len(texts)} sample texts found")


def write_text_folder(folder: Path, texts: list[str], suffixes=(".txt", ".md", ".py")) -> dict[str, str]:
    """One file per text (suffixes in turn, some in a subfolder); returns {relative path: text}."""
    files = {}
    for i, text in enumerate(texts):
        rel = f"{'sub/' if i % 3 == 0 else ''}doc{i:03d}{suffixes[i % len(suffixes)]}"
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
        files[rel] = text
    return files


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": i, field: text, "meta": {"n": len(text)}}) + "\n")


def save_hf_tokenizer(folder: Path, texts: list[str], vocab_size: int) -> Path:
    """A byte-level BPE built with ``tokenizers`` and saved with ``save_pretrained`` (a stand-in for
    the Llama tokenizer, which needs the hub)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>").save_pretrained(str(folder))
    return folder


def prepare_worker(cfg_json: str, vocab_size: int, seq_len: int, barrier, queue) -> None:
    """Run in a separate process: wait for the sibling, prepare, report stats and array digests."""
    import hashlib

    from cemlab.data import DataConfig, prepare_data

    barrier.wait()
    bundle = prepare_data(DataConfig.model_validate_json(cfg_json), vocab_size, seq_len)
    digests = {s: hashlib.sha256(bundle.split(s).tobytes()).hexdigest() for s in ("train", "val", "test")}
    queue.put({"stats": bundle.stats, "digests": digests})


def build_store_then_die(cfg_json: str, vocab_size: int, shard_chars: int, die_after: int) -> None:
    """Run in a subprocess: prepare with small shards and SIGKILL this process right after the
    ``die_after``-th shard is committed (the next shards are in flight: a real kill mid-build)."""
    import os
    import signal

    from cemlab.data import DataConfig, prepare_data

    def progress(p):
        if p["shards"] >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)

    prepare_data(DataConfig.model_validate_json(cfg_json), vocab_size, 16, workers=0, progress=progress,
                 shard_chars=shard_chars)
