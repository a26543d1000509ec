"""What a trial reports to Ray Tune, and how: :class:`Reporter` is the ``report`` callback handed
to ``cemlab.train.run.train``; it sends each validation before the last step (ASHA compares trials
on them), and the trial sends one final report with ``cemlab_status`` (finished | diverged |
recorded | reused | waited), the run id, the test metrics and the Ray node of every rank. The keys
below are read by the driver's progress table and outcome (``cemlab.sweeps.stages.progress``,
``cemlab.sweeps.stages.execute``).

When the scheduler stops a trial, Ray ends its reporting thread with ``SystemExit`` inside
``tune.report``; :func:`deliver_to_tune` turns that into :class:`TrialStopped`, so that ``train``
flushes the run's metrics on its way out.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from ray import tune

from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.train import checkpoint as ckpt

#: Keys of the final report (besides the run's metrics).
STATUS_KEY = "cemlab_status"       # finished | diverged | recorded | reused | waited
WAITED_ON_KEY = "cemlab_waited_on"  # the parent run of the sweep whose run a trial that waited got
RUN_ID_KEY = "cemlab_run_id"
STEP_KEY = "cemlab_step"
TOTAL_KEY = "cemlab_total_steps"
PID_KEY = "cemlab_pid"
SECONDS_KEY = "cemlab_seconds"
RESUMED_KEY = "cemlab_resumed"
NODES_KEY = "cemlab_nodes"   # comma-separated Ray node ids of the trial's ranks (rank order)

log = logging.getLogger("cemlab.sweeps")
_LEAKED: list[bytes] = []  # what the ``leak_mb`` fault hook leaks: never freed


class InjectedFault(RuntimeError):
    """A failure injected by the test hook (see the module docstring)."""


class TrialStopped(BaseException):
    """The scheduler (ASHA) stopped this trial: not an error, so not an ``Exception``."""


class Reporter:
    """The ``report`` callback handed to ``train``: forwards each validation before the last step
    to Tune with the trial's step and run id, applies the fault-injection hook, and handles the
    scheduler stopping the trial (see the module docstring). ``deliver``: where a report goes
    instead of ``tune.report`` in this process (rank zero of a Ray Train run hands it to the Tune
    trial through a queue)."""

    def __init__(self, trial: Trial, folder: Path, fault: dict[str, int] | None, fault_counter: Path | None,
                 deliver: Callable[[dict[str, Any]], None] | None = None):
        self.trial, self.folder = trial, folder
        self.fault, self.fault_counter = fault, fault_counter
        self.deliver = deliver
        self.calls = 0
        self.run_id: str | None = None
        self.total_steps: int | None = None

    def _state(self) -> None:
        if self.run_id is None:
            state = ckpt.read_state(self.folder) or {}
            self.run_id = state.get("run_id")
            self.total_steps = state.get("total_steps")

    def _maybe_fail(self) -> None:
        """The fault hook at this report: raise ``InjectedFault``, or with ``leak_mb`` leak that
        many MiB (kept by this module for the rest of the process, as a leaking library keeps it), or
        with ``hold_s`` sleep that many seconds (the trial stays running, cheaply)."""
        if self.fault and "hold_s" in self.fault and self.calls == int(self.fault.get("at_report", 1)):
            log.info("%s: held %s s at report %d (injected)", self.trial.trial_id, self.fault["hold_s"], self.calls)
            time.sleep(float(self.fault["hold_s"]))   # a trial that stays running (a test of concurrent drivers)
            return
        if (not self.fault or not {"times", "leak_mb"} & self.fault.keys()
                or self.calls != int(self.fault.get("at_report", 1))):
            return
        times = int(self.fault.get("times", 1))
        done = int(self.fault_counter.read_text()) if self.fault_counter.is_file() else 0
        if times >= 0 and done >= times:
            return
        self.fault_counter.parent.mkdir(parents=True, exist_ok=True)
        self.fault_counter.write_text(str(done + 1))
        if "leak_mb" in self.fault:
            _LEAKED.append(b"\x01" * (int(self.fault["leak_mb"]) << 20))  # touched: resident, not just reserved
            log.info("%s: leaked %s MiB at report %d (injected)", self.trial.trial_id, self.fault["leak_mb"], self.calls)
            return
        raise InjectedFault(f"injected failure {done + 1} of {self.trial.trial_id} at report {self.calls}")

    def __call__(self, metrics: dict[str, float]) -> None:
        self._state()
        step = int(metrics.get("step", 0))
        if any(k.startswith("test/") for k in metrics):
            return  # train()'s end-of-run report: run_trial sends the final one itself
        self.calls += 1
        self._maybe_fail()
        if self.total_steps is not None and step >= self.total_steps:
            return  # the last validation: the final report follows, after the test metrics
        send(metrics, self, final=False)


def send(metrics: dict[str, Any], reporter: Reporter, final: bool, extra: dict[str, Any] | None = None) -> None:
    """Report ``metrics`` with cemlab's keys: to the reporter's ``deliver``, else to Tune
    (:func:`deliver_to_tune`)."""
    payload = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    payload.update({STEP_KEY: int(metrics.get("step", 0)), TOTAL_KEY: int(reporter.total_steps or 0),
                    RUN_ID_KEY: reporter.run_id or "", PID_KEY: os.getpid()})
    payload.update(extra or {})
    if reporter.deliver is not None:
        reporter.deliver(payload)
    else:
        deliver_to_tune(payload, reporter.trial.trial_id, final)


def deliver_to_tune(payload: dict[str, Any], trial_id: str, final: bool) -> None:
    """``tune.report(payload)`` (in the Tune trial's process). A ``SystemExit`` from Tune means
    the trial is to stop: after the final report that is just the end; before it,
    :class:`TrialStopped` is raised."""
    try:
        tune.report(payload)
    except SystemExit:
        if final:
            return
        log.info("%s: stopped by the scheduler at step %s", trial_id, payload[STEP_KEY])
        raise TrialStopped(f"{trial_id} stopped by the scheduler at step {payload[STEP_KEY]}") from None
