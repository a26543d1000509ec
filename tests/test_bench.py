"""``cemlab bench layers`` end to end on a tiny preset: its table is what it says it is.

Speed itself is measured by running the benchmark, not here; these tests check the accounting
that the printed ratios rest on."""

from __future__ import annotations

import csv

import pytest

from cemlab.bench import layers
from cemlab.models import build_model, count_parameters, flops_per_token
from cemlab.models.config import ModelConfig


class _PreloadedProcesses:
    """``multiprocessing`` as ``cemlab.bench.layers`` uses it, except that its fresh process per
    measurement is forked from a server that has imported torch and the benchmark once (forkserver
    with preload) instead of a new interpreter importing them each time: the fixture's ten
    processes cost about a second each instead of a torch import each (37 s for the fixture)."""

    def get_context(self, method):
        import multiprocessing

        assert method == "spawn", method  # what the benchmark asks for; the test stands in for it
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["cemlab.bench.layers", "transformers.models.llama.modeling_llama"])
        return ctx

    @staticmethod
    def stop():
        """End the fork server (it would otherwise idle, torch loaded, until pytest exits)."""
        from multiprocessing import forkserver

        getattr(forkserver._forkserver, "_stop", lambda: None)()


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.csv"
    processes = _PreloadedProcesses()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layers, "mp", processes)
        try:
            rc = layers.main(["--preset", "nano", "--batch", "2", "--seq", "32", "--steps", "1", "--rounds", "1",
                              "--threads", "1", "--csv", str(out),
                              "--variants", "llama", "hf-llama", "cem T1", "cem T8", "cem T8 ckpt"])
        finally:
            processes.stop()
    assert rc == 0
    with open(out) as f:
        return {r["variant"]: r for r in csv.DictReader(f)}


def test_rows_and_ratios(table):
    assert list(table) == ["llama", "hf-llama", "cem T1", "cem T8", "cem T8 ckpt"]
    ref = float(table["llama"]["tokens_per_s"])
    for r in table.values():
        assert float(r["tokens_per_s"]) > 0 and float(r["peak_mib"]) > 0
        assert float(r["throughput_vs_llama"]) == pytest.approx(float(r["tokens_per_s"]) / ref)
        assert float(r["peak_vs_llama"]) == pytest.approx(float(r["peak_mib"]) / float(table["llama"]["peak_mib"]))


def test_sizes_and_flops_match_the_model_library(table):
    """The Hugging Face model is the same size as cemlab's Llama; the FLOPs column is the library's
    training FLOPs per token at the benchmark's sequence length."""
    cfg = ModelConfig.preset("nano")
    n = count_parameters(build_model(cfg))["total"]
    assert float(table["llama"]["params_m"]) == pytest.approx(n / 1e6)
    assert float(table["hf-llama"]["params_m"]) == pytest.approx(n / 1e6)
    cem8 = cfg.model_copy(update=layers.VARIANTS["cem T8"])
    assert float(table["cem T8"]["gflop_per_token"]) == pytest.approx(flops_per_token(cem8, 32)["train"] / 1e9)
    assert float(table["cem T8 ckpt"]["gflop_per_token"]) == float(table["cem T8"]["gflop_per_token"])


def test_checkpointing_cuts_saved_activations(table):
    """Recursion without checkpointing saves activations for every step; checkpointed, T=8 saves
    no more than T=1 does (the recursion's steps are recomputed in backward)."""
    t1, t8, t8c = (float(table[v]["saved_mib"]) for v in ("cem T1", "cem T8", "cem T8 ckpt"))
    assert t8 > 3 * t1
    assert t8c <= t1


def test_unknown_variant_is_refused(capsys):
    assert layers.main(["--variants", "llama", "cem T3"]) == 2
    assert "cem T3" in capsys.readouterr().err


def test_python_dash_m_runs_the_same_command():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "cemlab.bench", "layers", "--variants", "llama", "cem T3"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown variants ['cem T3']" in p.stderr


# -- cemlab bench kernels: the GPU table's code path, run on the CPU at tiny shapes ----------------


def _kernels_table(tmp_path, monkeypatch, *extra):
    from cemlab.bench import kernels

    monkeypatch.setattr("cemlab.hardware.peak_flops", lambda name=None: 1e12)  # a known peak, so MFU is printed
    out = tmp_path / "kernels.csv"
    rc = kernels.main(["--device", "cpu", "--presets", "nano", "--seq", "32", "--batch", "2", "--steps", "1",
                       "--rounds", "2", "--threads", "1", "--csv", str(out), *extra])
    assert rc == 0
    with open(out) as f:
        return list(csv.DictReader(f))


def test_kernels_bench_train_table(tmp_path, monkeypatch):
    """Rows, ratios, MFU and the attention kernel each model really gets, in bf16 autocast as on a GPU."""
    rows = _kernels_table(tmp_path, monkeypatch, "--dtype", "bf16", "--variants", "llama", "hf-llama",
                          "cem-attn ref", "cem-attn flash", "cem-attn flex", "cem T2")
    by = {r["variant"]: r for r in rows}
    assert list(by) == ["llama", "hf-llama", "cem-attn ref", "cem-attn flash", "cem-attn flex", "cem T2"]
    ref = float(by["llama"]["tokens_per_s"])
    cfg = ModelConfig.preset("nano")
    for name in ("llama", "hf-llama", "cem-attn ref", "cem-attn flash", "cem T2"):
        r = by[name]
        tps = float(r["tokens_per_s"])
        assert tps > 0 and float(r["throughput_vs_llama"]) == pytest.approx(tps / ref)
        over = layers.VARIANTS["cem T2"] if name == "cem T2" else dict(attention="cem") if name.startswith("cem") else {}
        fpt = flops_per_token(cfg.model_copy(update=over), 32)["train"]
        assert float(r["gflop_per_token"]) == pytest.approx(fpt / 1e9)
        assert float(r["mfu"]) == pytest.approx(tps * fpt / 1e12)
    # Llama's causal SDPA call gets the flash kernel; CEM attention's learnable self/other bias is a
    # mask that needs a gradient, which only the math kernel takes on CPU.
    assert by["llama"]["kernel"].startswith("FLASH_ATTENTION") and by["hf-llama"]["kernel"].startswith("FLASH_ATTENTION")
    assert by["cem-attn ref"]["kernel"] == "MATH (Dh=16, float mask)"
    # the flash path holds that mask constant and routes the bias's gradient itself; 'auto' is it on CPU
    assert by["cem-attn flash"]["kernel"] == "FLASH_ATTENTION (Dh=16, constant mask)"
    assert by["cem T2"]["kernel"] == "FLASH_ATTENTION (Dh=16, constant mask)"
    # FlexAttention has no CPU backward: the row says so instead of a number
    assert "no CPU backward" in by["cem-attn flex"]["kernel"] and by["cem-attn flex"]["tokens_per_s"] == "nan"


def test_kernels_bench_forward_pass_times_flex(tmp_path, monkeypatch):
    rows = _kernels_table(tmp_path, monkeypatch, "--pass", "forward", "--variants", "llama", "cem-attn ref",
                          "cem-attn flex", "cem-attn diag ref")
    by = {r["variant"]: r for r in rows}
    assert by["cem-attn flex"]["kernel"] == "flex-dense (Dh=16)" and float(by["cem-attn flex"]["tokens_per_s"]) > 0
    # without autograd the 4-d bias mask gets the CPU flash kernel; the diagonal widens queries and
    # keys by D (80 channels) but not the values, which only the math kernel accepts
    assert by["cem-attn ref"]["kernel"] == "FLASH_ATTENTION (Dh=16, float mask)"
    assert by["cem-attn diag ref"]["kernel"] == "MATH (Dh=80, float mask)"
    fwd = flops_per_token(ModelConfig.preset("nano", attention="cem", kq_diagonal="shared"), 32)["forward"]
    assert float(by["cem-attn diag ref"]["gflop_per_token"]) == pytest.approx(fwd / 1e9)


def test_kernels_bench_keeps_the_groups_it_finished_when_cut_short(tmp_path, monkeypatch, capsys):
    """Each (preset, compile) group is printed and written as it ends: a run stopped in its second
    group (as a time limit stops a long GPU run) leaves the first group's rows, ratios included."""
    from cemlab.bench import kernels

    monkeypatch.setattr("cemlab.hardware.peak_flops", lambda name=None: 1e12)
    warmup = kernels.Case.warmup

    def stop_in_the_second_group(case):
        if case.preset == "tiny":
            raise KeyboardInterrupt
        warmup(case)

    monkeypatch.setattr(kernels.Case, "warmup", stop_in_the_second_group)
    out = tmp_path / "kernels.csv"
    with pytest.raises(KeyboardInterrupt):
        kernels.main(["--device", "cpu", "--presets", "nano", "tiny", "--seq", "32", "--batch", "2", "--steps", "1",
                      "--rounds", "1", "--threads", "1", "--csv", str(out), "--variants", "llama", "cem-attn ref"])
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(r["preset"], r["variant"]) for r in rows] == [("nano", "llama"), ("nano", "cem-attn ref")]
    assert float(rows[0]["throughput_vs_llama"]) == 1.0 and float(rows[1]["tokens_per_s"]) > 0
    printed = capsys.readouterr().out
    assert "# cemlab bench kernels" in printed and printed.count("nano   ") == 2 and "tiny   " not in printed
