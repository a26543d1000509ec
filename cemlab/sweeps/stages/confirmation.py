"""Stage 3c of a sweep with ``confirmation:``: fresh seeds at each cell's chosen learning rates.

After the grid's own seeds (the *selection* seeds) ran and the bracketing steps
(``cemlab.sweeps.stages.bracketing``: at such a scale shared by compared cells) added their rates,
:func:`add_seeds` asks the judge handed in (``cemlab.report.looks.confirmation_look.sweep_confirm``:
the sweep layer never imports the report) which (cell, rate) pairs the union rule needs and how
many fresh seeds the scale's trial budget buys for them (``cemlab.sweeps.sweepfile.
confirmation_section``), and runs those trials as ordinary trials of the sweep file: decided from the
store, run on Ray Tune, tracked in MLflow, resumable and shown in the live table. The stage is
recorded (``Invocation.confirmation``), set on the parent run as the tag ``cemlab.confirmation`` and
written to ``summary.json``. A rerun reads the same selection seeds from the store, so it makes the
same choice and finds the trials done.
"""

from __future__ import annotations

import logging
from typing import Callable

from cemlab.sweeps.stages import execute, trial_actions
from cemlab.sweeps.stages.invocation import Invocation, record_tag
from cemlab.sweeps.sweepfile.schema import Trial

log = logging.getLogger("cemlab.sweeps")

#: The parent run's tag with the confirmation stage (JSON).
CONFIRMATION_TAG = "cemlab.confirmation"

#: ``confirmer(inv, trials, overrides) -> (stage as a JSON-able dict, trials to add) | (None, [])``.
Confirmer = Callable[[Invocation, list, "list[str] | None"], "tuple[dict | None, list]"]


def add_seeds(inv: Invocation, trials: list[Trial], overrides: list[str] | None = None,
              confirmer: Confirmer | None = None) -> None:
    """The confirmation stage of ``inv``'s sweep after its selection stage (module docstring);
    nothing where the scale has no ``confirmation.budget`` (or the command line gave the seeds)."""
    spec = inv.spec
    if spec.confirmation_budget(inv.scale, trials) is None:
        return
    if confirmer is None:   # cemlab sweep --no-seeding, or a caller that hands in no judge
        log.warning("%s declares confirmation, but no judge was handed in (cemlab sweep --no-seeding): the selection "
                    "seeds only; the report's tuned comparisons then have no seed to judge on", spec.name)
        return
    stage, todo = confirmer(inv, trials, overrides)
    if stage is None:
        return
    inv.confirmation = stage
    record_tag(inv, CONFIRMATION_TAG, {k: v for k, v in stage.items() if k != "cells"})
    log.info("confirmation of %s: %d (cell, rate) pairs x %d fresh seeds, %d extra seed(s) for %s: %d trial(s)",
             spec.name, stage["pairs"], stage["seeds"], len(stage["extra_seeds"]), stage["primary"], len(todo))
    if stage["seeds"] < 2:
        log.warning("%s: the budget buys %d fresh seed(s) per pair; a paired t-test needs two: raise "
                    "confirmation.budget.%s", spec.name, stage["seeds"], inv.scale)
    if todo:
        execute.run_grid(inv, trial_actions.decide_grid(inv, todo))
