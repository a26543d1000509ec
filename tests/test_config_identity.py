"""A run's identity is its config hash: restructuring the config classes must not change it.

``tests/data/sweep_identity.json`` was written by ``scripts/sweep-identity.py`` from the configs as
they were before the sublayer options became nested configs and identity moved onto the fields.
Every trial of every sweep file at every scale must keep its hash and its MLflow params."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_sweep_trial_keeps_its_config_hash_and_params():
    recorded = json.loads((ROOT / "tests/data/sweep_identity.json").read_text())
    now = runpy.run_path(str(ROOT / "scripts/sweep-identity.py"))["identities"]()
    assert set(now) == set(recorded), (sorted(set(now) ^ set(recorded))[:10])
    changed = {k: (recorded[k], now[k]) for k in recorded if now[k] != recorded[k]}
    assert not changed, f"{len(changed)} of {len(recorded)} trials changed identity, e.g. {list(changed.items())[:5]}"
    assert len(recorded) > 1000  # every sweep x scale, not a sample
