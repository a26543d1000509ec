"""Stage 3b of a sweep with ``seeding:``: add seeds where a claim's verdict is still open.

After the grid's own seeds ran (``cemlab.sweeps.stages.execute.run_grid``), :func:`add_seeds`
goes through the planned looks (``SweepSpec.looks``): at look ``j`` it judges the sweep's claims
from the store on the first ``n_j`` seeds at the look's level (``SweepSpec.look_alphas``: the
file's ``seeding.alpha_split``, else ``alpha / K``; ``cemlab.report.looks.interim_look``,
``cemlab.report.stats.sequential``), and gives the cells of the comparisons still inconclusive the seeds
of look ``j + 1``. Those are ordinary trials of the sweep file (same ids and config hashes as if
the file listed the seeds): decided from the store, run on Ray Tune, tracked in MLflow, resumable
and shown in the live table, through the same stages as the grid (``decide``, ``execute``). It
stops when nothing is open or at the last look.

The judging is the report's: ``cemlab sweep`` (``cemlab.cli``) hands in ``looker``
(``cemlab.report.looks.interim_look_store.sweep_look``), so the sweep layer never imports the report. Every look is recorded (``Invocation.looks``): index, seeds, level, open claims and cells, trials
asked for; ``record.finish`` writes them to ``summary.json``, and each is set on the parent run as
the tag ``cemlab.looks`` (JSON) as soon as it is made. A rerun reads the same store, so it makes the
same decisions and finds the trials they ask for done.
"""

from __future__ import annotations

import logging
from typing import Callable

from cemlab.sweeps.stages import execute, trial_actions
from cemlab.sweeps.stages.invocation import Invocation, record_tag
from cemlab.sweeps.sweepfile.schema import Trial

log = logging.getLogger("cemlab.sweeps")

#: The parent run's tag with the looks made so far (JSON list).
LOOKS_TAG = "cemlab.looks"


#: ``looker(inv, trials, overrides, j) -> (look as a dict, trials to add) | (None, [])``: look ``j``
#: judged from the store; None when an earlier look (replayed) left nothing open.
Looker = Callable[[Invocation, list, "list[str] | None", int], tuple]


def add_seeds(inv: Invocation, trials: list[Trial], overrides: list[str] | None = None,
              looker: Looker | None = None) -> None:
    """The looks of ``inv``'s sweep after its grid ``trials`` ran (module docstring); nothing for a
    sweep without ``seeding`` (or one look at this scale)."""
    spec = inv.spec
    looks = spec.looks(inv.scale, trials)
    if spec.seeding is None or len(looks) < 2:
        return
    if looker is None:   # cemlab sweep --no-seeding, or a caller that hands in no judge
        log.warning("%s declares seeding, but no judge was handed in (cemlab sweep --no-seeding): the grid's own "
                    "seeds only; the report judges at look 0's level (alpha %.4g) all the same", spec.name,
                    spec.look_alphas(inv.scale, trials)[0])
        return
    for j, seeds in enumerate(looks):
        look, todo = looker(inv, trials, overrides, j)
        if look is None:   # an earlier look (replayed from the store) left nothing open
            return
        inv.looks.append(look)
        _tag(inv)
        log.info("look %d of %s (seeds %s, alpha %.4g): %d claim condition(s) open, %d cell(s) get %d trial(s)",
                 j, spec.name, seeds, look["alpha"], len(look["open_claims"]), len(look["open_cells"]), len(todo))
        if not todo:
            return
        execute.run_grid(inv, trial_actions.decide_grid(inv, todo))


def _tag(inv: Invocation) -> None:
    """The looks so far on the parent run (``LOOKS_TAG``), cells shortened when the tag would be long."""
    record_tag(inv, LOOKS_TAG, inv.looks, lambda looks: [{**lk, "open_cells": len(lk["open_cells"])} for lk in looks])
