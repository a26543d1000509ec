"""What became of a run: the one vocabulary of run outcomes.

Training writes an outcome into the run's ``cemlab.status`` tag; the sweep driver, ``cemlab plan``
and the report read it with the sets and the order defined here, so that all three agree on which
run of a config stands for it and whether the config still needs training.

=============  ===========================================================  ========  ==============
outcome        meaning                                                      a result  MLflow status
=============  ===========================================================  ========  ==============
finished       trained to its last step; final metrics logged               yes       FINISHED
diverged       the loss became NaN/inf; the step is in cemlab.diverged_step  yes       FINISHED
stopped        stopped early by the sweep's scheduler (ASHA): a result of    search    FINISHED
               a search, but its metrics are not final
running        training now (or died without saying so: then ``failed``)    no        RUNNING
interrupted    Ctrl-C / SIGTERM / a store that went away: resumable          no        KILLED
failed         raised an error; the error is in cemlab.error                 no        FAILED
=============  ===========================================================  ========  ==============
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

FINISHED = "finished"
DIVERGED = "diverged"
STOPPED = "stopped"
RUNNING = "running"
INTERRUPTED = "interrupted"
FAILED = "failed"

#: Every outcome, in order of preference (see :data:`PREFERENCE`).
ALL = (FINISHED, DIVERGED, STOPPED, RUNNING, INTERRUPTED, FAILED)

#: A result of its config: the config is never trained again (a diverged run is a result too).
RESULTS = (FINISHED, DIVERGED)
#: Results of a search (``search: optuna`` with ASHA) and what the report shows: a trial stopped
#: early by the scheduler answered the search's question, with metrics that are not final.
SEARCH_RESULTS = RESULTS + (STOPPED,)
#: Which of a config hash's runs stands for it: the newest run of the first outcome in this order.
PREFERENCE = ALL

#: The MLflow run status each outcome ends the run with.
MLFLOW_STATUS = {FINISHED: "FINISHED", DIVERGED: "FINISHED", STOPPED: "FINISHED", FAILED: "FAILED",
                 INTERRUPTED: "KILLED"}

T = TypeVar("T")


def outcome_from_mlflow(tag: str | None, mlflow_status: str | None) -> str:
    """A run's outcome from its ``cemlab.status`` tag and MLflow's own status. A run whose tag still
    says running after MLflow ended it died without saying so: failed. Without a tag, MLflow's
    status decides (FINISHED -> finished, RUNNING or SCHEDULED -> running, anything else -> failed)."""
    if tag == RUNNING and mlflow_status not in ("RUNNING", "SCHEDULED"):
        return FAILED
    if tag:
        return tag
    return {"FINISHED": FINISHED, "RUNNING": RUNNING, "SCHEDULED": RUNNING}.get(mlflow_status or "", FAILED)


def pick(runs: Iterable[T], outcome_of: Callable[[T], str], outcomes: tuple[str, ...] = PREFERENCE,
         fallback: bool = False) -> T | None:
    """The run (``runs`` newest first) with the most preferred outcome among ``outcomes`` (their
    order is the preference); with ``fallback``, the newest run of any outcome when none matches."""
    runs = list(runs)
    for outcome in outcomes:
        for run in runs:
            if outcome_of(run) == outcome:
                return run
    return runs[0] if fallback and runs else None
