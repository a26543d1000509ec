"""Bad sweep files and bad command-line overrides are refused by ``cemlab sweep`` before anything
starts: exit 2, one message naming the file or the command line, the field and the fix, no
traceback, no compute (neither the pre-flight nor Ray is reached) and nothing written to the runs
folder.

A corpus of mutations of one valid sweep file (non-finite numbers, values beyond a field's bounds,
duplicate keys, files that are not UTF-8 YAML, sizes a scale lacks) and of bad overrides of the
same file. The command runs in-process (``cemlab.cli.main``): the checks under test are the
loader's, and 50 subprocesses of the CLI would cost minutes.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"

GOOD = textwrap.dedent("""\
    figure: "Fig 2c"
    figures: [fig2c]
    task: lm
    base:
      train.tokens: 4096
    axes:
      size: [86m]
      lr: [2.0e-3]
      seed: [0]
    variants:
      - group: llama
        label: llama
      - group: cem-attn
        label: "cem-attn T{T} eta={eta}"
        set: {model.attention: cem, model.attn_steps: "{T}", model.attn_eta: "{eta}"}
        axes: {T: [1, 2], eta: [1, "1/T"]}
    """)


def _swap(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


def _base(line: str) -> str:
    return _swap("  train.tokens: 4096\n", f"  train.tokens: 4096\n  {line}\n")


def _set(item: str) -> str:
    return _swap('model.attn_eta: "{eta}"}', f'model.attn_eta: "{{eta}}", {item}}}')


#: mutation -> (file content, fragments the message must hold: the field, and the limit or fix)
FILES: dict[str, tuple[str | bytes, list[str]]] = {
    "lr_nan": (_swap("lr: [2.0e-3]", "lr: [.nan]"), ["axes.lr", "finite number"]),
    "lr_inf": (_swap("lr: [2.0e-3]", "lr: [.inf]"), ["axes.lr", "finite number"]),
    "lr_minus_inf": (_swap("lr: [2.0e-3]", "lr: [-.inf]"), ["axes.lr", "finite number"]),
    "lr_huge": (_swap("lr: [2.0e-3]", "lr: [1.0e+308]"), ["axes.lr", "at most 1"]),
    "lr_zero": (_swap("lr: [2.0e-3]", "lr: [0.0]"), ["axes.lr", "> 0"]),
    "lr_negative": (_swap("lr: [2.0e-3]", "lr: [-1.0e-3]"), ["axes.lr", "> 0"]),
    "steps_huge": (_swap("T: [1, 2]", "T: [1, 1000000]"), ["model.attn_steps", "set it at most 64"]),
    "steps_zero": (_swap("T: [1, 2]", "T: [0, 2]"), ["model.attn_steps", "set it at least 1"]),
    "eta_inf": (_swap('eta: [1, "1/T"]', 'eta: [.inf, "1/T"]'), ["axes.eta", "finite number"]),
    "eta_nan": (_swap('eta: [1, "1/T"]', 'eta: [.nan, "1/T"]'), ["axes.eta", "finite number"]),
    "eta_huge": (_swap('eta: [1, "1/T"]', 'eta: [1.0e+6, "1/T"]'), ["model.attn_eta", "set it at most 10"]),
    "eta_negative": (_swap('eta: [1, "1/T"]', 'eta: [-1, "1/T"]'), ["model.attn_eta", "set it above 0"]),
    "tokens_huge": (_swap("train.tokens: 4096", "train.tokens: 100000000000000000"), ["train.tokens", "at most"]),
    "tokens_zero": (_swap("train.tokens: 4096", "train.tokens: 0"), ["train.tokens", "at least 1"]),
    "tokens_nan": (_swap("train.tokens: 4096", "train.tokens: .nan"), ["train.tokens"]),
    "d_model_huge": (_base("model.d_model: 100000000"), ["model.d_model", "set it at most"]),
    "d_mlp_huge": (_base("model.d_mlp: 100000000"), ["model.d_mlp", "set it at most"]),
    "n_layers_huge": (_base("model.n_layers: 1000000"), ["model.n_layers", "set it at most 1024"]),
    "context_huge": (_base("model.context_length: 1000000000"), ["model.context_length", "set it at most"]),
    "vocab_huge": (_base("model.vocab_size: 1000000000"), ["model.vocab_size", "set it at most"]),
    "batch_huge": (_base("train.batch_size: 1000000000000"), ["train.batch_size", "set it at most"]),
    "warmup_nan": (_base("train.warmup_frac: .nan"), ["train.warmup_frac", "finite number"]),
    "max_steps_inf": (_base("train.max_steps: .inf"), ["train.max_steps"]),
    "weight_decay_minus_inf": (_base("train.weight_decay: -.inf"), ["train.weight_decay", "finite number"]),
    "set_mlp_steps_huge": (_set("model.mlp_steps: 1000"), ["model.mlp_steps", "set it at most 64"]),
    "set_reuse_huge": (_set("model.attn_reuse: 100000"), ["model.attn_reuse", "set it at most 64"]),
    "seed_nan": (_swap("seed: [0]", "seed: [.nan]"), ["axes.seed"]),
    "test_steps_huge": (_base("train.test_recursion_steps: [1, 100000]"), ["train.test_recursion_steps", "1 to 128"]),
    "checkpoint_every_huge": (_base("train.checkpoint_every: 1.0e+12"), ["train.checkpoint_every", "set it at most"]),
    "precond_rank_huge": (_set("model.attn_precond_rank: 10000000"), ["model.attn_precond_rank", "set it at most"]),
    "size_unknown": (_swap("size: [86m]", "size: [86m, 999m]"), ["axes.size", "'999m'", "scales.yaml"]),
    "size_unknown_at_another_scale": (GOOD + "scales:\n  paper: {size: [86m, 999m]}\n",
                                      ["scales.paper.size", "'999m'", "scale 'paper'"]),
    "scale_lr_inf": (GOOD + "scales:\n  smoke: {lr: [.inf]}\n", ["scales.smoke.lr", "finite number"]),
    "optuna_lr_inf": (_swap("  lr: [2.0e-3]\n", "") + "search: optuna\noptuna: {lr: [5.0e-4, .inf], samples: 2}\n",
                      ["optuna.lr", "finite number"]),
    "duplicate_task": (GOOD + "task: gp\n", ["line 17: key 'task' is given twice", "first at line 3"]),
    "duplicate_axis": (_swap("  seed: [0]\n", "  seed: [0]\n  seed: [1]\n"), ["key 'seed' is given twice"]),
    "not_utf8": (b"\xbd" + GOOD.encode(), ["not a UTF-8 text file"]),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["not a UTF-8 text file"]),
    "latin1": (GOOD.replace('label: llama', 'label: "llama caf\u00e9"').encode("latin-1"), ["not a UTF-8 text file"]),
    "bad_yaml": ("figure: [unclosed\n", ["not valid YAML"]),
}

#: bad overrides of GOOD -> fragments the message must hold
OVERRIDES: dict[str, tuple[list[str], list[str]]] = {
    "lr_nan": (["lr=[.nan]"], ["lr", "finite number"]),
    "lr_inf": (["lr=[.inf]"], ["lr", "finite number"]),
    "lr_huge": (["lr=[1.0e+308]"], ["lr", "at most 1"]),
    "attn_steps_huge": (["model.attn_steps=1000000"], ["model.attn_steps", "set it at most 64"]),
    "attn_eta_inf": (["model.attn_eta=.inf"], ["model.attn_eta", "finite number"]),
    "attn_eta_nan": (["model.attn_eta=.nan"], ["model.attn_eta", "finite number"]),
    "mlp_eta_huge": (["model.mlp_eta=1.0e+9"], ["model.mlp_eta", "set it at most 10"]),
    "tokens_huge": (["train.tokens=100000000000000000"], ["train.tokens", "at most"]),
    "tokens_zero": (["train.tokens=0"], ["train.tokens", "at least 1"]),
    "tokens_nan": (["train.tokens=.nan"], ["train.tokens"]),
    "d_model_huge": (["model.d_model=100000000"], ["model.d_model", "set it at most"]),
    "n_layers_huge": (["model.n_layers=1000000"], ["model.n_layers", "set it at most 1024"]),
    "T_huge": (["T=[1,100000]"], ["model.attn_steps", "set it at most 64"]),
    "eta_inf": (["eta=[.inf]"], ["eta"]),
    "seed_nan": (["seed=[.nan]"], ["seed"]),
    "size_unknown": (["size=[999m]"], ["'999m'"]),
    "warmup_inf": (["train.warmup_frac=.inf"], ["train.warmup_frac", "finite number"]),
    "batch_negative": (["train.batch_size=-1"], ["train.batch_size", "set it at least 1"]),
    "lr_through_config": (["train.lr=.nan"], ["train.lr", "override the axis instead"]),
    "unknown_axis": (["nosuchaxis=[1]"], ["'nosuchaxis' is neither an axis"]),
}


@pytest.fixture
def sweep_cli(tmp_path, monkeypatch, capsys):
    """``cemlab sweep FILE --scale smoke OVERRIDES`` in-process; any step past validation (the
    pre-flight, Ray) fails the test. Returns a function giving (exit code, stderr)."""
    from cemlab.cli import main
    from cemlab.sweeps.stages import execute, preflight
    def compute_started(*a, **k):
        raise AssertionError("a bad input reached the pre-flight or Ray")

    monkeypatch.setattr(preflight, "check_before_ray", compute_started)
    monkeypatch.setattr(execute, "connect_ray", compute_started)
    folder = tmp_path / "sweeps"
    folder.mkdir()
    shutil.copy(REPO_SWEEPS / "scales.yaml", folder / "scales.yaml")
    runs = tmp_path / "runs"
    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(runs))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(folder))

    def run(content: str | bytes, overrides: list[str]) -> tuple[int, str]:
        path = folder / "mutant.yaml"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        capsys.readouterr()
        code = main(["sweep", str(path), "--scale", "smoke", "--plain", *overrides])
        err = capsys.readouterr().err
        assert not runs.exists() or not any(runs.iterdir()), f"written to the runs folder: {list(runs.iterdir())}"
        return code, err

    return run


def test_the_good_file_passes_the_checks(sweep_cli):
    """The corpus's base file is valid: each mutant fails for its mutation alone."""
    with pytest.raises(AssertionError, match="reached the pre-flight"):
        sweep_cli(GOOD, [])


def test_every_bad_sweep_file_is_refused_naming_the_field(sweep_cli):
    assert len(FILES) >= 30
    wrong = {}
    for case, (content, fragments) in FILES.items():
        code, err = sweep_cli(content, [])
        missing = [f for f in fragments if f not in err]
        if code != 2 or missing or "Traceback" in err or "mutant.yaml" not in err:
            wrong[case] = (code, missing, err)
    assert not wrong, "\n\n".join(f"{k}: exit {c}, missing {m}:\n{e}" for k, (c, m, e) in wrong.items())


def test_every_bad_override_is_refused_naming_the_field(sweep_cli):
    assert len(OVERRIDES) >= 15
    wrong = {}
    for case, (overrides, fragments) in OVERRIDES.items():
        code, err = sweep_cli(GOOD, overrides)
        missing = [f for f in fragments if f not in err]
        if code != 2 or missing or "Traceback" in err:
            wrong[case] = (code, missing, err)
    assert not wrong, "\n\n".join(f"{k}: exit {c}, missing {m}:\n{e}" for k, (c, m, e) in wrong.items())


@pytest.mark.parametrize("value", ["lots", "-1", "2GB"])
def test_a_bad_worker_memory_limit_is_refused_before_compute(sweep_cli, monkeypatch, value):
    monkeypatch.setenv("CEMLAB_WORKER_MEMORY_MB", value)
    code, err = sweep_cli(GOOD, [])
    assert code == 2 and "Traceback" not in err
    assert f"CEMLAB_WORKER_MEMORY_MB={value!r}" in err and "MiB" in err and "0 for none" in err
