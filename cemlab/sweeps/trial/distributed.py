"""Multi-worker sweep trials: Lightning DDP on a Ray Train ``TorchTrainer`` inside the Tune trial.

A trial whose scale gives it ``resources.workers > 1`` runs as Ray's Train V2 pattern
(docs/cluster.md): the Tune function trainable (``cemlab.sweeps.trial.trainable.run_trial``)
builds a ``ray.train.torch.TorchTrainer`` with one Train worker per DDP rank and fits it
(:func:`fit_trial`). Passing a ``TorchTrainer`` to a ``Tuner`` is deprecated; this is its
replacement.

* **Workers.** Each Train worker asks for ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs
  and may sit on any node. Ray Train sets up the process group (gloo on CPU, NCCL on GPU) and
  ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; every worker then calls
  ``cemlab.train.run.train(..., ray_train=True)`` (:func:`worker_main`), which trains with Ray's
  Lightning strategy (``RayDDPStrategy``, ``RayLightningEnvironment``). The global batch stays
  ``train.batch_size`` = workers x ``micro_batch_size`` x accumulation, and the data order lines
  up with a single process's (``cemlab.train.data``).
* **Reports.** Only global rank zero talks to MLflow and reports. Its reports (each validation,
  then its result) travel through a Ray queue to the Tune trial, which hands them to
  ``tune.report``: Ray Train's own ``ray.train.report`` is a barrier every rank must join, while
  cemlab's run callback reports from rank zero only. The Tune trial itself needs no CPU (it
  waits for the Train run); the sweep runner limits how many trials run at once to what the
  cluster holds.
* **Checkpoints.** cemlab's own: ``<runs>/checkpoints/<config hash>/last.ckpt`` and
  ``state.json``, written by rank zero, read by every rank when resuming; so on several nodes
  the runs folder must be shared storage at the same path. Ray Train's storage for the run is
  ``<runs>/ray/<sweep>-<scale>-train/<trial id>``; it gets no checkpoints (one copy is enough),
  and the workers' output goes to the trial's log.
* **Failures.** Ray Train does not retry by itself (``FailureConfig(max_failures=0)``): a worker
  that fails, or a node that dies, fails the ``TorchTrainer`` and so the Tune trial, which Tune
  retries from the trial's last checkpoint like any other trial (the sweep's ``retries``).
  If the Tune trial ends (stopped by ASHA, or the driver is gone), the Train run it owns ends
  with it (Ray's actor fate sharing).

Ray Train and the training loop (``cemlab.train.run``, with Lightning) are imported inside the
functions of a multi-worker trial, so the sweep driver, which imports this module through
``cemlab.sweeps.trial.trainable``, loads neither.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cemlab.sweeps.trial import job as tj
from cemlab.sweeps.trial.tune_report import Reporter, deliver_to_tune

if TYPE_CHECKING:
    from cemlab.sweeps.sweepfile.schema import Trial
    from cemlab.sweeps.trial.job import TrialJob
    from cemlab.train.run import RunResult

#: Seconds the Tune trial waits on the report queue before it looks at the Train run again.
POLL_S = 0.5
#: The workers' ``print`` and logging go to the trial's log file (``trial_job.redirect_output``),
#: not through Ray Train's print patch and console log handler (which would write each line
#: twice); Ray Train passes these variables on to its controller and workers.
TRAIN_ENV = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0", "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0"}


def train_storage(job: "TrialJob") -> Path:
    """Ray Train's storage for the multi-worker trials of a sweep: ``<runs>/ray/<sweep>-<scale>-train``."""
    return Path(job.runs_dir) / "ray" / f"{job.sweep}-{job.scale}-train"


def fit_trial(trial: "Trial", job: "TrialJob") -> tuple["RunResult", list[str]]:
    """Run ``trial`` on ``trial.resources.workers`` Ray Train workers; return rank zero's result
    and the Ray node id of every rank. Rank zero's reports are passed to Tune as they come (see
    the module docstring). A failed Train run raises its error (Tune then retries the trial)."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.queue import Empty, Queue

    from cemlab.train.run import RunResult

    res = trial.resources
    gpu = res.gpus_per_worker > 0
    os.environ.update(TRAIN_ENV)
    queue = Queue(actor_options={"num_cpus": 0})
    trainer = TorchTrainer(
        worker_main,
        train_loop_config={"trial": trial, "job": job, "queue": queue},
        scaling_config=ray.train.ScalingConfig(
            num_workers=res.workers, use_gpu=gpu,
            resources_per_worker={"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if gpu else {})}),
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        run_config=ray.train.RunConfig(name=trial.trial_id, storage_path=str(train_storage(job)),
                                       failure_config=ray.train.FailureConfig(max_failures=0)),
    )
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as e:  # raised in the Tune trial's thread below
            failure.append(e)

    thread = threading.Thread(target=fit, name=f"ray-train {trial.trial_id}", daemon=True)
    print(f"--- {trial.trial_id}: Ray Train run of {res.workers} workers ({res.cpus_per_worker:g} CPUs, "
          f"{res.gpus_per_worker:g} GPUs each), storage {train_storage(job) / trial.trial_id}", flush=True)
    thread.start()
    result: dict[str, Any] | None = None
    try:
        while True:
            running = thread.is_alive()
            try:
                kind, data = queue.get(timeout=POLL_S)
            except Empty:
                if running:
                    continue
                break  # the Train run has ended and everything it sent has been read
            if kind == "report":
                deliver_to_tune(data, trial.trial_id, final=False)
            elif kind == "result":
                result = data
    finally:
        queue.shutdown(force=True)
    if failure:
        raise failure[0]
    if result is None:
        raise RuntimeError(f"{trial.trial_id}: the Ray Train run ended without a result from rank zero")
    nodes = result.pop("nodes")
    return RunResult.from_dict(result), nodes


def worker_main(config: dict[str, Any]) -> None:
    """One Ray Train worker (one DDP rank) of a multi-worker trial."""
    import ray.train

    from cemlab.train.run import train

    trial, job, queue = config["trial"], config["job"], config["queue"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    os.environ.update(job.env())
    with tj.redirect_output(job.files.log(trial.trial_id)):
        try:
            nodes = _gather_nodes()
            print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} trial {trial.trial_id} rank {rank}/{world} "
                  f"pid {os.getpid()} node {nodes[rank]}", flush=True)
            cfg = tj.prepare_config(trial, job)
            folder = job.files.checkpoints(trial)
            fault = tj.set_fault(job, trial)
            reporter = None
            if rank == 0:
                reporter = Reporter(trial, folder, fault, job.files.fault_counter(trial.trial_id), deliver=lambda p: queue.put(("report", p)))
            result = train(cfg, tracking_uri=job.tracking_uri, parent_run_id=job.parent_run_id, report=reporter,
                           resume=True, progress_bar=False, role="trial", ray_train=True)
            if rank == 0:
                queue.put(("result", {**result.to_dict(), "nodes": nodes}))
        except BaseException:
            traceback.print_exc()   # into the trial's log
            raise


def _gather_nodes() -> list[str]:
    """The Ray node id of every rank, in rank order (one collective over the process group)."""
    import ray
    import torch.distributed as dist

    mine = ray.get_runtime_context().get_node_id()
    nodes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, mine)
    return [str(n) for n in nodes]
