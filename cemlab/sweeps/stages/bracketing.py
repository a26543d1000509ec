"""Stage 3a of a sweep with ``tuning:``: add learning rates beyond a cell's best edge (bracketing).

After the grid's own seeds ran (``cemlab.sweeps.stages.execute.run_grid``) and before the seed looks
(``cemlab.sweeps.stages.seeding``: the order is fixed, grid -> bracketing steps -> seed looks),
:func:`add_rates` makes the bracketing steps ``0, 1, ...`` of the scale (``SweepSpec.bracket_steps``).
At step ``k`` the report judges from the store which *families* (the cells equal but for lr and
seed) have their best learning rate at an end of the rates they have, and gives each the next rate
beyond that end at the grid's spacing (``SweepSpec.next_rate``: x ratio or / ratio, inside
``tuning.bounds``) for the grid's seeds. Those are ordinary trials of the sweep file (same ids and
config hashes as if the file listed the rate: the grid expanded with ``lr=[RATE]``): decided from
the store, run on Ray Tune, tracked in MLflow, resumable and shown in the live table, through the
same stages as the grid (``decide``, ``execute``). It stops when no family is at an edge with a
rate beyond it, or after the scale's ``max_steps``.

The judging is the report's: ``cemlab sweep`` (``cemlab.cli``) hands in ``bracketer``
(``cemlab.report.looks.interim_look_store.sweep_bracket``), so the sweep layer never imports the
report. Every step is recorded (``Invocation.brackets``); ``record.finish`` writes them to
``summary.json``, and each is set on the parent run as the tag ``cemlab.brackets`` (JSON) as soon as
it is made. A rerun reads the same store, so it makes the same decisions and finds the trials they
ask for done.
"""

from __future__ import annotations

import logging
from typing import Callable

from cemlab.sweeps.stages import execute, trial_actions
from cemlab.sweeps.stages.invocation import Invocation, record_tag
from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.sweeps.sweepfile.tuning_section import unbracketable

log = logging.getLogger("cemlab.sweeps")

#: The parent run's tag with the bracketing steps made so far (JSON list).
BRACKETS_TAG = "cemlab.brackets"

#: ``bracketer(inv, trials, overrides, step) -> (step as a JSON-able dict, trials to add) | (None, [])``:
#: bracketing step ``step`` judged from the store; None when there is nothing to judge.
Bracketer = Callable[[Invocation, list, "list[str] | None", int], "tuple[dict | None, list]"]


def add_rates(inv: Invocation, trials: list[Trial], overrides: list[str] | None = None,
              bracketer: Bracketer | None = None) -> None:
    """The bracketing steps of ``inv``'s sweep after its grid ``trials`` ran (module docstring);
    nothing where the scale brackets nothing. Command-line seeds do not turn it off (the added
    rates take the grid's seeds); an lr axis from the command line that cannot be bracketed does
    (``SweepSpec.bracket_steps``), and so does ``cemlab sweep --no-bracketing``, handing in no judge."""
    spec = inv.spec
    steps = spec.bracket_steps(inv.scale, trials)
    if steps == 0:
        if spec.bracket_steps(inv.scale):
            log.warning("%s declares tuning at %s, but %s", spec.name, inv.scale, unbracketable(spec, trials))
        return
    if bracketer is None:   # cemlab sweep --no-bracketing, or a caller that hands in no judge
        log.warning("%s declares tuning, but no judge was handed in (cemlab sweep --no-bracketing): the grid's "
                    "rates only; the report says which cells are not bracketed", spec.name)
        return
    for step in range(steps):
        look, todo = bracketer(inv, trials, overrides, step)
        if look is None:   # nothing to judge (an earlier step left every family interior)
            return
        inv.brackets.append(look)
        _tag(inv)
        log.info("bracketing step %d of %s: %d trial(s) to add", step, spec.name, len(todo))
        if not todo:
            return
        execute.run_grid(inv, trial_actions.decide_grid(inv, todo))


def _tag(inv: Invocation) -> None:
    """The steps so far on the parent run (``BRACKETS_TAG``), shortened when the tag would be long:
    each step's lists (families, trials) replaced by their lengths."""
    record_tag(inv, BRACKETS_TAG, inv.brackets, lambda steps: [
        {k: len(v) if isinstance(v, (list, dict)) else v for k, v in b.items()} for b in steps])
