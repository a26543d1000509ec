"""Data pipeline: corpora, split by document, BPE, packing, token cache, errors, HF streaming.

Every test builds real files under tmp_path and its own cache folder. Packing is checked against
an independent re-tokenisation: each split's stream is cut at the end-of-text tokens and every
piece must be exactly the tokenizer's encoding of one source document (loaded separately from the
saved tokenizer file), each document appearing exactly once over the three splits.
"""

from __future__ import annotations

import ast
import collections
import math
import multiprocessing as mp
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cemlab.data import DataConfig, DataError, PackedDataset, prepare_data, token_dtype, unigram_perplexity
from cemlab.data.corpus import STDLIB_SKIP_DIRS, split_of, stdlib_corpus
from cemlab.data.tokenizer import train_bpe
from data_support import prepare_worker, sample_texts, save_hf_tokenizer, write_jsonl, write_text_folder

SPLITS = ("train", "val", "test")


def segments(stream: np.ndarray, eot: int) -> list[tuple[int, ...]]:
    """The documents of a packed stream: the pieces between end-of-text tokens (which end it)."""
    assert len(stream) and int(stream[-1]) == eot, "a packed stream ends with end-of-text"
    out, cur = [], []
    for t in stream.tolist():
        if t == eot:
            out.append(tuple(cur))
            cur = []
        else:
            cur.append(t)
    return out


def split_of_texts(bundle, decode) -> dict[str, str]:
    """{document text: split}, read back from the packed streams."""
    where = {}
    for s in SPLITS:
        for seg in segments(bundle.split(s), bundle.tokenizer.eot_id):
            text = decode(list(seg))
            assert text not in where, "a document appears twice"
            where[text] = s
    return where


def text_cfg(path: Path, cache: Path, **kw) -> DataConfig:
    """A ``text`` corpus; small test corpora get 20% validation and test documents."""
    kw = {"val_fraction": 0.2, "test_fraction": 0.2, **kw}
    return DataConfig(source="text", path=str(path), cache_dir=str(cache), **kw)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return sample_texts(80)


def test_packing_is_documents_joined_by_eot_and_split_by_document(tmp_path, texts):
    from tokenizers import Tokenizer

    files = write_text_folder(tmp_path / "corpus", texts[:60])
    (tmp_path / "corpus" / "skip.csv").write_text("not,a,text,file\n")
    cfg = text_cfg(tmp_path / "corpus", tmp_path / "cache")
    b = prepare_data(cfg, vocab_size=400, seq_len=32)

    assert b.tokenizer.vocab_size == 400
    ref = Tokenizer.from_file(str(b.tokenizer.path))  # the saved tokenizer, loaded on its own
    assert ref.token_to_id("<|endoftext|>") == b.tokenizer.eot_id
    seen: dict[str, str] = {}
    for s in SPLITS:
        stream = b.split(s)
        assert stream.dtype == np.uint16 and not stream.flags.writeable
        segs = segments(stream, b.tokenizer.eot_id)
        assert b.stats["documents"][s] == len(segs) > 0
        assert b.stats["tokens"][s] == len(stream) == sum(len(x) + 1 for x in segs)  # no padding anywhere
        for seg in segs:
            text = ref.decode(list(seg))
            assert text in files.values()
            assert ref.encode(text).ids == list(seg)  # exactly the document's own tokenisation
            assert text not in seen, f"document in both {seen.get(text)} and {s}"
            seen[text] = s
    assert set(seen) == set(files.values())  # every document once, .csv left out
    assert b.stats["chars"]["train"] == sum(len(t) for t, s in seen.items() if s == "train")
    # the BPE was trained on the training split only (not on validation or test text)
    train_only = train_bpe(sorted(t for t, s in seen.items() if s == "train"), 400)
    everything = train_bpe(sorted(seen), 400)
    assert ref.get_vocab() == train_only.get_vocab() != everything.get_vocab()


def test_split_is_deterministic_and_stable_when_documents_are_added(tmp_path, texts):
    corpus = tmp_path / "corpus"
    write_text_folder(corpus, texts[:50])
    cfg = text_cfg(corpus, tmp_path / "cache1")
    a = prepare_data(cfg, 300, 16)
    b = prepare_data(cfg.model_copy(update={"cache_dir": str(tmp_path / "cache2")}), 300, 16)
    assert not b.stats["cache_hit"]
    for s in SPLITS:  # rebuilt from scratch in another cache: the same tokens
        assert np.array_equal(a.split(s), b.split(s))
    before = split_of_texts(a, a.tokenizer.decode)

    for i, text in enumerate(texts[50:80]):  # new documents
        (corpus / f"new{i}.md").write_text(text)
    grown = prepare_data(text_cfg(corpus, tmp_path / "cache3"), 300, 16)
    after = split_of_texts(grown, grown.tokenizer.decode)
    assert len(after) == 80
    assert {t: after[t] for t in before} == before  # nobody moved

    reseeded = prepare_data(text_cfg(corpus, tmp_path / "cache4",
                                     split_seed=1), 300, 16)
    moved = split_of_texts(reseeded, reseeded.tokenizer.decode)
    assert set(moved) == set(after) and moved != after  # another seed, another split


def test_packed_dataset_cuts_fixed_windows_with_shifted_targets():
    stream = np.arange(103, dtype=np.uint16)
    ds = PackedDataset(stream, 10)
    assert len(ds) == 10  # 102 // 10: tokens 100..102 only serve as the last target / are dropped
    x, y = ds[0]
    assert x.dtype == torch.long and x.tolist() == list(range(10)) and y.tolist() == list(range(1, 11))
    x, y = ds[9]
    assert x.tolist() == list(range(90, 100)) and y.tolist() == list(range(91, 101))
    assert ds[-1][0].tolist() == x.tolist()
    with pytest.raises(IndexError):
        ds[10]
    xs = torch.cat([ds[i][0] for i in range(len(ds))])
    ys = torch.cat([ds[i][1] for i in range(len(ds))])
    assert xs.tolist() == list(range(100)) and ys.tolist() == list(range(1, 101))
    assert len(PackedDataset(np.arange(11), 10)) == 1
    with pytest.raises(DataError, match="data.seq_len"):
        PackedDataset(np.arange(10), 10)


def test_packed_dataset_over_a_prepared_split(tmp_path, texts):
    write_text_folder(tmp_path / "corpus", texts[:40])
    b = prepare_data(text_cfg(tmp_path / "corpus", tmp_path / "cache"), 300, 24)
    ds = PackedDataset(b.train, 24)
    n = (len(b.train) - 1) // 24
    assert len(ds) == n > 10
    xs = torch.cat([ds[i][0] for i in range(n)]).numpy()
    ys = torch.cat([ds[i][1] for i in range(n)]).numpy()
    assert np.array_equal(xs, b.train[: n * 24]) and np.array_equal(ys, b.train[1 : n * 24 + 1])
    # end-of-text tokens sit inside sequences (packing across document boundaries, no padding)
    assert int((xs == b.tokenizer.eot_id).sum()) > 0


def test_second_call_is_a_cache_hit_with_identical_arrays(tmp_path, texts):
    write_text_folder(tmp_path / "corpus", texts[:40])
    cfg = text_cfg(tmp_path / "corpus", tmp_path / "cache")
    first = prepare_data(cfg, 300, 16)
    assert first.stats["cache_hit"] is False and first.stats["tokenizer_cache_hit"] is False
    entry = Path(first.stats["cache_path"])
    mtimes = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    second = prepare_data(cfg, 300, 16)
    assert second.stats["cache_hit"] is True and second.stats["tokenizer_cache_hit"] is True
    assert second.stats["cache_path"] == first.stats["cache_path"]
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == mtimes  # nothing rewritten
    for s in SPLITS:
        assert np.array_equal(first.split(s), second.split(s))
        assert second.stats["tokens"][s] == first.stats["tokens"][s]
    assert second.tokenizer.encode("def f(x): return x") == first.tokenizer.encode("def f(x): return x")
    # a local corpus is tokenised whole, whatever the token budget: same entry, repeats reported
    budget = prepare_data(cfg, 300, 16, min_train_tokens=10 * first.stats["tokens"]["train"])
    assert budget.stats["cache_hit"] and budget.stats["train_repeats"] == 10.0
    # the same corpus with another split is other data: a miss, a new entry
    other = prepare_data(cfg.model_copy(update={"split_seed": 5}), 300, 16)
    assert other.stats["cache_hit"] is False and other.stats["cache_path"] != first.stats["cache_path"]
    # a damaged entry (here: a truncated stream) is rebuilt, not trusted. The damage replaces the
    # file, as truncating a file in place would crash the readers that have it memory-mapped.
    expected = np.array(first.train)
    (entry / "broken").write_bytes(b"\x00\x01")
    os.replace(entry / "broken", entry / "train.bin")
    again = prepare_data(cfg, 300, 16)
    assert again.stats["cache_hit"] is False and np.array_equal(again.train, expected)


def test_token_dtype_fits_the_vocabulary():
    assert token_dtype(4096) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(128256) == np.uint32


@pytest.mark.slow
def test_concurrent_preparation_builds_one_consistent_cache(tmp_path, texts):
    write_text_folder(tmp_path / "corpus", texts[:60])
    cfg = text_cfg(tmp_path / "corpus", tmp_path / "cache")
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=prepare_worker, args=(cfg.model_dump_json(), 400, 16, barrier, queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(r["stats"]["cache_hit"] for r in results) == [False, True]  # one built, one waited
    assert sorted(r["stats"]["tokenizer_cache_hit"] for r in results) == [False, True]
    assert results[0]["digests"] == results[1]["digests"]
    assert results[0]["stats"]["cache_path"] == results[1]["stats"]["cache_path"]
    tokens_root = tmp_path / "cache" / "data" / "tokens"
    assert [p.name for p in tokens_root.iterdir() if p.is_dir()] == [Path(results[0]["stats"]["cache_path"]).name]
    assert not list((tmp_path / "cache" / "data").rglob("*.tmp-*"))
    # and a third, later run reads the same bytes
    b = prepare_data(cfg, 400, 16)
    import hashlib

    assert b.stats["cache_hit"] and hashlib.sha256(b.train.tobytes()).hexdigest() == results[0]["digests"]["train"]


# --------------------------------------------------------------------------- bad input


def test_missing_path_and_empty_corpus_name_data_path(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"data\.path is not set"):
        prepare_data(DataConfig(source="text", cache_dir=str(cache)), 300, 16)
    with pytest.raises(DataError, match=r"data\.path='.*nope' does not exist"):
        prepare_data(text_cfg(tmp_path / "nope", cache), 300, 16)
    (tmp_path / "notext").mkdir()
    (tmp_path / "notext" / "a.csv").write_text("1,2\n")
    with pytest.raises(DataError, match=r"data\.path=.*no \.txt/\.md/\.py files"):
        prepare_data(text_cfg(tmp_path / "notext", cache), 300, 16)
    (tmp_path / "empty").mkdir()
    for i in range(3):
        (tmp_path / "empty" / f"{i}.txt").write_text("  \n\n")
    with pytest.raises(DataError, match=r"data\.path: the corpus .* holds no text"):
        prepare_data(text_cfg(tmp_path / "empty", cache), 300, 16)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match=r"data\.path: the corpus .* holds no text"):
        prepare_data(text_cfg(tmp_path / "empty.txt", cache), 300, 16)


def test_fields_of_another_source_are_rejected():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"data\.path is only read with source='text'"):
        DataConfig(path="corpus/")
    with pytest.raises(ValidationError, match=r"data\.hf_max_documents is only read with source='hf'"):
        DataConfig(source="text", path="corpus/", hf_max_documents=10)
    with pytest.raises(ValidationError, match=r"use data\.hf_max_documents"):
        DataConfig(source="hf", max_documents=10)


def test_relative_paths_are_made_absolute_where_the_config_is_made(tmp_path, monkeypatch, texts):
    write_text_folder(tmp_path / "corpus", texts[:40])
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(source="text", path="corpus", cache_dir="cache", val_fraction=0.2, test_fraction=0.2)
    assert cfg.path == str(tmp_path / "corpus") and cfg.cache_dir == str(tmp_path / "cache")
    monkeypatch.chdir(tmp_path / "corpus" / "sub")  # a Ray trial's working directory is elsewhere
    b = prepare_data(cfg, 300, 16)
    assert sum(b.stats["documents"].values()) == 40 and b.stats["cache_path"].startswith(str(tmp_path / "cache"))


def test_split_too_small_names_seq_len_and_the_split(tmp_path, texts):
    write_text_folder(tmp_path / "corpus", texts[:30])
    cfg = text_cfg(tmp_path / "corpus", tmp_path / "cache")
    b = prepare_data(cfg, 300, 16)
    smallest = min(SPLITS, key=lambda s: b.stats["tokens"][s])
    too_long = b.stats["tokens"][smallest]  # needs seq_len + 1 tokens
    with pytest.raises(DataError, match=rf"data\.seq_len={too_long}: the {smallest} split has {too_long} tokens"):
        prepare_data(cfg, 300, too_long)
    assert prepare_data(cfg, 300, too_long - 1).stats["cache_hit"]  # one sequence fits: fine
    # a single document cannot fill three splits: which error depends on where it lands
    write_text_folder(tmp_path / "one", texts[:1])
    seeds = {split_of("sub/doc000.txt", seed, 0.2, 0.2): seed for seed in range(50)}
    with pytest.raises(DataError, match=r"data\.val_fraction=0.2: no document of the 1 landed in the val split"):
        prepare_data(text_cfg(tmp_path / "one", tmp_path / "cache", split_seed=seeds["train"]), 300, 16)
    with pytest.raises(DataError, match=r"data\.val_fraction / data\.test_fraction: none of the corpus's 1 doc"):
        prepare_data(text_cfg(tmp_path / "one", tmp_path / "cache", split_seed=seeds["val"]), 300, 16)


def test_vocab_too_large_names_model_vocab_size_and_the_largest_that_works(tmp_path, texts):
    write_text_folder(tmp_path / "corpus", texts[:12])
    cfg = text_cfg(tmp_path / "corpus", tmp_path / "cache")
    with pytest.raises(DataError, match=r"model\.vocab_size=50000 is too large") as err:
        prepare_data(cfg, 50000, 8)
    reached = int(re.search(r"model\.vocab_size <= (\d+)", str(err.value)).group(1))
    assert 257 < reached < 50000
    b = prepare_data(cfg, reached, 8)  # the suggestion works
    assert b.tokenizer.vocab_size == reached
    with pytest.raises(DataError, match=r"model\.vocab_size=100 is below the 257"):
        prepare_data(cfg, 100, 8)


def test_jsonl_text_field_and_bad_lines(tmp_path, texts):
    write_jsonl(tmp_path / "docs.jsonl", texts[:40], field="body")
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"data\.text_field='text' is not a field .*\['body', 'id', 'meta'\]"):
        prepare_data(text_cfg(tmp_path / "docs.jsonl", cache), 300, 16)
    with pytest.raises(DataError, match=r"data\.text_field='meta' holds a dict"):
        prepare_data(text_cfg(tmp_path / "docs.jsonl", cache, text_field="meta"), 300, 16)
    b = prepare_data(text_cfg(tmp_path / "docs.jsonl", cache, text_field="body"), 300, 16)
    assert sum(b.stats["documents"].values()) == 40
    assert set(split_of_texts(b, b.tokenizer.decode)) == set(texts[:40])
    with open(tmp_path / "docs.jsonl", "a") as fh:
        fh.write("{not json\n")
    with pytest.raises(DataError, match=r"data\.path=.*line 41 is not valid JSON"):
        prepare_data(text_cfg(tmp_path / "docs.jsonl", cache, text_field="body"), 300, 16)


def test_single_text_file_is_split_into_paragraph_documents(tmp_path, texts):
    paragraphs = [re.sub(r"\n\s*\n", "\n", t) for t in texts[:30]]  # no blank lines inside
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs) + "\n")
    b = prepare_data(text_cfg(tmp_path / "book.txt", tmp_path / "cache"), 300, 16)
    assert sum(b.stats["documents"].values()) == 30
    assert set(split_of_texts(b, b.tokenizer.decode)) == {p.strip("\n") for p in paragraphs}


# --------------------------------------------------------------------------- Hugging Face path


@pytest.fixture
def hf_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_hf_streaming_end_to_end_on_local_datasets_and_a_saved_tokenizer(tmp_path, texts, hf_offline):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tok_dir = save_hf_tokenizer(tmp_path / "tok", texts[:20], vocab_size=350)
    write_jsonl(tmp_path / "jsonl_ds" / "part-0.jsonl", texts[:40])
    write_jsonl(tmp_path / "jsonl_ds" / "part-1.jsonl", texts[40:80])
    pq.write_table(pa.table({"text": texts[:80]}), tmp_path / "docs.parquet")
    common = dict(source="hf", tokenizer=str(tok_dir), cache_dir=str(tmp_path / "cache"), val_fraction=0.1,
                  test_fraction=0.1)

    full = prepare_data(DataConfig(hf_dataset=str(tmp_path / "jsonl_ds"), hf_max_documents=80, **common), 400, 16)
    assert full.stats["tokenizer"] == str(tok_dir) and full.tokenizer.vocab_size == 350
    assert full.stats["stream_stopped_early"] is False and sum(full.stats["documents"].values()) == 80

    from tokenizers import Tokenizer  # independent re-tokenisation with the saved file

    ref = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    eot = ref.token_to_id("</s>")
    assert full.tokenizer.eot_id == eot
    where = {}
    for s in SPLITS:
        for seg in segments(full.split(s), eot):
            text = ref.decode(list(seg))
            assert ref.encode(text).ids == list(seg) and text not in where
            where[text] = s
    assert set(where) == set(texts[:80])

    # the same records from one parquet file, through the same code: the same streams
    pq_bundle = prepare_data(DataConfig(hf_dataset=str(tmp_path / "docs.parquet"), hf_max_documents=80, **common),
                             400, 16)
    for s in SPLITS:
        assert np.array_equal(pq_bundle.split(s), full.split(s))

    # streaming stops at the first document that brings the training split to min_train_tokens
    target = full.stats["tokens"]["train"] // 3
    part = prepare_data(DataConfig(hf_dataset=str(tmp_path / "jsonl_ds"), **common), 400, 16, min_train_tokens=target)
    assert part.stats["stream_stopped_early"] is True
    train_docs = segments(part.train, eot)
    assert part.stats["tokens"]["train"] >= target > part.stats["tokens"]["train"] - (len(train_docs[-1]) + 1)
    assert np.array_equal(part.train, full.train[: len(part.train)])  # a prefix of the same stream
    again = prepare_data(DataConfig(hf_dataset=str(tmp_path / "jsonl_ds"), **common), 400, 16, min_train_tokens=target)
    assert again.stats["cache_hit"] and np.array_equal(again.train, part.train)


def test_hf_errors_and_bpe_on_a_stream(tmp_path, texts, hf_offline):
    write_jsonl(tmp_path / "ds" / "a.jsonl", texts[:60], field="content")
    cache = str(tmp_path / "cache")
    with pytest.raises(DataError, match=r"data\.hf_dataset=.*does not exist"):
        prepare_data(DataConfig(source="hf", hf_dataset=str(tmp_path / "missing"), cache_dir=cache), 300, 16, 1000)
    with pytest.raises(DataError, match=r"data\.hf_dataset='gmongaras/SlimPajama-627B_Reupload' .* could not be opened"):
        prepare_data(DataConfig(source="hf", cache_dir=cache), 300, 16, 1000)  # the hub is out of reach here
    with pytest.raises(DataError, match=r"data\.hf_max_documents"):
        prepare_data(DataConfig(source="hf", hf_dataset=str(tmp_path / "ds"), cache_dir=cache), 300, 16)
    with pytest.raises(DataError, match=r"data\.text_field='text' is not a field .*content"):
        prepare_data(DataConfig(source="hf", hf_dataset=str(tmp_path / "ds"), cache_dir=cache), 300, 16, 1000)
    b = prepare_data(DataConfig(source="hf", hf_dataset=str(tmp_path / "ds"), text_field="content", cache_dir=cache,
                                max_chars=30_000, val_fraction=0.2, test_fraction=0.2), 300, 16,
                     min_train_tokens=10**9)
    assert b.tokenizer.vocab_size == 300 and b.stats["stream_stopped_early"] is False
    assert b.stats["chars"] == {"train": 18_000, "val": 6_000, "test": 6_000}  # max_chars shared by the fractions
    got = split_of_texts(b, b.tokenizer.decode)
    cut = [t for t in got if t not in texts[:60]]  # the last document of a split may be cut to fit
    assert len(got) < 60 and len(cut) <= 3 and all(any(t.startswith(c) for t in texts[:60]) for c in cut)


def test_pretrained_tokenizer_errors_name_the_field(tmp_path, texts, hf_offline):
    write_text_folder(tmp_path / "corpus", texts[:20])
    tok_dir = save_hf_tokenizer(tmp_path / "tok", texts[:20], vocab_size=350)
    with pytest.raises(DataError, match=r"model\.vocab_size=300 is smaller than .* \(350 tokens\).* >= 350"):
        prepare_data(text_cfg(tmp_path / "corpus", tmp_path / "cache", tokenizer=str(tok_dir)), 300, 16)
    with pytest.raises(DataError, match=r"data\.tokenizer='/nonexistent/tok' could not be loaded"):
        prepare_data(text_cfg(tmp_path / "corpus", tmp_path / "cache", tokenizer="/nonexistent/tok"), 300, 16)
    b = prepare_data(text_cfg(tmp_path / "corpus", tmp_path / "cache", tokenizer=str(tok_dir)), 512, 16)
    assert b.tokenizer.encode("x </s> y").count(b.tokenizer.eot_id) == 0  # only packing inserts EOS


# --------------------------------------------------------------------------- default corpus, baseline


def test_stdlib_corpus_is_real_python_source(tmp_path):
    corpus = stdlib_corpus()
    rels = [f.relative_to(corpus.root).as_posix() for f in corpus.files]
    assert len(rels) > 300 and {"os.py", "json/__init__.py", "collections/__init__.py"} <= set(rels)
    assert not any(set(r.split("/")[:-1]) & STDLIB_SKIP_DIRS for r in rels)
    docs = corpus.documents()
    for _ in range(15):
        doc = next(docs)
        ast.parse(doc.text)  # real, valid Python
    b = prepare_data(DataConfig(cache_dir=str(tmp_path / "cache"), max_chars=400_000, val_fraction=0.2,
                                test_fraction=0.2), 512, 64)
    assert b.stats["source"].startswith("stdlib:")
    assert b.stats["chars"] == {"train": 240_000, "val": 80_000, "test": 80_000}
    text = b.tokenizer.decode(b.train[:20000].tolist())
    assert "def " in text and "import " in text and "return" in text


def test_unigram_perplexity_matches_a_direct_computation():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 40, 5000).astype(np.uint16)
    test = rng.integers(0, 50, 700).astype(np.uint16)  # ids 40..49 unseen in training
    counts = collections.Counter(train.tolist())
    nll = -sum(math.log((counts[t] + 1) / (len(train) + 50)) for t in test.tolist())
    assert unigram_perplexity(train, test, 50) == pytest.approx(math.exp(nll / len(test)), rel=1e-12)
    assert unigram_perplexity(np.zeros(0, np.uint16), test, 50) == pytest.approx(50.0)  # no counts: uniform
    with pytest.raises(ValueError, match="vocab_size"):
        unigram_perplexity(train, test, 45)


@pytest.mark.slow
def test_bench_data_reports_a_miss_then_a_hit(tmp_path, texts, capsys):
    from cemlab.bench.data import main

    write_text_folder(tmp_path / "corpus", texts[:80])
    assert main(["--preset", "nano", "--source", "text", "--path", str(tmp_path / "corpus"),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+[12]\s+(miss|hit)", line)]
    assert [r[:3] for r in rows] == [["1", "miss", "miss"], ["2", "hit", "hit"]]
    assert re.search(r"tokens train/val/test: [\d,]+/[\d,]+/[\d,]+ \(uint16", out)


def test_a_missing_prose_corpus_names_the_package_that_installs_it(tmp_path):
    """Every ``-prose`` scale reads a corpus a Debian package installs; when it is missing, the
    error names the package and the command (here with a path under that root that never exists)."""
    import yaml

    scales = yaml.safe_load((Path(__file__).resolve().parents[1] / "sweeps" / "scales.yaml").read_text())
    prose = {name: s["lm"]["base"]["data"]["path"] for name, s in scales.items() if name.endswith("-prose")}
    assert prose and all(p == "/usr/share/doc/python3.11/html/_sources" for p in prose.values())
    missing = next(iter(prose.values())) + "/not-installed-here"
    with pytest.raises(DataError, match=r"does not exist .*Debian package python3\.11-doc: run "
                                        r"`sudo apt-get install python3\.11-doc`"):
        prepare_data(text_cfg(missing, tmp_path / "cache"), 300, 16)
    with pytest.raises(DataError, match=r"nope' does not exist \(.*\); give an existing file or folder$"):
        prepare_data(text_cfg(tmp_path / "nope", tmp_path / "cache"), 300, 16)
