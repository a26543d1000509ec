"""Corpora: where documents come from, in which order, and which split each one belongs to.

A document is a file (local folders and the standard library), a record (JSONL, Hugging Face
datasets) or a paragraph (a single plain text file). Every document has a stable identity: a
file's path relative to the corpus root, or the hash of a record's / paragraph's text (so exact
duplicates always land in the same split and cannot leak from train into test). The split is a
function of that identity and ``split_seed`` only (:func:`split_of`), so adding documents to a
corpus never moves the others between splits.

A corpus also has a cheap *fingerprint* (paths, sizes, modification times, names; no reading of
the text) that keys the on-disk caches.

Hugging Face ``datasets`` is imported only when a Hub corpus is opened, so ``cemlab --help`` and
``cemlab plan``, which import this module, do not load it (about 0.8 s).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cemlab.data.config import STDLIB_DEFAULT_MAX_CHARS, DataConfig
from cemlab.data.errors import DataError

SPLITS = ("train", "val", "test")

#: Suffixes of the files a ``text`` folder contributes (one document each).
TEXT_SUFFIXES = (".txt", ".md", ".py")
#: Corpora a system package installs (the ``-prose`` scales of ``sweeps/scales.yaml``): path -> Debian package.
SYSTEM_CORPORA = {"/usr/share/doc/python3.11/html": "python3.11-doc"}

#: Folders never read from the standard library. Test folders are left out because several
#: Linux distributions ship them as a separate package (the corpus would differ between two
#: installs of the same Python) and because they hold deliberately odd data (bad encodings,
#: invalid syntax); ``site-packages`` is not the standard library.
STDLIB_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})

#: ``datasets`` builder for a single local file given as ``hf_dataset``.
HF_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


@dataclass(frozen=True)
class Document:
    id: str
    text: str


def _unit_hash(text: str) -> float:
    """A number in [0, 1) that is a stable function of ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2.0**64


def split_of(doc_id: str, seed: int, val_fraction: float, test_fraction: float) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for a document, from its identity and the seed only."""
    u = _unit_hash(f"split\0{seed}\0{doc_id}")
    if u < val_fraction:
        return "val"
    if u < val_fraction + test_fraction:
        return "test"
    return "train"


def text_id(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Corpus:
    """A source of documents in a fixed order, with a cheap fingerprint for cache keys."""

    kind = "corpus"

    def describe(self) -> str:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError

    def documents(self) -> Iterator[Document]:
        raise NotImplementedError

    def documents_from(self, skip: int) -> Iterator[Document]:
        """``documents()`` without its first ``skip`` documents (a resumed token store). Kinds that
        can skip without reading the text (files, JSONL lines, HF streams) override this."""
        return itertools.islice(self.documents(), skip, None)


def _stat_entry(path: Path, root: Path) -> list[Any]:
    st = path.stat()
    return [path.relative_to(root).as_posix() if path != root else path.name, st.st_size, st.st_mtime_ns]


class FileCorpus(Corpus):
    """One document per file under ``root``. Files are read in a fixed pseudo-random order (hash of
    the relative path), so a ``max_chars`` cut takes a spread of the corpus, not its first folder."""

    def __init__(self, kind: str, root: Path, files: list[Path], extra: dict[str, Any] | None = None):
        self.kind = kind
        self.root = root
        self.files = sorted(files, key=lambda f: hashlib.sha256(self._rel(f).encode()).digest())
        self.extra = extra or {}

    def _rel(self, f: Path) -> str:
        return f.relative_to(self.root).as_posix()

    def describe(self) -> str:
        return f"{self.kind}:{self.root} ({len(self.files)} files)"

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), **self.extra,
                "files": [_stat_entry(f, self.root) for f in self.files]}

    def documents(self) -> Iterator[Document]:
        return self.documents_from(0)

    def documents_from(self, skip: int) -> Iterator[Document]:
        for f in self.files[skip:]:
            yield Document(self._rel(f), f.read_text(encoding="utf-8", errors="replace"))


class ParagraphCorpus(Corpus):
    """One plain text file; its blank-line separated paragraphs are the documents."""

    kind = "text-file"

    def __init__(self, path: Path):
        self.path = path

    def describe(self) -> str:
        return f"text file {self.path} (one document per paragraph)"

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "stat": _stat_entry(self.path, self.path.parent)}

    def documents(self) -> Iterator[Document]:
        text = self.path.read_text(encoding="utf-8", errors="replace")
        for para in re.split(r"\n[ \t]*\n", text):
            para = para.strip("\n")
            if para.strip():
                yield Document(text_id(para), para)


def _record_text(record: Any, field: str, where: str) -> str:
    if not isinstance(record, dict) or field not in record:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(
            f"data.text_field={field!r} is not a field of the records in {where} (found: {keys}); "
            f"set data.text_field to the field that holds the text"
        )
    value = record[field]
    if not isinstance(value, str):
        raise DataError(
            f"data.text_field={field!r} holds a {type(value).__name__}, not text, in {where}; "
            f"set data.text_field to a field with string values"
        )
    return value


class JsonlCorpus(Corpus):
    """One JSON-lines file; each record's ``text_field`` is a document."""

    kind = "jsonl"

    def __init__(self, path: Path, text_field: str):
        self.path = path
        self.text_field = text_field

    def describe(self) -> str:
        return f"JSONL {self.path} (field {self.text_field!r})"

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "field": self.text_field,
                "stat": _stat_entry(self.path, self.path.parent)}

    def documents(self) -> Iterator[Document]:
        return self.documents_from(0)

    def documents_from(self, skip: int) -> Iterator[Document]:
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if skip > 0:  # a finished part of a resumed store: counted, not parsed
                    skip -= 1
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(
                        f"data.path={str(self.path)!r}: line {lineno} is not valid JSON ({e.msg}); "
                        f"a .jsonl file needs one JSON object per line"
                    ) from None
                text = _record_text(record, self.text_field, f"{self.path} line {lineno}")
                yield Document(text_id(text), text)


def looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or Path(name).expanduser().exists()


class HFCorpus(Corpus):
    """A Hugging Face dataset read with ``datasets.load_dataset(..., streaming=True)``: a hub name
    (SlimPajama on a cluster) or, through the same call, a local folder or file of records."""

    kind = "hf"

    def __init__(self, name: str, config: str | None, split: str, text_field: str):
        self.name, self.config, self.split, self.text_field = name, config, split, text_field
        self.local = Path(name).expanduser().resolve() if looks_like_path(name) else None
        if self.local is not None and not self.local.exists():
            raise DataError(
                f"data.hf_dataset={name!r} looks like a local path but does not exist; give an existing "
                f"folder or file of records (JSONL, parquet, CSV) or a dataset name on the hub"
            )

    def describe(self) -> str:
        return f"HF dataset {self.name} (split {self.split!r}, field {self.text_field!r}, streamed)"

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"kind": self.kind, "name": self.name, "config": self.config,
                              "split": self.split, "field": self.text_field}
        if self.local is not None:
            files = [self.local] if self.local.is_file() else sorted(p for p in self.local.rglob("*") if p.is_file())
            fp["files"] = [_stat_entry(f, self.local) for f in files]
        return fp

    def _open(self):
        import datasets

        try:
            if self.local is not None and self.local.is_file():
                builder = HF_FILE_BUILDERS.get(self.local.suffix.lower())
                if builder is None:
                    raise DataError(
                        f"data.hf_dataset={self.name!r}: cannot read {self.local.suffix!r} files; "
                        f"use one of {sorted(HF_FILE_BUILDERS)} or a folder of them"
                    )
                return datasets.load_dataset(builder, data_files=str(self.local), split=self.split, streaming=True)
            target = str(self.local) if self.local is not None else self.name
            return datasets.load_dataset(target, self.config, split=self.split, streaming=True)
        except DataError:
            raise
        except Exception as e:  # missing dataset, no network, unknown split or config
            raise DataError(
                f"data.hf_dataset={self.name!r} (data.hf_config={self.config!r}, data.hf_split={self.split!r}) "
                f"could not be opened: {type(e).__name__}: {e}. Check the name, split and config, or point "
                f"data.hf_dataset at a local folder or file of records"
            ) from None

    def documents(self) -> Iterator[Document]:
        return self.documents_from(0)

    def documents_from(self, skip: int) -> Iterator[Document]:
        stream = self._open()
        if skip:
            stream = stream.skip(skip)
        for i, record in enumerate(stream, skip):
            text = _record_text(record, self.text_field, f"{self.name} record {i}")
            yield Document(text_id(text), text)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def stdlib_corpus() -> FileCorpus:
    """The non-test ``.py`` files of the running Python's standard library."""
    root = stdlib_root()
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in STDLIB_SKIP_DIRS and not d.startswith(".")]  # pruned, not walked
        files.extend(Path(folder, n) for n in names if n.endswith(".py"))
    if not files:
        raise DataError(
            f"data.source='stdlib': found no .py files of the standard library under {root}; "
            f"this Python install ships without its sources: use data.source='text' with data.path"
        )
    return FileCorpus("stdlib", root, files, {"python": sys.version.split()[0]})


def _install_hint(path: str) -> str:
    """How to get a missing ``data.path``: the package that installs it, if a known one does."""
    for root, package in SYSTEM_CORPORA.items():
        if path == root or path.startswith(root + "/"):
            return (f"it is installed by the Debian package {package}: run `sudo apt-get install {package}` "
                    f"(or give another file or folder)")
    return "give an existing file or folder"


def text_corpus(path: str | None, text_field: str) -> Corpus:
    if not path:
        raise DataError("data.path is not set but data.source='text' needs it: give a file, a folder of "
                        ".txt/.md/.py files or a .jsonl file")
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise DataError(f"data.path={path!r} does not exist ({p}); {_install_hint(path)}")
    if p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES
                 and not any(part.startswith(".") for part in f.relative_to(p).parts)]
        if not files:
            raise DataError(f"data.path={path!r}: the folder holds no {'/'.join(TEXT_SUFFIXES)} files; "
                            f"add text files or point data.path at another folder")
        return FileCorpus("text", p, files)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        return JsonlCorpus(p, text_field)
    return ParagraphCorpus(p)


def open_corpus(cfg: DataConfig) -> Corpus:
    """The corpus a config names; missing paths are a :class:`DataError` here, before any work."""
    if cfg.source == "stdlib":
        return stdlib_corpus()
    if cfg.source == "text":
        return text_corpus(cfg.path, cfg.text_field)
    return HFCorpus(cfg.hf_dataset, cfg.hf_config, cfg.hf_split, cfg.text_field)


def effective_max_chars(cfg: DataConfig) -> int | None:
    if cfg.max_chars is not None:
        return cfg.max_chars
    return STDLIB_DEFAULT_MAX_CHARS if cfg.source == "stdlib" else None


class Selector:
    """The state of :func:`select` (what each split has used), so that a token store can resume
    selecting in the middle of a corpus: ``offer(doc)`` returns ``(split, doc)`` to keep, or None
    to skip it; ``done`` turns True once nothing more can be kept."""

    def __init__(self, seed: int, val_fraction: float, test_fraction: float, max_documents: int | None = None,
                 max_chars: int | None = None, used: dict[str, int] | None = None, n_docs: int = 0):
        self.seed, self.val_fraction, self.test_fraction = seed, val_fraction, test_fraction
        self.max_documents = max_documents
        self.budget = None
        if max_chars is not None:
            val, test = int(max_chars * val_fraction), int(max_chars * test_fraction)
            self.budget = {"train": max_chars - val - test, "val": val, "test": test}
        self.used = dict(used) if used else dict.fromkeys(SPLITS, 0)
        self.n_docs = n_docs
        self.done = False

    def state(self) -> dict[str, Any]:
        return {"used": dict(self.used), "n_docs": self.n_docs}

    def offer(self, doc: Document) -> tuple[str, Document] | None:
        if not doc.text.strip():
            return None
        if self.max_documents is not None and self.n_docs >= self.max_documents:
            self.done = True
            return None
        split = split_of(doc.id, self.seed, self.val_fraction, self.test_fraction)
        if self.budget is not None:
            room = self.budget[split] - self.used[split]
            if room <= 0:
                if all(self.used[s] >= self.budget[s] for s in SPLITS):
                    self.done = True
                return None
            if len(doc.text) > room:
                doc = Document(doc.id, doc.text[:room])
        self.used[split] += len(doc.text)
        self.n_docs += 1
        return split, doc


def select(
    docs: Iterator[Document], seed: int, val_fraction: float, test_fraction: float,
    max_documents: int | None = None, max_chars: int | None = None,
) -> Iterator[tuple[str, Document]]:
    """``(split, document)`` for the documents of a corpus, in corpus order, empty ones skipped.

    ``max_documents`` keeps the first that many documents. ``max_chars`` is shared among the splits
    by their fractions (train ``1 - val - test``): each split takes its documents in order until its
    share is full (the last one is cut to fit), so a small sample keeps validation and test text in
    proportion instead of leaving them to chance. Reading stops once every share is full."""
    selector = Selector(seed, val_fraction, test_fraction, max_documents, max_chars)
    for doc in docs:
        kept = selector.offer(doc)
        if selector.done:
            return
        if kept is not None:
            yield kept


def take_chars(texts: Iterator[str], max_chars: int | None) -> list[str]:
    """The texts in order until ``max_chars`` characters (the last one cut to fit)."""
    out, n = [], 0
    for text in texts:
        if max_chars is not None and n + len(text) > max_chars:
            if max_chars > n:
                out.append(text[: max_chars - n])
            break
        out.append(text)
        n += len(text)
    return out
