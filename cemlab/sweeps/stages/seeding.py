"""Stage 3b of a sweep with ``seeding:``: add seeds where a claim's verdict is still open.

After the grid's own seeds ran (``cemlab.sweeps.stages.execute.run_grid``), :func:`add_seeds`
goes through the planned looks (``SweepSpec.looks``): at look ``j`` the sweep's claims are judged
from the store on the first ``n_j`` seeds at ``alpha / K``, and the cells of the comparisons still
inconclusive get the seeds of look ``j + 1``. The judging is the report's (``judge``:
``cemlab.report.look_store.judge``, handed over by ``cemlab.cli``, since the sweep layer never
imports the report). The trials it adds are ordinary trials of the sweep file (same ids and config
hashes as if the file listed the seeds): decided from the store, run on Ray Tune, tracked in
MLflow, resumable and shown in the live table, through the same stages as the grid (``decide``,
``execute``). It stops when nothing is open or at the last look.

Every look is recorded (``Invocation.looks``): index, seeds, level, open claims and cells, trials
added; ``record.finish`` writes them to ``summary.json``, and they are set on the parent run as the
tag ``cemlab.looks`` (JSON) as soon as each is made. A rerun reads the same store, so it makes the
same decisions and finds the trials they ask for done.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

from cemlab.sweeps.stages import decide, execute
from cemlab.sweeps.stages.invocation import Invocation
from cemlab.sweeps.spec.schema import Trial

log = logging.getLogger("cemlab.sweeps")

#: The parent run's tag with the looks made so far (JSON list).
LOOKS_TAG = "cemlab.looks"
#: MLflow keeps at most this many characters of a tag value.
TAG_CHARS = 5000

#: ``judge(sweep, scale, tracking_uri, overrides, index) -> (look as a dict, trials to add)``.
Judge = Callable[[str | Path, str, str, list[str], int], tuple[dict, list[Trial]]]


def add_seeds(inv: Invocation, trials: list[Trial], judge: Judge | None) -> None:
    """The looks of ``inv``'s sweep after its grid ``trials`` ran (module docstring); nothing for a
    sweep without ``seeding`` (or one look at this scale)."""
    spec = inv.spec
    looks = spec.looks(inv.scale, trials)
    if spec.seeding is None or len(looks) < 2:
        return
    if judge is None:
        log.warning("%s plans %d looks (seeding), but this driver was given no judge: no seed is added; "
                    "`cemlab sweep` passes the report's", spec.name, len(looks))
        return
    for j in range(len(looks)):
        look, todo = judge(spec.path or spec.name, inv.scale, inv.uri, inv.overrides, j)
        if look["index"] != j:   # an earlier look, replayed from the store, left nothing open
            return
        inv.looks.append(look)
        _tag(inv)
        log.info("look %d of %s (seeds %s, alpha %.4g): %d claim condition(s) open, %d cell(s) get %d trial(s)",
                 j, spec.name, look["seeds"], look["alpha"], len(look["open_claims"]), len(look["open_cells"]),
                 len(todo))
        if not todo:
            return
        execute.run_grid(inv, decide.decide_grid(inv, todo))


def _tag(inv: Invocation) -> None:
    """The looks so far on the parent run (``LOOKS_TAG``), cells counted when the tag would be long."""
    text = json.dumps(inv.looks, sort_keys=True)
    if len(text) > TAG_CHARS:
        text = json.dumps([{**lk, "open_cells": len(lk["open_cells"])} for lk in inv.looks], sort_keys=True)
    inv.client.set_tag(inv.parent_run_id, LOOKS_TAG, text[:TAG_CHARS])
