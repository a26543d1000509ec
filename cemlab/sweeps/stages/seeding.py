"""Stage 3b of a sweep with ``seeding:``: add seeds where a claim's verdict is still open.

After the grid's own seeds ran (``cemlab.sweeps.stages.execute.run_grid``), :func:`add_seeds`
goes through the planned looks (``SweepSpec.looks``): at look ``j`` it judges the sweep's claims
from the store on the first ``n_j`` seeds at ``alpha / K`` (``cemlab.report.look``,
``cemlab.report.sequential``), and gives the cells of the comparisons still inconclusive the seeds
of look ``j + 1``. Those are ordinary trials of the sweep file (same ids and config hashes as if
the file listed the seeds): decided from the store, run on Ray Tune, tracked in MLflow, resumable
and shown in the live table, through the same stages as the grid (``decide``, ``execute``). It
stops when nothing is open or at the last look.

Every look is recorded (``Invocation.looks``): index, seeds, level, open claims and cells, trials
asked for; ``record.finish`` writes them to ``summary.json``, and each is set on the parent run as
the tag ``cemlab.looks`` (JSON) as soon as it is made. A rerun reads the same store, so it makes the
same decisions and finds the trials they ask for done.
"""

from __future__ import annotations

import json
import logging

from cemlab.sweeps.stages import decide, execute
from cemlab.sweeps.stages.invocation import Invocation
from cemlab.sweeps.spec.schema import Trial

log = logging.getLogger("cemlab.sweeps")

#: The parent run's tag with the looks made so far (JSON list).
LOOKS_TAG = "cemlab.looks"
#: MLflow keeps at most this many characters of a tag value.
TAG_CHARS = 5000


def add_seeds(inv: Invocation, trials: list[Trial], overrides: list[str] | None = None) -> None:
    """The looks of ``inv``'s sweep after its grid ``trials`` ran (module docstring); nothing for a
    sweep without ``seeding`` (or one look at this scale)."""
    spec = inv.spec
    looks = spec.looks(inv.scale, trials)
    if spec.seeding is None or len(looks) < 2:
        return
    from cemlab.report.grids import SweepGrids
    from cemlab.report.look import full_grid, look_from_store, next_trials
    from cemlab.report.sequential import look_alpha
    from cemlab.tracking.runs import RunStore

    alpha = look_alpha(len(looks))
    full = full_grid(spec, inv.scale, trials, overrides)
    for j, seeds in enumerate(looks):
        grids = SweepGrids(overrides)
        name = grids.add_file(spec.path) if spec.path is not None else spec.name
        look = look_from_store(name, inv.scale, RunStore(inv.uri, client=inv.client), grids, j, alpha)
        if look.index != j:   # an earlier look (replayed from the store) left nothing open
            return
        last = j == len(looks) - 1
        todo = [] if last else next_trials(full, look.open_cells, looks[j + 1][len(seeds):])
        look.added = len(todo)
        inv.looks.append(look.as_dict())
        _tag(inv)
        log.info("look %d of %s (seeds %s, alpha %.4g): %d claim condition(s) open, %d cell(s) get %d trial(s)",
                 j, spec.name, seeds, alpha, len(look.open_claims), len(look.open_cells), len(todo))
        if last or not todo:
            return
        execute.run_grid(inv, decide.decide_grid(inv, todo))


def _tag(inv: Invocation) -> None:
    """The looks so far on the parent run (``LOOKS_TAG``), cells shortened when the tag would be long."""
    text = json.dumps(inv.looks, sort_keys=True)
    if len(text) > TAG_CHARS:
        short = [{**lk, "open_cells": len(lk["open_cells"])} for lk in inv.looks]
        text = json.dumps(short, sort_keys=True)
    inv.client.set_tag(inv.parent_run_id, LOOKS_TAG, text[:TAG_CHARS])
