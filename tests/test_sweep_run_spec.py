"""``search: optuna`` in sweep files: validation before anything runs, the cells ``expand`` gives,
and the trials of sampled learning rates (``trial_with_lr``) compared with the same learning rate
written as a grid."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from cemlab.sweeps.sweepfile.expand import trial_with_lr
from cemlab.sweeps.sweepfile.schema import SweepError, round_lr
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tracking import schema

REPO_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"

SEARCH = """\
figure: "test"
axes: {size: [86m, 108m], seed: [0, 1]}
variants:
  - {group: llama, label: llama}
  - {group: cem-attn, label: "cem-attn T{T}", set: {model.attention: cem, model.attn_steps: "{T}"}, axes: {T: [1, 2]}}
search: optuna
optuna:
  lr: [5.0e-4, 8.0e-3]
  samples: {smoke: 3, tiny: 6}
"""


def write(d: Path, name: str, text: str) -> str:
    (d / f"{name}.yaml").write_text(textwrap.dedent(text))
    return name


def test_cells_are_the_grid_without_lr_at_the_ranges_centre(sweep_dir):
    cells = load_sweep(write(sweep_dir, "search", SEARCH)).expand("smoke")
    # 2 sizes x (llama + cem-attn T1, T2) x 2 seeds
    assert len(cells) == 2 * 3 * 2
    centre = round_lr(math.sqrt(5e-4 * 8e-3))
    assert centre == 2e-3
    for c in cells:
        assert c.config.train.lr == centre and c.axes["lr"] == centre
        assert c.search.samples == 3 and c.search.lr == (5e-4, 8e-3) and c.search.metric == "val/loss"
        assert c.config.tracking.tags[schema.SEARCH_CELL] == c.trial_id
    assert load_sweep("search").expand("tiny")[0].search.samples == 6


def test_a_sampled_trial_equals_the_same_lr_written_as_a_grid(sweep_dir):
    cell = load_sweep(write(sweep_dir, "search", SEARCH)).expand("smoke")[5]
    lr = round_lr(0.0012345)
    sampled = trial_with_lr(cell, lr)
    grid_text = SEARCH.split("search: optuna")[0].replace("seed: [0, 1]}", f"seed: [0, 1], lr: [{lr}]}}")
    grid = {t.trial_id: t for t in load_sweep(write(sweep_dir, "grid", grid_text)).expand("smoke")}
    twin = grid[sampled.trial_id]   # same id, built independently by expand
    assert sampled.config_hash == twin.config_hash == sampled.config.hash()
    assert sampled.config.train.lr == lr and sampled.axes == twin.axes
    tags = dict(sampled.config.tracking.tags)
    assert tags.pop(schema.SEARCH_CELL) == cell.trial_id
    grid_tags = {k: v for k, v in twin.config.tracking.tags.items() if k not in (schema.SWEEP,)}
    assert {k: v for k, v in tags.items() if k != schema.SWEEP} == grid_tags
    assert sampled.config.tracking.run_name == sampled.trial_id
    assert cell.config.train.lr != lr and cell.config_hash != sampled.config_hash   # the cell is untouched


@pytest.mark.parametrize("text, key", [
    (SEARCH.replace("optuna:\n  lr: [5.0e-4, 8.0e-3]\n  samples: {smoke: 3, tiny: 6}\n", ""), "optuna"),
    (SEARCH.replace("axes: {size: [86m, 108m], seed: [0, 1]}", "axes: {size: [86m], lr: [1.0e-3]}"), "axes.lr"),
    (SEARCH.replace("lr: [5.0e-4, 8.0e-3]", "lr: [8.0e-3, 5.0e-4]"), "optuna.lr"),
    (SEARCH.replace("lr: [5.0e-4, 8.0e-3]", "lr: [5.0e-4]"), "optuna.lr"),
    (SEARCH.replace("samples: {smoke: 3, tiny: 6}", "samples: 0"), "optuna.samples"),
    (SEARCH.replace("samples: {smoke: 3, tiny: 6}", "samples: 3\n  sampels: 4"), "optuna.sampels"),
    (SEARCH.replace("search: optuna", "search: grid"), "optuna"),
    (SEARCH.replace("search: optuna", "search: random"), "search"),
])
def test_broken_search_settings_name_the_file_and_key(sweep_dir, text, key):
    write(sweep_dir, "broken", text)
    with pytest.raises(SweepError) as e:
        load_sweep("broken").expand("smoke")
    msg = str(e.value)
    assert "broken.yaml" in msg and key in msg, msg


def test_a_scale_without_a_sample_count_is_refused_by_name(sweep_dir):
    spec = load_sweep(write(sweep_dir, "search", SEARCH))
    with pytest.raises(SweepError, match=r"search\.yaml: optuna\.samples gives no number for scale 'paper'"):
        spec.expand("paper")
