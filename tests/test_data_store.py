"""The token store: sharded, parallel, resumable after a kill, read by prefix, and read-only in trials.

Real files and real worker processes. The reference for every stream is an independent
re-tokenisation of the documents with the saved ``tokenizers`` file, in the order
:func:`cemlab.data.corpus.select` gives them.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from cemlab.data import DataConfig, DataError, prepare_data
from cemlab.data import store as store_mod
from cemlab.data.corpus import SPLITS, open_corpus, select
from data_support import build_store_then_die, sample_texts, write_jsonl

SHARD = 6_000  # characters per shard: a 100-document corpus makes ~20 shards


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return sample_texts(100, chars=1500)


def jsonl_cfg(tmp_path: Path, texts: list[str], cache: str = "cache") -> DataConfig:
    if not (tmp_path / "docs.jsonl").exists():
        write_jsonl(tmp_path / "docs.jsonl", texts)
    return DataConfig(source="text", path=str(tmp_path / "docs.jsonl"), cache_dir=str(tmp_path / cache),
                      val_fraction=0.15, test_fraction=0.15)


def reference_streams(cfg: DataConfig, tokenizer_json: Path) -> dict[str, list[int]]:
    """Each split's documents tokenised one by one with the saved tokenizer, end-of-text after each."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    eot = tok.token_to_id("<|endoftext|>")
    out = {s: [] for s in SPLITS}
    docs = select(open_corpus(cfg).documents(), cfg.split_seed, cfg.val_fraction, cfg.test_fraction)
    for split, doc in docs:
        out[split] += tok.encode(doc.text, add_special_tokens=False).ids + [eot]
    return out


def test_parallel_shards_equal_the_reference_and_a_second_call_reads_the_store(tmp_path, texts):
    cfg = jsonl_cfg(tmp_path, texts)
    b = prepare_data(cfg, 300, 16, workers=2, shard_chars=SHARD)
    entry = Path(b.stats["cache_path"])
    manifest = json.loads((entry / "store.json").read_text())
    assert manifest["shards"] >= 10 and manifest["exhausted"] is True
    ref = reference_streams(cfg, b.tokenizer.path)
    for s in SPLITS:
        assert b.split(s).tolist() == ref[s]
    # inline (one process, no pool) writes the very same bytes into another store
    inline = prepare_data(cfg.model_copy(update={"cache_dir": str(tmp_path / "other")}), 300, 16, shard_chars=SHARD)
    for s in SPLITS:
        assert (Path(inline.stats["cache_path"]) / f"{s}.bin").read_bytes() == (entry / f"{s}.bin").read_bytes()
    mtimes = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    again = prepare_data(cfg, 300, 16, workers=2, shard_chars=SHARD)
    assert again.stats["cache_hit"] is True and isinstance(again.train, np.memmap)
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == mtimes


def test_a_killed_preparation_resumes_without_rereading_finished_shards(tmp_path, texts, monkeypatch):
    cfg = jsonl_cfg(tmp_path, texts)
    p = mp.get_context("spawn").Process(target=build_store_then_die, args=(cfg.model_dump_json(), 300, SHARD, 4))
    p.start()
    p.join(timeout=240)
    assert p.exitcode == -9  # killed, not finished
    entry = next(d for d in (tmp_path / "cache" / "data" / "tokens").iterdir() if d.is_dir())
    m = json.loads((entry / "store.json").read_text())
    assert m["shards"] == 4 and m["exhausted"] is False
    committed = {s: (entry / f"{s}.bin").read_bytes()[: m["totals"]["tokens"][s] * 2] for s in SPLITS}
    with open(entry / "train.bin", "ab") as fh:  # a half-written shard beyond the manifest
        fh.write(b"\xff\xff" * 777)

    # the resumed build must neither parse the committed records nor tokenise them again
    import cemlab.data.corpus as corpus_mod

    parsed, tokenised = [0], [0]
    real_loads, real_tokenize = json.loads, store_mod.tokenize_shard

    class CountingJson:
        JSONDecodeError = json.JSONDecodeError

        @staticmethod
        def loads(line):
            parsed[0] += 1
            return real_loads(line)

    def counting_tokenize(tokenizer, docs, dtype_name):
        tokenised[0] += len(docs)
        return real_tokenize(tokenizer, docs, dtype_name)

    monkeypatch.setattr(corpus_mod, "json", CountingJson)
    monkeypatch.setattr(store_mod, "tokenize_shard", counting_tokenize)
    b = prepare_data(cfg, 300, 16, shard_chars=SHARD)
    monkeypatch.undo()
    assert b.stats["cache_hit"] is False
    total = sum(b.stats["documents"].values())
    assert parsed[0] == len(texts) - m["raw_read"]
    assert tokenised[0] == total - m["totals"]["docs"] and 0 < m["totals"]["docs"] < total
    for s in SPLITS:  # the committed part is untouched, the junk is gone, the whole equals the reference
        assert (entry / f"{s}.bin").read_bytes().startswith(committed[s])
    ref = reference_streams(cfg, b.tokenizer.path)
    for s in SPLITS:
        assert b.split(s).tolist() == ref[s]
        assert (entry / f"{s}.bin").stat().st_size == len(ref[s]) * 2


def test_budgets_read_prefixes_of_one_store_and_a_larger_budget_extends_it(tmp_path, texts, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    write_jsonl(tmp_path / "ds" / "part-0.jsonl", texts)
    common = dict(source="hf", hf_dataset=str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"),
                  val_fraction=0.15, test_fraction=0.15, bpe_max_chars=60_000)
    cfg = DataConfig(**common)
    small = prepare_data(cfg, 300, 16, min_train_tokens=20_000, shard_chars=SHARD)
    entry = Path(small.stats["cache_path"])
    m_small = json.loads((entry / "store.json").read_text())
    assert small.stats["stream_stopped_early"] and not m_small["exhausted"]
    big = prepare_data(cfg, 300, 16, min_train_tokens=45_000, shard_chars=SHARD)
    assert big.stats["cache_path"] == str(entry)  # one store, not one per budget
    assert json.loads((entry / "store.json").read_text())["shards"] > m_small["shards"]
    for s in SPLITS:  # the smaller budget's data is a prefix of the larger one's
        assert np.array_equal(big.split(s)[: len(small.split(s))], small.split(s))
    # the prefix ends at the document that fills the budget (independent count from the index-free stream)
    eot = big.tokenizer.eot_id
    ends = np.flatnonzero(np.asarray(big.train) == eot) + 1
    first = int(ends[np.argmax(ends >= 20_000)])
    assert small.stats["tokens"]["train"] == first
    # and the smaller budget again: read from the extended store, nothing tokenised
    monkeypatch.setenv(store_mod.READ_ONLY_ENV, "1")
    again = prepare_data(cfg, 300, 16, min_train_tokens=20_000, shard_chars=SHARD)
    assert again.stats["cache_hit"] and np.array_equal(again.train, small.train)


def test_read_only_refuses_to_tokenise_and_names_the_fix(tmp_path, texts, monkeypatch):
    cfg = jsonl_cfg(tmp_path, texts)
    monkeypatch.setenv(store_mod.READ_ONLY_ENV, "1")
    with pytest.raises(DataError, match=r"cemlab data prepare"):
        prepare_data(cfg, 300, 16)
    monkeypatch.delenv(store_mod.READ_ONLY_ENV)
    prepare_data(cfg, 300, 16)
    monkeypatch.setenv(store_mod.READ_ONLY_ENV, "1")
    assert prepare_data(cfg, 300, 16).stats["cache_hit"] is True


ONE_TRIAL = """\
figure: "test: data"
axes: {size: [86m], lr: [1.0e-3]}
variants:
  - {group: llama, label: llama}
"""


@pytest.mark.slow
def test_a_sweep_prepares_the_store_first_and_its_trials_never_tokenise(runs_dir, tmp_path, monkeypatch, ray_local):
    """Without the preparation step the trial fails (it may not tokenise); with it the driver fills
    the store before the trial starts, the trial succeeds and leaves the store untouched."""
    import shutil

    from rich.console import Console

    import cemlab.sweeps.data_step as prepare_mod
    from cemlab.sweeps.runner import run_sweep
    from cemlab.tracking.server import stop_server

    repo_sweeps = Path(__file__).resolve().parents[1] / "sweeps"
    d = tmp_path / "sweeps"
    d.mkdir()
    shutil.copy(repo_sweeps / "scales.yaml", d / "scales.yaml")
    (d / "one.yaml").write_text(ONE_TRIAL)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(d))
    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    cache = tmp_path / "cache"
    console = Console(file=open("/dev/null", "w"), width=200)
    try:
        real = prepare_mod.prepare_sweep_data
        monkeypatch.setattr(prepare_mod, "prepare_sweep_data", lambda *a, **k: [])
        skipped = run_sweep("one", "smoke", cache_dir=cache, console=console, live=False, retries=0)
        assert skipped.exit_code == 1 and "cemlab data prepare" in (skipped.outcomes[0].error or "")
        assert not (cache / "data" / "tokens").exists() or not any((cache / "data" / "tokens").glob("*/store.json"))

        snapshots = []

        def prepare_then_snapshot(*a, **k):  # the store as the driver leaves it, before any trial
            out = real(*a, **k)
            snapshots.append({p: p.stat().st_mtime_ns for p in (cache / "data" / "tokens").rglob("*") if p.is_file()})
            return out

        monkeypatch.setattr(prepare_mod, "prepare_sweep_data", prepare_then_snapshot)
        done = run_sweep("one", "smoke", cache_dir=cache, console=console, live=False, retries=0)
        assert done.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in done.outcomes]
        assert len(snapshots) == 1 and any(p.name == "store.json" for p in snapshots[0])
        after = {p: p.stat().st_mtime_ns for p in (cache / "data" / "tokens").rglob("*") if p.is_file()}
        assert after == snapshots[0]  # the trial wrote nothing to the store (and the guard forbade tokenising)

        # planned vs measured compute of the finished trial (cemlab plan --measured), checked by hand
        from mlflow.tracking import MlflowClient

        from cemlab.sweeps.cost import cost_rows
        from cemlab.sweeps.plan import plan_sweep

        client = MlflowClient(done.tracking_uri)
        plan = plan_sweep("one", "smoke", client=client)
        (row,) = cost_rows(plan, client, mfu=0.4, kind="H100 SXM")
        run = client.get_run(done.outcomes[0].run_id)
        summary = json.loads((runs_dir / "logs" / "one-smoke" / "summary.json").read_text())
        wall = summary["trials"][0]["wall_seconds"]  # the trial's whole wall time, start-up included
        assert row.wall_source == "trial" and wall >= (run.info.end_time - run.info.start_time) / 1000
        res = done.outcomes[0].trial.resources
        assert row.run_id == run.info.run_id and row.unit == "CPU core-h" and res.gpus_per_worker == 0
        assert row.wall_s == pytest.approx(wall) and row.devices == res.workers * res.cpus_per_worker
        assert row.measured_hours == pytest.approx(wall * row.devices / 3600)
        flops = run.data.metrics["model/flops_per_token"] * run.data.metrics["train/token_budget"]
        assert row.flops == pytest.approx(flops, rel=1e-6)  # the plan's FLOPs are the ones the trial logged
        assert row.planned_gpu_hours == pytest.approx(flops / (0.4 * 989.4e12) / 3600, rel=1e-3)
        assert row.ratio is None  # CPU core-hours and GPU-hours are not compared
    finally:
        stop_server()


def test_the_plan_counts_the_data_step_once_not_once_per_budget():
    """attention_replacement at the paper scale: one streamed data set, four token budgets (one per
    model size). Prepared once to the largest budget, instead of once per budget in 8-GPU trials."""
    from cemlab.sweeps.plan import data_prep_estimate
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.tasks import task_of

    spec = load_sweep("attention_replacement")
    trials = spec.expand("paper")
    chinchilla = {20 * task_of(t.config).budget_parameters(t.config) for t in trials}  # the paper's rule, counted here
    assert len(chinchilla) == 4
    d = data_prep_estimate(spec, tokens_per_core_s=1e5)
    assert d["tokens_once"] == pytest.approx(max(chinchilla), rel=1e-3)
    assert d["tokens_per_budget"] == pytest.approx(sum(chinchilla), rel=1e-3)
    assert d["cpu_core_hours"] == pytest.approx(d["tokens_once"] / 1e5 / 3600)
    gpus = {t.resources.workers * t.resources.gpus_per_worker for t in trials}
    assert gpus == {8} and d["gpu_hours_idle_before"] == pytest.approx(d["tokens_per_budget"] / 1e5 / 3600 * 8)


@pytest.mark.slow
def test_ray_tasks_write_the_same_store(tmp_path, texts, ray_local):
    """With Ray (as on a cluster with RAY_ADDRESS) the shards are Ray tasks; same bytes as inline.
    The module's local Ray (``ray_local``), shared with the sweep test."""
    cfg = jsonl_cfg(tmp_path, texts)
    inline = prepare_data(cfg.model_copy(update={"cache_dir": str(tmp_path / "inline")}), 300, 16, shard_chars=SHARD)
    assert ray_local.is_initialized()
    b = prepare_data(cfg, 300, 16, use_ray=True, shard_chars=SHARD)
    assert b.stats["cache_hit"] is False
    for s in SPLITS:
        assert (Path(b.stats["cache_path"]) / f"{s}.bin").read_bytes() == \
            (Path(inline.stats["cache_path"]) / f"{s}.bin").read_bytes()
