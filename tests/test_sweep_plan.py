"""``cemlab plan``: parameters, tokens, FLOPs and GPU-hours counted independently, statuses read from the
store, the table at any width, a missing or dead store, and the plan of an Optuna search (split from
tests/test_sweep_spec.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cemlab.models.config import ModelConfig
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tracking import schema
from sweep_support import REPO_SWEEPS, write_sweep as write

LLAMA = "variants: [{group: llama, label: llama}]\n"


def trials_by_id(trials) -> dict:
    return {t.trial_id: t for t in trials}


@pytest.fixture(autouse=True)
def _project_sweeps(monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))


# ---------------------------------------------------------------------------------------------
# cemlab plan
# ---------------------------------------------------------------------------------------------


def test_plan_counts_params_tokens_and_flops_independently():
    """Params from a real (CPU) model, tokens from the budget rule, FLOPs = tokens x FLOPs/token."""
    from cemlab.models import build_model, count_parameters, flops_per_token
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep("recursion_ablation", "smoke", read_store=False)
    assert len(plan.rows) == 18 and plan.store is None
    for r in plan.rows:
        cfg = r.trial.config
        seq = cfg.model.context_length
        assert r.params == sum(p.numel() for p in build_model(cfg.model).parameters())
        assert r.tokens == math.ceil(cfg.train.tokens / (cfg.train.batch_size * seq)) * cfg.train.batch_size * seq
        assert r.flops == pytest.approx(r.tokens * flops_per_token(cfg.model, seq)["train"])
        assert r.status == "todo"
    assert plan.total_tokens == sum(r.tokens for r in plan.rows)
    # Chinchilla at the paper scale: 20 x the matched Llama's parameters, for the CEM variants too.
    paper = plan_sweep("recursion_ablation", "paper", read_store=False)
    llama86 = count_parameters(build_model(ModelConfig.preset("86m")).to("meta"))["total"]
    for r in paper.rows:
        if r.trial.size == "86m":
            assert r.budget_params == llama86
            assert r.tokens >= 20 * llama86 and r.tokens - 20 * llama86 < 128 * 2048  # rounded up to whole steps


def test_plan_gpu_hours_match_the_paper_for_86m(sweep_dir, monkeypatch):
    """Appendix C.5: an 86M model took about 8 x 2 = 16 A100-hours, i.e. ~30k tokens/s/GPU."""
    from cemlab.sweeps.plan import plan_sweep

    write(sweep_dir, "one", "figure: x\naxes: {size: [86m], lr: [2.0e-3]}\n" + LLAMA)
    plan = plan_sweep(load_sweep(sweep_dir / "one.yaml"), "paper", read_store=False, mfu=0.4)
    (row,) = plan.rows
    assert plan.gpu_hours_paper_throughput["A100"] == pytest.approx(row.tokens / 30e3 / 3600)
    assert 15 < plan.gpu_hours_paper_throughput["A100"] < 17
    assert plan.gpu_hours_mfu["A100"] == pytest.approx(row.flops / (312e12 * 0.4) / 3600)
    assert plan.gpu_hours_mfu["H100 SXM"] == pytest.approx(plan.gpu_hours_mfu["A100"] * 312 / 989)


@pytest.fixture(scope="module")
def plan_store(tmp_path_factory):
    """A real sqlite MLflow store with runs for three trials of attention_replacement (smoke) and
    kq_diagonal (smoke): finished, diverged, failed, in different experiments."""
    from mlflow.tracking import MlflowClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
        runs = tmp_path_factory.mktemp("plan") / "runs"
        mp.setenv("CEMLAB_RUNS_DIR", str(runs))
        from cemlab.tracking.store import ensure_experiment, tracking_uri

        client = MlflowClient(tracking_uri())
        trials = trials_by_id(load_sweep("attention_replacement").expand("smoke"))
        kq = trials_by_id(load_sweep("kq_diagonal").expand("smoke"))
        exp_a = ensure_experiment("cemlab/attention_replacement", client)
        exp_b = ensure_experiment("cemlab/kq_diagonal", client)

        def add(exp, trial, status, mlflow_status="FINISHED"):
            r = client.create_run(exp, tags={schema.CONFIG_HASH: trial.config_hash, schema.STATUS: status})
            client.set_terminated(r.info.run_id, status=mlflow_status)
            return r.info.run_id

        ids = {
            # The Llama baseline finished in the *kq_diagonal* sweep: attention_replacement reuses it.
            "llama": add(exp_b, kq["86m__llama__lr2e-3__s0"], schema.STATUS_FINISHED),
            "cem": add(exp_a, trials["86m__cem-attn_T1__lr2e-3__s0"], schema.STATUS_DIVERGED),
            "kq_none_failed": add(exp_b, kq["86m__cem-attn_kq_none__lr2e-3__s0"], schema.STATUS_FAILED, "FAILED"),
        }
        yield runs, client, ids


@pytest.mark.slow
def test_plan_reads_statuses_from_the_store(plan_store, monkeypatch):
    from cemlab.sweeps.plan import plan_sweep

    runs, client, ids = plan_store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    plan = plan_sweep("attention_replacement", "smoke")
    status = {r.trial.trial_id: (r.status, r.run_id) for r in plan.rows}
    assert status == {"86m__llama__lr2e-3__s0": ("done", ids["llama"]),
                      "86m__cem-attn_T1__lr2e-3__s0": ("diverged", ids["cem"])}
    assert plan.store == client.tracking_uri
    kq = {r.trial.trial_id: r.status for r in plan_sweep("kq_diagonal", "smoke").rows}
    assert kq == {"86m__llama__lr2e-3__s0": "done", "86m__cem-attn_kq_none__lr2e-3__s0": "failed",
                  "86m__cem-attn_kq_shared__lr2e-3__s0": "todo", "86m__cem-attn_kq_per_head__lr2e-3__s0": "todo"}
    # Another scale has other configs: nothing done there.
    assert {r.status for r in plan_sweep("attention_replacement", "tiny").rows} == {"todo"}


@pytest.mark.slow
def test_plan_cli_prints_the_table_and_estimates(plan_store, monkeypatch, capsys):
    from cemlab.cli import main

    runs, _, _ = plan_store
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    assert main(["plan", "attention_replacement", "--scale", "smoke"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "86m__llama__lr2e-3__s0" in ln)
    assert "done" in line and "llama" in line
    assert "diverged" in next(ln for ln in out.splitlines() if "86m__cem-attn_T1__lr2e-3__s0" in ln)
    assert "1 diverged, 1 done" in out and "A100" in out and "H100" in out and "40% MFU" in out
    assert main(["plan", "no_such_sweep"]) == 2
    assert "no sweep named 'no_such_sweep'" in capsys.readouterr().err


def _column(lines: list[str], i: int) -> str:
    """Column ``i`` of a boxed rich table's body lines, its folded pieces joined, without spaces."""
    return "".join(ln.split("│")[i + 1] for ln in lines).replace(" ", "")


def test_plan_at_80_columns_prints_its_summary_first_and_folds_every_cell_whole():
    """``cemlab plan recursion_ablation`` on an 80-column terminal: the summary (totals, looks,
    paper-scale estimates) before the 54-row table, every line within 80 characters, no cell cut:
    each column's folded pieces join back into the trial ids, variants and axes, numbers unbroken."""
    import io

    from rich.console import Console

    from cemlab.sweeps.cli.plan import _print_plan, _sci, _si
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep("recursion_ablation", "tiny", read_store=False)
    buf = io.StringIO()
    _print_plan(plan, Console(file=buf, width=80, highlight=False, color_system=None))
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "…" not in buf.getvalue()
    top = next(i for i, ln in enumerate(lines) if ln.startswith("┏"))
    summary = " ".join(" ".join(lines[:top]).split())
    for part in (f"recursion_ablation ({plan.figure}) at scale tiny: 36 trials", "Total: ", "Confirmation: each cell",
                 "54 trials at least, 165 at most", "Bracketing: up to 1 step per end", "At the paper scale",
                 "Data step at the paper scale"):
        assert part in summary, part
    body = lines[next(i for i, ln in enumerate(lines) if ln.startswith("┡")) + 1:-1]
    assert lines[-1].startswith("└") and len(body) > len(plan.rows)  # folded: rows of several lines
    assert _column(body, 0) == "".join(r.trial.trial_id for r in plan.rows)
    assert _column(body, 1) == "".join(r.trial.variant.replace(" ", "") for r in plan.rows)
    assert _column(body, 3) == "".join(" ".join(f"{k}={v}" for k, v in r.trial.axes.items()
                                                if k not in ("size", "group", "variant")).replace(" ", "")
                                       for r in plan.rows)
    rows = [ln.split("│") for ln in body if ln.split("│")[5].strip()]  # a row's first line holds its numbers
    assert [[c.strip() for c in row[5:9]] for row in rows] == \
        [[_si(r.params), _si(r.tokens), _sci(r.flops), r.status] for r in plan.rows]


def test_plan_does_not_create_a_missing_store(runs_dir):
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep("scale_256m", "smoke")
    assert {r.status for r in plan.rows} == {"todo"}
    assert not (runs_dir / "mlflow" / "mlflow.db").exists()


def test_plan_with_an_unreachable_server_fails_fast(monkeypatch, capsys):
    import socket

    from cemlab.cli import main

    with socket.socket() as s:  # a port nobody serves
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    assert main(["plan", "scale_256m", "--scale", "smoke"]) == 2
    err = capsys.readouterr().err
    assert f"MLflow server at http://127.0.0.1:{port} does not answer" in err and "--no-store" in err
    assert main(["plan", "scale_256m", "--scale", "smoke", "--no-store"]) == 0
    assert "256m__llama__lr2e-3__s0" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# cemlab plan of a search: optuna sweep
# ---------------------------------------------------------------------------------------------

OPTUNA_GRID = """\
figure: "Fig 3a"
axes: {size: [86m], seed: [0]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: "cem-attn T{T}", set: {model.attention: cem, model.attn_steps: "{T}"}, axes: {T: [1, 2]}}
"""
OPTUNA_SEARCH = OPTUNA_GRID + """\
search: optuna
optuna:
  lr: [5.0e-4, 8.0e-3]
  samples: {smoke: 3, tiny: 6, paper: 12}
"""


def test_plan_of_an_optuna_sweep_counts_every_sample(sweep_dir):
    """One row per grid cell; tokens, FLOPs and GPU-hours of all its samples, compared with the same
    cells written as a grid at the range's centre (one run each), times the samples per scale."""
    from cemlab.sweeps.plan import plan_sweep

    search = plan_sweep(load_sweep(write(sweep_dir, "search", OPTUNA_SEARCH)), "smoke", read_store=False)
    grid = plan_sweep(load_sweep(write(sweep_dir, "grid", OPTUNA_GRID.replace("seed: [0]", "seed: [0], lr: [2.0e-3]"))),
                     "smoke", read_store=False)
    assert search.searched and not grid.searched
    assert [r.trial.trial_id for r in search.rows] == [r.trial.trial_id for r in grid.rows]   # a row per cell
    assert [r.samples for r in search.rows] == [3, 3, 3] and {r.samples for r in grid.rows} == {1}
    for s, g in zip(search.rows, grid.rows):
        assert (s.tokens, s.flops) == (g.tokens, g.flops)   # per row: one run
    assert search.total_tokens == 3 * grid.total_tokens
    assert search.total_flops == pytest.approx(3 * grid.total_flops)
    assert search.paper_samples == 12 and grid.paper_samples is None
    assert search.paper_flops == pytest.approx(12 * grid.paper_flops)
    for kind, hours in grid.gpu_hours_mfu.items():
        assert search.gpu_hours_mfu[kind] == pytest.approx(12 * hours)
        assert search.gpu_hours_paper_throughput[kind] == pytest.approx(12 * grid.gpu_hours_paper_throughput[kind])


@pytest.mark.slow
def test_plan_of_an_optuna_sweep_reads_each_cells_samples(sweep_dir, monkeypatch, tmp_path, capsys):
    """A cell's status comes from the runs tagged with it: done with as many results (finished,
    diverged, stopped) as samples, partial with fewer or with failures, todo without runs, even when
    another sweep has a run of the cell's centre config, or a run of an older config of the cell."""
    import json
    import sys

    from cemlab.cli import main
    from cemlab.sweeps.plan import plan_sweep
    from cemlab.sweeps.sweepfile.expand import trial_with_lr

    sys.path.insert(0, str(Path(__file__).parent))
    import report_support as rs

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(sweep_dir))
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    from cemlab.tracking.store import default_tracking_uri

    write(sweep_dir, "search", OPTUNA_SEARCH)
    llama, t1, t2 = load_sweep("search").expand("smoke")
    w = rs.RunWriter(default_tracking_uri(), tmp_path / "artifacts")
    for lr, status in ((2e-3, "finished"), (1e-3, "stopped"), (7e-3, "diverged")):
        w.trial(trial_with_lr(llama, lr), status=status)
    for lr, status in ((2e-3, "finished"), (6e-4, "failed")):
        w.trial(trial_with_lr(t1, lr), status=status)
    centre = load_sweep(write(sweep_dir, "grid", OPTUNA_GRID.replace("seed: [0]", "seed: [0], lr: [2.0e-3]")))
    twin = {t.trial_id: t for t in centre.expand("smoke")}[t2.trial_id]
    assert twin.config_hash == t2.config_hash
    w.trial(twin)   # the centre config, run by a grid sweep: not a sample of the cell
    w.trial(trial_with_lr(t2, 3e-3), tags={schema.CONFIG_HASH: "0" * 16})   # an older config of the cell

    plan = plan_sweep("search", "smoke")
    got = {r.trial.trial_id: (r.status, r.sample_statuses) for r in plan.rows}
    assert got == {llama.trial_id: ("done", {"diverged": 1, "finished": 1, "stopped": 1}),
                   t1.trial_id: ("partial", {"failed": 1, "finished": 1}),
                   t2.trial_id: ("todo", {})}
    assert plan.counts() == {"done": 1, "partial": 1, "todo": 1}

    assert main(["plan", "search", "--scale", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "3 grid cells, learning rate searched by Optuna" in out
    row = next(ln for ln in out.splitlines() if t1.trial_id in ln)
    assert "lr~[0.0005, 0.008]" in row and "partial (1 failed, 1 finished)" in row and " 3 " in row
    assert "for every sample (an upper bound: ASHA stops some samples early); 1 done, 1 partial, 1 todo" in out
    assert "12 samples per cell, an upper bound" in out
    assert main(["plan", "search", "--scale", "smoke", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["search"] == "optuna" and data["total_tokens"] == plan.total_tokens
    assert [(t["samples"], t["status"]) for t in data["trials"]] == [(3, "done"), (3, "partial"), (3, "todo")]
