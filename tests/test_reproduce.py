"""cemlab reproduce, the environment every run records and the numerics switch.

Two real reruns of one committed main-job trial (a tiny Llama, about 15 s each): as committed (exit 0,
within the cross-environment tolerance: the committed runs recorded no environment) and in a copy of
the folder with its test perplexity raised by 5% (exit 1). Everything else trains nothing."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from cemlab.cli import main
from cemlab.reproduce import trials as rp
from cemlab.tracking import environment as env_mod

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "docs" / "main-job" / "recursion_ablation"
RUNG = ROOT / "docs" / "ladder" / "recursion_ablation" / "workstation-tpp0.3125"
TRIAL = "86m__llama__lr1e-3__s0"


def _committed(trial: str = TRIAL, folder: Path = MAIN) -> pd.Series:
    df = pd.read_csv(folder / "trials.csv", dtype={"config_hash": str})
    return df[df["trial_id"] == trial].iloc[0]


def _cpu_model() -> str:
    text = Path("/proc/cpuinfo").read_text()
    return re.search(r"^model name\s*:\s*(.+)$", text, re.M).group(1).strip()


@pytest.fixture(scope="module")
def rerun(tmp_path_factory, data_cache):
    """One real rerun of TRIAL from the committed main-job folder: (exit code, output, runs folder)."""
    import contextlib
    import io

    runs = tmp_path_factory.mktemp("reproduce") / "runs"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["reproduce", str(MAIN), "--trial", TRIAL, "--runs", str(runs), "--cache-dir", str(data_cache)])
    return code, out.getvalue(), runs


def _store_run(runs: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs / 'mlflow' / 'mlflow.db'}")
    exps = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(exps, filter_string=f"tags.`cemlab.trial_id` = '{TRIAL}'")
    assert len(found) == 1
    return found[0]


def test_rerun_of_a_main_job_trial_holds_and_prints_both_values(rerun):
    code, out, runs = rerun
    assert code == 0, out
    row = _committed()
    run = _store_run(runs)
    new_test, new_val = run.data.metrics["test/ppl"], run.data.metrics["val/ppl"]
    assert run.data.tags["cemlab.config_hash"] == row["config_hash"]
    rel = abs(new_test - row["value"]) / row["value"]
    assert rel <= rp.CROSS_KIND_RTOL
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{TRIAL}:"))
    assert f"test {row['value']:.10g} -> {new_test:.10g} (rel {rel:.2e})" in line
    assert f"val {row['val']:.10g} -> {new_val:.10g}" in line
    committed = next(c for c in rp.read_committed(str(MAIN)) if c.trial_id == TRIAL)
    exact, rtol, _ = rp.expected(committed, 1)   # a tiny trial trains on one thread
    assert "holds" in line and (f"within {rtol:g} expected" not in line if exact
                                else f"within {rtol:g} expected" in line), line
    if exact:   # the committed run recorded this machine's environment kind: the same numbers
        assert new_test == row["value"] and new_val == row["val"]
    assert "planned" in out and "1 of 1 trials hold" in out


def test_every_run_records_its_environment(rerun):
    _, _, runs = rerun
    tags = _store_run(runs).data.tags
    assert tags["cemlab.env.cpu"] == _cpu_model()
    assert tags["cemlab.env.isa"] == torch.backends.cpu.get_cpu_capability()
    assert tags["cemlab.env.torch"] == torch.__version__
    assert tags["cemlab.env.threads"] == "1"     # the main job's trials: one CPU each (sweeps/scales.yaml)
    assert tags["cemlab.env.numerics"] == "native"
    config = torch.__config__.show()
    assert tags["cemlab.env.onednn"] in config
    assert tags["cemlab.env.blas"].split()[-1] in config
    flags = set(re.search(r"^flags\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    assert set(tags["cemlab.env.cpu_flags"].split()) == flags & set(env_mod.VECTOR_FLAGS)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert tags["cemlab.git_commit"] == commit


def test_trials_csv_carries_the_environment_columns(rerun):
    from cemlab.report.inputs.table import join_trials
    from cemlab.tracking.runs import RunStore

    _, _, runs = rerun
    trial = rp.rebuild(next(c for c in rp.read_committed(str(MAIN)) if c.trial_id == TRIAL))
    df = join_trials([trial], RunStore(f"sqlite:///{runs / 'mlflow' / 'mlflow.db'}"))
    tags = _store_run(runs).data.tags
    assert df.loc[0, "env_isa"] == tags["cemlab.env.isa"] and df.loc[0, "env_cpu"] == tags["cemlab.env.cpu"]
    assert df.loc[0, "env_threads"] == "1" and df.loc[0, "env_commit"] == tags["cemlab.git_commit"]
    assert env_mod.summary(df) == env_mod.describe(df.loc[0].to_dict())


def test_a_store_of_runs_that_recorded_this_environment_asks_for_bit_identical(rerun, capsys):
    _, _, runs = rerun
    committed = rp.read_committed(str(runs))
    assert [c.trial_id for c in committed] == [TRIAL]
    assert committed[0].test == _store_run(runs).data.metrics["test/ppl"]
    assert main(["reproduce", str(runs), "--trial", TRIAL, "--dry-run", "--runs", str(runs.parent / "again")]) == 0
    assert "expect bit-identical (same environment kind)" in capsys.readouterr().out


def test_a_changed_committed_value_exits_nonzero(tmp_path, data_cache, capsys):
    folder = tmp_path / "main-job"
    shutil.copytree(MAIN, folder)
    df = pd.read_csv(folder / "trials.csv", dtype={"config_hash": str})
    # past the tolerance of any machine: bit-identical on the committed run's kind, CROSS_KIND_RTOL elsewhere
    df.loc[df["trial_id"] == TRIAL, "value"] *= 1 + 2 * rp.CROSS_KIND_RTOL
    df.to_csv(folder / "trials.csv", index=False)
    code = main(["reproduce", str(folder), "--trial", TRIAL, "--runs", str(tmp_path / "runs"),
                 "--cache-dir", str(data_cache)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "DOES NOT HOLD" in out and f"{TRIAL} do not" in out


def _copy_with(tmp_path: Path, column: str, value) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(MAIN, folder)
    df = pd.read_csv(folder / "trials.csv", dtype={"config_hash": str})
    df.loc[df["trial_id"] == TRIAL, column] = value
    df.to_csv(folder / "trials.csv", index=False)
    return folder


@pytest.mark.parametrize("args, message", [
    (["--trial", "86m__nope__lr1e-3__s0"], "is not a trial of it"),
    (["--trials", "100000"], f"only {len(pd.read_csv(MAIN / 'trials.csv'))} trials have a result"),
    ([], "give --trials N"),
])
def test_bad_choices_are_refused_before_training(tmp_path, capsys, args, message):
    runs = tmp_path / "runs"
    assert main(["reproduce", str(MAIN), *args, "--runs", str(runs)]) == 2
    assert message in capsys.readouterr().err
    assert not runs.exists()


def test_a_changed_config_hash_is_refused_naming_the_cause(tmp_path, capsys):
    folder = _copy_with(tmp_path, "config_hash", "0123456789ab")
    runs = tmp_path / "runs"
    assert main(["reproduce", str(folder), "--trial", TRIAL, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "0123456789ab" in err and "changed what this trial trains" in err and _committed()["config_hash"] in err
    assert not runs.exists()


def test_a_runs_folder_in_use_is_refused_and_kept(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "keep.txt").write_text("a user's runs")
    assert main(["reproduce", str(MAIN), "--trial", TRIAL, "--runs", str(runs)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (runs / "keep.txt").read_text() == "a user's runs"


def test_dry_run_on_a_ladder_rung_names_the_seed_and_the_plan(capsys, tmp_path):
    assert main(["reproduce", str(RUNG), "--trials", "2", "--seed", "5", "--dry-run",
                 "--runs", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    chosen, seed = rp.choose(rp.read_committed(str(RUNG)), 2, None, 5)
    assert seed == 5 and "--seed 5" in out
    for c in chosen:
        assert f"workstation-tpp0.3125 {c.trial_id} ({c.config_hash})" in out
        assert c.status in ("finished", "diverged")
    assert re.search(r"planned time: \d+ s", out)
    assert rp.choose(rp.read_committed(str(RUNG)), 2, None, 5)[0] == chosen
    assert rp.choose(rp.read_committed(str(RUNG)), 2, None, 6)[0] != chosen


def _committed_here(test: float, val: float, **env) -> rp.Committed:
    here = env_mod.environment(threads=1)
    return rp.Committed("recursion_ablation", "tiny", TRIAL, "x", 0, 1e-3, "finished", test, val, {**here, **env})


def test_same_environment_kind_asks_for_bit_identical_numbers():
    c = _committed_here(300.0, 250.0)
    exact, rtol, why = rp.expected(c, threads=1)
    assert exact and rtol == 0.0 and "bit-identical" in why
    same = rp.Outcome(c, "finished", 300.0, 250.0, 1.0, exact, rtol)
    one_ulp = rp.Outcome(c, "finished", math.nextafter(300.0, 400.0), 250.0, 1.0, exact, rtol)
    assert same.holds and not one_ulp.holds
    assert one_ulp.rel("test") == pytest.approx((math.nextafter(300.0, 400.0) - 300.0) / 300.0)


def test_another_environment_kind_is_judged_within_the_tolerance():
    c = _committed_here(300.0, 250.0, env_isa="AVX2" if torch.backends.cpu.get_cpu_capability() != "AVX2" else "AVX512")
    assert not rp.expected(_committed_here(300.0, 250.0), threads=2)[0]   # another thread count: another kind
    exact, rtol, why = rp.expected(c, threads=1)
    assert not exact and rtol == rp.CROSS_KIND_RTOL and "other environment" in why
    inside = rp.Outcome(c, "finished", 300.0 * (1 + 0.9 * rtol), 250.0, 1.0, exact, rtol)
    outside = rp.Outcome(c, "finished", 300.0 * (1 + 1.1 * rtol), 250.0, 1.0, exact, rtol)
    other_status = rp.Outcome(c, "diverged", math.nan, math.nan, 1.0, exact, rtol)
    assert inside.holds and not outside.holds and not other_status.holds


def test_a_report_of_mixed_environments_says_so():
    a = {"run_id": "r1", **env_mod.environment(threads=1)}
    b = {**a, "run_id": "r2", "env_isa": "AVX2"}
    assert env_mod.summary([a, a]) == env_mod.describe(a)
    mixed = env_mod.summary([a, b, a])
    assert mixed.startswith("MIXED ENVIRONMENTS (2)") and "2 run(s)" in mixed and "1 run(s)" in mixed
    assert "not recorded" in env_mod.summary([{"run_id": "r0"}])


def _python(code: str, mode: str) -> subprocess.CompletedProcess:
    from cemlab import numerics

    env = {**{k: v for k, v in os.environ.items() if k not in numerics.LIBRARY_VARS}, "CEMLAB_NUMERICS": mode}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


CAPABILITY = "import torch; torch.ones(4).sum(); print(torch.backends.cpu.get_cpu_capability(), end=' ')"


def test_numerics_switch_pins_the_kernels_and_refuses_what_cannot_take_effect():
    if "avx2" not in env_mod.cpu_flags().split():
        pytest.skip("this CPU has no AVX2")
    done = _python(f"import cemlab; {CAPABILITY}; from cemlab import numerics; print(numerics.apply())", "avx2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["AVX2", "avx2"]     # importing cemlab set the variables before the first kernel
    late = _python(f"import os; os.environ.pop('CEMLAB_NUMERICS'); {CAPABILITY}; os.environ['CEMLAB_NUMERICS'] = "
                   "'avx2'; from cemlab import numerics; numerics.apply()", "native")
    assert late.returncode != 0 and "already run on" in late.stderr
    bad = _python("from cemlab import numerics; numerics.apply()", "fastest")
    assert bad.returncode != 0 and "CEMLAB_NUMERICS='fastest' is not a numerics mode" in bad.stderr
