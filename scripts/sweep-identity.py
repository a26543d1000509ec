"""Print every trial of every sweep file at every scale as JSON: its config hash and its config as
MLflow params (the run's identity and its record), keyed ``sweep/scale/trial_id``.

``tests/test_config_identity.py`` compares this with ``tests/data/sweep_identity.json``, written by
this script before the config classes were restructured: a change to the config classes must
leave every existing trial's identity (and its MLflow params) byte-identical.

    python scripts/sweep-identity.py > tests/data/sweep_identity.json
"""

from __future__ import annotations

import hashlib
import json
import sys

from cemlab.config import flatten
from cemlab.sweeps.sweepfile.files import list_sweeps, scale_names
from cemlab.sweeps.sweepfile.load import load_sweep


def identities() -> dict[str, str]:
    """``{"sweep/scale/trial_id": "<config hash> <sha256 of its MLflow params, 16 hex>"}``."""
    out: dict[str, str] = {}
    for sweep in list_sweeps():
        spec = load_sweep(sweep)
        for scale in scale_names():
            for t in spec.expand(scale):
                params = json.dumps(flatten(t.config), sort_keys=True, separators=(",", ":"))
                out[f"{sweep}/{scale}/{t.trial_id}"] = f"{t.config_hash} {hashlib.sha256(params.encode()).hexdigest()[:16]}"
    return out


if __name__ == "__main__":
    rows = sorted(identities().items())
    sys.stdout.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in rows) + "\n}\n")
