"""The command line as a user meets it: overrides on sweeps and plans, --print-config, did-you-mean,
--version, --scale's choices and shell completion. No training; nothing is logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cemlab.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _plan_json(capsys, *args: str) -> dict:
    assert main(["plan", "attention_replacement", "--scale", "smoke", "--json", "--no-store", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_overrides_reach_every_trial_with_their_own_hashes(capsys):
    from cemlab.sweeps.sweepfile.load import load_sweep

    base = _plan_json(capsys)
    over = _plan_json(capsys, "train.tokens=2048")
    assert len(over["trials"]) == len(base["trials"]) >= 2
    assert all(t["tokens"] == 2048 for t in over["trials"]) and all(t["tokens"] != 2048 for t in base["trials"])
    # Each overridden hash is the hash of the un-overridden trial's config with train.tokens changed.
    for trial, b in zip(load_sweep("attention_replacement").expand("smoke"), over["trials"]):
        cfg = trial.config.model_copy(deep=True)
        cfg.train.tokens = 2048
        assert b["config_hash"] == cfg.hash() != trial.config_hash

    # Flags and overrides in either order; an axis replaced from the command line.
    seeds = _plan_json(capsys, "seed=[0,1,2]")
    assert len(seeds["trials"]) == 3 * len(base["trials"])
    assert sorted({t["axes"]["seed"] for t in seeds["trials"]}) == [0, 1, 2]
    assert {t["config_hash"] for t in seeds["trials"] if t["axes"]["seed"] == 0} == \
        {t["config_hash"] for t in base["trials"]}
    lrs = _plan_json(capsys, "lr=[1e-3,4e-3]")  # YAML reads 1e-3 as a string: typed like the sweep file's
    assert sorted({t["axes"]["lr"] for t in lrs["trials"]}) == [1e-3, 4e-3]
    assert all(t["trial_id"].endswith(("lr1e-3__s0", "lr4e-3__s0")) for t in lrs["trials"])


@pytest.mark.parametrize("override, expected", [
    ("train.tokns=5", "did you mean 'tokens'?"),
    ("sed=[1]", "did you mean 'seed'?"),
    ("train.lr=1e-3", "override the axis instead: lr=[1e-3]"),
    ("lr=[0]", "learning rates must be > 0"),
    ("model.attn_steps=0", "model.attn_steps is set in command line: model.attn_steps=0"),
    ("seed=[a]", "valid integer"),
])
def test_bad_sweep_overrides_are_named_before_anything_runs(capsys, override, expected):
    assert main(["plan", "attention_replacement", "--scale", "smoke", "--no-store", override]) == 2
    assert expected in capsys.readouterr().err


def test_unknown_scale_is_rejected_with_the_valid_ones(capsys):
    scales = list(yaml.safe_load((ROOT / "sweeps" / "scales.yaml").read_text()))
    with pytest.raises(SystemExit) as e:
        main(["sweep", "x", "--scale", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and all(f"'{s}'" in err for s in scales)
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "{" + ",".join(scales) + "}" in capsys.readouterr().out


def test_version_and_top_level_help(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"cemlab {version('cemlab')}"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("cemlab sweep recursion_ablation", "make sweep SWEEP=recursion_ablation", "cemlab ui",
                "cemlab report recursion_ablation"):
        assert cmd in out


def test_train_prints_its_resolved_config_and_hints_misspelt_keys(capsys, tmp_path):
    from cemlab.config import load_run_config

    assert main(["train", str(ROOT / "configs" / "default.yaml"), "--print-config", "model.attention=cem"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert load_run_config(printed) == load_run_config(ROOT / "configs" / "default.yaml", ["model.attention=cem"])
    assert load_run_config(printed).model.attention.kind == "cem"

    assert main(["train", "train.tokns=5", "model.atention=cem"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'train.tokens'?" in err and "did you mean 'model.attention'?" in err

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--print-config" in out and all(f"  {s} " in out for s in ("model", "data", "train", "tracking"))


def _complete(line: str) -> list[str]:
    """What argcomplete answers the shell for ``line`` (its protocol: environment in, fd 8 out)."""
    r, w = os.pipe()
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", "import os, sys; os.dup2(int(sys.argv[1]), 8); "
                             "from cemlab.cli import main; main()", str(w)],
                            env=env, pass_fds=(w,), stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    os.close(w)
    out = os.read(r, 65536).decode()
    os.close(r)
    proc.wait(timeout=60)
    return [x.strip() for x in out.split("\n") if x.strip()]


def test_shell_completion_of_commands_sweeps_and_scales():
    from cemlab.sweeps.sweepfile.files import list_sweeps, scale_names

    assert _complete("cemlab sw") == ["sweep"]
    plan = _complete("cemlab plan ")
    assert set(list_sweeps()) <= set(plan) and "--scale" in plan and not any(x.endswith("/") for x in plan)
    assert "train.tokens=" in _complete("cemlab sweep recursion_ablation train.to")
    assert _complete("cemlab sweep rec") == ["recursion_ablation"]
    import yaml

    in_file = list(yaml.safe_load((Path(__file__).resolve().parents[1] / "sweeps" / "scales.yaml").read_text()))
    assert _complete("cemlab sweep recursion_ablation --scale ") == scale_names() == in_file
    assert {"smoke", "tiny", "paper"} <= set(in_file)
