"""What runs inside one Ray Tune trial: a single ``cemlab.train.run.train`` call, set up for a sweep
(or, for a trial of several workers, a Ray Train run whose every worker makes that call:
``cemlab.sweeps.trial.distributed``).

The driver (``cemlab.sweeps.stages.execute``) ships a ``TrialJob`` (``cemlab.sweeps.trial.job``) to every trial with
``tune.with_parameters``; the Tune config of a trial only names it (``{"trial_id": ...}`` for a
grid, ``{"lr": ...}`` for an Optuna-searched cell). :func:`run_trial` then

1. resolves the ``Trial`` (``TrialJob.resolve``) and sets the
   environment explicitly: Ray trials start in a temporary directory, possibly on another node, so
   the runs folder, the sweeps folder and the MLflow URL travel in the job, as absolute paths;
2. sends the process's stdout, stderr and logging to ``<runs>/logs/<sweep>-<scale>/<trial>.log``
   (``trial_job.redirect_output``; the sweep's output stays one table; the log path is printed
   when a trial fails);
3. changes only fields that the config hash leaves out (``trial_job.prepare_config``: torch threads =
   the trial's CPUs, no progress bar, the accelerator its resources ask for, the checkpoint and
   data cache folders), so the trial keeps the hash of its grid cell;
4. holds an exclusive lock on the trial's checkpoint folder while training
   (``cemlab.sweeps.trial.lock``), so that two sweeps
   sharing a trial (the Llama baselines) never train it at the same time: the second waits, and
   ``train(resume=True)`` then returns the first one's result without training, reported as
   ``waited`` with the first sweep's parent run (``cemlab_waited_on``);
5. calls ``train(..., resume=True)``: a retried trial (Tune's ``FailureConfig``) or one rerun
   after the driver died continues from its last checkpoint and logs into the same MLflow run.
   With ``resources.workers > 1`` every Ray Train worker calls it (``distributed.fit_trial``);
   rank zero's reports reach Tune through this trial.

Reports to Tune (``cemlab.sweeps.trial.tune_report``): every validation before the last step (``training_iteration`` counts them; ASHA
compares trials on them), then one final report with ``cemlab_status`` (finished | diverged), the
run id, the test metrics and the Ray node of every rank (``cemlab_nodes``). When the scheduler
stops a trial, Ray ends its reporting thread with ``SystemExit`` inside ``tune.report``;
``deliver_to_tune`` turns that into ``TrialStopped``, so that ``train`` flushes the run's
metrics on its way out (it marks the run failed, which is not the last word: once Ray has ended
the trial's process, the driver marks the run ``stopped``).

Test hook (fault injection, never part of a config or its hash): ``TrialJob.faults`` maps a trial
id (a glob pattern) to ``{"times": N, "at_report": K}``: the K-th report of an attempt raises
``InjectedFault``, for the first N attempts (``times: -1``: every attempt); or to
``{"nan_at_step": S}``: the training loss of step S is NaN (the training module's own hook,
``CEMLAB_INJECT_NAN_STEP``, set for that trial's process only), so the trial diverges; or to
``{"leak_mb": M, "times": N, "at_report": K}``: the K-th report of the first N attempts leaks M MiB
that the process keeps, for the worker's memory limit to act on; or to ``{"hold_s": S, "at_report":
K}``: the K-th report sleeps S seconds, so the trial stays running cheaply. The driver
fills it from the environment variable ``CEMLAB_SWEEP_FAULTS`` (JSON); attempts are counted in
files under ``<runs>/logs/<sweep>-<scale>/faults/``.

The training loop (``cemlab.train.run``, with Lightning) is imported inside the trial, so the sweep
driver, which imports this module to hand it to Tune, does not load Lightning.

A grid's trials run in warm workers: Tune reuses a slot's worker process for the next trial
(``reuse_actors``, set in ``cemlab.sweeps.stages.execute``), so the process start and the imports
(seconds per trial) are paid once per slot. Each trial runs inside ``trial_job.trial_scope``, which
gives the next trial the state a fresh process has; a reused worker's trial is bit-identical to a
fresh one (``tests/test_sweep_reuse.py``). While a trial trains and tests, its worker holds to a
memory limit (``cemlab.sweeps.trial.memory``): over it, the worker ends itself and the trial is
retried on a fresh one. A trial's stages are timed (``cemlab.timing``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from typing import Any

import ray

from cemlab import timing
from cemlab.lazy import frozen_imports
from cemlab.sweeps.trial import memory
from cemlab.sweeps.trial.distributed import fit_trial
from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.sweeps.trial.job import TrialJob, prepare_config, redirect_output, set_fault, trial_scope
from cemlab.sweeps.trial.lock import trial_lock
from cemlab.sweeps.trial.tune_report import (NODES_KEY, RESUMED_KEY, SECONDS_KEY, STATUS_KEY, WAITED_ON_KEY, Reporter,
                                       TrialStopped, send)
from cemlab.tracking import schema
from cemlab.tracking.store import get_client


_fresh = True  # no trial has run in this process yet


def run_trial(config: dict[str, Any], job: TrialJob) -> None:
    """The Tune function trainable of a sweep (see the module docstring)."""
    global _fresh
    t0 = time.time()
    trial = job.resolve(config)
    with trial_scope():  # a reused worker: what this trial changes is undone for the next one
        os.environ.update(job.env())
        timing.set_trial(trial.trial_id)
        timing.set_trial_start(timing.process_start() if _fresh else t0)
        if _fresh:  # the first trial of this worker process: its start counts for this trial
            timing.record("worker start", timing.process_start(), t0)
            _fresh = False
        try:
            with redirect_output(job.files.log(trial.trial_id)):
                try:
                    _run(trial, job)
                except TrialStopped:
                    sys.exit(0)  # Ray's runner thread takes exit code 0 as a graceful end, not an error
                except BaseException:
                    traceback.print_exc()  # into the trial's log, which the sweep names when the trial fails
                    raise
        finally:
            timing.record("trial process", t0)
            timing.flush()
            timing.set_trial(None)


def _run(trial: Trial, job: TrialJob) -> None:
    with timing.stage("imports"), frozen_imports():  # out of the collector's way (cemlab.lazy)
        from cemlab.train.run import train

    node = ray.get_runtime_context().get_node_id()
    print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} (config {trial.config_hash}) "
          f"pid {os.getpid()} node {node}", flush=True)
    cfg = prepare_config(trial, job)
    folder = job.files.checkpoints(trial)
    t0 = time.perf_counter()
    res = trial.resources
    guard = memory.guard_for(res.cpus_per_worker, res.gpus_per_worker) if res.workers == 1 else None
    with trial_lock(folder) as waited, _guarded(guard, trial.trial_id):
        if trial.resources.workers > 1:
            result, nodes = fit_trial(trial, job)
            reporter = Reporter(trial, folder, None, None)
        else:
            fault = set_fault(job, trial)
            reporter = Reporter(trial, folder, fault, job.files.fault_counter(trial.trial_id))
            result = train(cfg, tracking_uri=job.tracking_uri, parent_run_id=job.parent_run_id, report=reporter,
                           resume=True, progress_bar=False, role="trial")
            nodes = [node]
    reporter.run_id = result.run_id or reporter.run_id
    reporter.total_steps = result.total_steps
    status, extra = result.status, {}
    if result.outcome == "recorded":
        status = "recorded"
        line = f"recorded from local state as run {result.run_id}; not trained"
    elif result.outcome == "reused":
        status = "waited" if waited else "reused"
        other = _parent_of(job.tracking_uri, result.run_id)
        extra[WAITED_ON_KEY] = other
        line = (f"{status}: run {result.run_id} of sweep parent run {other or '?'} has the result; not trained")
    else:
        line = f"{result.status} after {result.steps}/{result.total_steps} steps"
    print(f"--- trial {trial.trial_id}: {line} in {time.perf_counter() - t0:.1f}s (run {result.run_id})", flush=True)
    send({**result.metrics, "step": result.steps}, reporter, final=True,
         extra={STATUS_KEY: status, SECONDS_KEY: result.seconds, RESUMED_KEY: int(result.resumed),
                NODES_KEY: ",".join(nodes), **extra})


@contextlib.contextmanager
def _guarded(guard: memory.MemoryGuard | None, trial_id: str):
    """The worker's memory limit watched while the trial trains and tests, and no longer: the
    final report follows, and a worker that Tune holds for its next trial must not end."""
    if guard is None:
        yield
        return
    guard.arm(trial_id)
    try:
        yield
    finally:
        guard.disarm()


def _parent_of(uri: str, run_id: str | None) -> str:
    """The parent (sweep) run of ``run_id``, or "" when it has none or the store cannot say."""
    if not run_id:
        return ""

    try:
        return get_client(uri).get_run(run_id).data.tags.get(schema.PARENT_RUN_ID, "")
    except Exception:  # the result stands; the name of the other sweep is a courtesy
        return ""
