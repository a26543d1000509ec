"""One cemlab run in MLflow: its readable name, tags, params, config artifact, buffered metrics,
parent/child nesting and terminal status.

Everything goes through an explicit ``MlflowClient`` for an explicit tracking URI (never the
global ``mlflow.*`` fluent state), so that a Ray trial, a DDP rank or a test can log into the store
it was given and nothing else. Only the process that owns a run (global rank zero) logs into it;
the training code enforces that. Store location, clients and experiments: ``cemlab.tracking.store``.

Status conventions (``cemlab.status`` tag, see :mod:`cemlab.tracking.schema`, and MLflow's own run
status beside it):

============  ===================  ====================================================
cemlab        MLflow               meaning
============  ===================  ====================================================
running       RUNNING              training (or killed hard before it could say so)
finished      FINISHED             trained to the end, test metrics logged
diverged      FINISHED             stopped on a NaN/inf loss at ``cemlab.diverged_step``: a result
failed        FAILED               an error; its type and message are in ``cemlab.error``
interrupted   KILLED               stopped by Ctrl-C / SIGTERM; ``cemlab train --resume`` continues it
stopped       FINISHED             stopped early by a sweep's scheduler (ASHA) at ``cemlab.stopped_step``:
                                   a result (its last validation), not a failure
============  ===================  ====================================================

A run that is reopened (:func:`reopen_run`, to resume it) loses its ``cemlab.error`` tag: the
error belonged to the attempt that failed, and the resumed attempt sets it again if it fails too.

MLflow is imported inside the functions that write to it, so ``cemlab plan``, which imports this
module, does not load MLflow.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import yaml

from cemlab.tasks import task_of
from cemlab.tracking import outcomes, schema

if TYPE_CHECKING:  # pragma: no cover
    from mlflow import MlflowClient

    from cemlab.config import RunConfig

#: MLflow's limits for one ``log_batch`` call and for one param value.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_VALUE = 6000



# ---------------------------------------------------------------------------------------------
# Names and tags
# ---------------------------------------------------------------------------------------------


def size_label(cfg: "RunConfig") -> str:
    """The size a person recognises (``86m``, ``d128 L3``, ``d64``): the task's :meth:`~cemlab.tasks.Task.size_label`."""
    return task_of(cfg).size_label(cfg)


def model_kind(cfg: "RunConfig") -> str:
    """``llama``, ``cem-attn``, ``cem-mlp``, ``cem`` or ``gp-cem``."""
    return task_of(cfg).model_kind(cfg)


def run_name(cfg: "RunConfig") -> str:
    """A name a person can read in the dashboard, e.g. ``cem-attn T2 dplr 86m lr2e-3`` (the task's
    :meth:`~cemlab.tasks.Task.run_name`)."""
    return task_of(cfg).run_name(cfg)


def git_commit() -> str | None:
    """The commit of the cemlab checkout this code runs from (None outside a git checkout)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_tags(cfg: "RunConfig", role: str = "train", parent_run_id: str | None = None) -> dict[str, str]:
    """Tags of a training run: role, task, model kind, size, config hash, git commit, status, the
    parent (nesting) and the config's own ``tracking.tags`` (which win)."""
    tags = {
        schema.ROLE: role,
        schema.TASK: cfg.task,
        schema.MODEL_KIND: model_kind(cfg),
        schema.SIZE: size_label(cfg),
        schema.CONFIG_HASH: cfg.hash(),
        schema.STATUS: schema.STATUS_RUNNING,
    }
    commit = git_commit()
    if commit:
        tags[schema.GIT_COMMIT] = commit
    parent = parent_run_id or cfg.tracking.parent_run_id
    if parent:
        tags[schema.PARENT_RUN_ID] = parent
    tags.update({str(k): str(v) for k, v in cfg.tracking.tags.items()})
    return tags


# ---------------------------------------------------------------------------------------------
# Experiments and runs
# ---------------------------------------------------------------------------------------------


def create_run(client: "MlflowClient", experiment_id: str, name: str, tags: dict[str, str],
               parent_run_id: str | None = None) -> str:
    """Start a run (status RUNNING) and return its id. ``parent_run_id`` nests it under a parent
    (MLflow's ``mlflow.parentRunId`` tag); a sweep's parent run is made with this too, with
    ``tags[cemlab.role] = "sweep"``."""
    tags = dict(tags)
    if parent_run_id:
        tags[schema.PARENT_RUN_ID] = parent_run_id
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    return run.info.run_id


def start_run(client: "MlflowClient", experiment_id: str, name: str, tags: dict[str, str], cfg: "RunConfig",
              params: dict[str, Any]) -> str:
    """A new run of ``cfg`` with its tags, ``params`` and config file; its id. When logging them
    fails, the half-made run is discarded (:func:`discard_run`) before the error goes on, so no
    attempt leaves a run that the next one would not continue: one run per config."""
    run_id = create_run(client, experiment_id, name, tags)
    try:
        log_params(client, run_id, params)
        log_config(client, run_id, cfg)
    except BaseException:
        discard_run(client, run_id)
        raise
    return run_id


def discard_run(client: "MlflowClient", run_id: str) -> None:
    """A run whose creation failed half-way (before any training logged into it): marked failed and
    deleted (MLflow keeps it restorable), so that the retried attempt's run is the config's only
    one. Best effort: when the store does not answer, the sweep's store check names the stray run."""
    import contextlib

    with contextlib.suppress(Exception):
        finish_run(client, run_id, schema.STATUS_FAILED, {schema.ERROR: "its creation failed; the retry made a new run"})
    with contextlib.suppress(Exception):
        client.delete_run(run_id)


def log_params(client: "MlflowClient", run_id: str, params: dict[str, Any]) -> None:
    """Log params in batches within MLflow's limits (long values are cut, with a marker)."""
    from mlflow.entities import Param

    items = []
    for k, v in params.items():
        text = "None" if v is None else str(v)
        if len(text) > MAX_PARAM_VALUE:
            text = text[: MAX_PARAM_VALUE - 12] + "...[cut]"
        items.append(Param(k, text))
    for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])


def config_yaml(cfg: "RunConfig") -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def log_config(client: "MlflowClient", run_id: str, cfg: "RunConfig") -> None:
    """The resolved config as the ``config.yaml`` artifact (loadable with ``load_run_config``)."""
    client.log_text(run_id, config_yaml(cfg), schema.CONFIG_ARTIFACT)


def finish_run(client: "MlflowClient", run_id: str, status: str, extra_tags: dict[str, str] | None = None) -> None:
    """Set ``cemlab.status`` (and any extra tags), then MLflow's terminal status for it."""
    for k, v in {schema.STATUS: status, **(extra_tags or {})}.items():
        client.set_tag(run_id, k, str(v))
    client.set_terminated(run_id, status=outcomes.MLFLOW_STATUS.get(status, "FAILED"))


def reopen_run(client: "MlflowClient", run_id: str) -> None:
    """Mark a run RUNNING again (resuming it after a crash, a failure or an interruption), without
    the ``cemlab.error`` of an earlier attempt: a retried run that then succeeds has no error."""
    if schema.ERROR in client.get_run(run_id).data.tags:
        client.delete_tag(run_id, schema.ERROR)
    client.update_run(run_id, status="RUNNING")
    client.set_tag(run_id, schema.STATUS, schema.STATUS_RUNNING)


# ---------------------------------------------------------------------------------------------
# Buffered metrics
# ---------------------------------------------------------------------------------------------


class MetricBuffer:
    """Collects metrics and writes them with ``log_batch`` (one database round trip per flush, not
    one per value). ``flush_every_s`` bounds how stale the store can get.

    On a resumed run, ``skip_logged(keys)`` first reads how far each metric's history already goes,
    and values at or below that step are dropped: the steps replayed after a restart from a
    checkpoint (which recompute the same values) are then logged once."""

    def __init__(self, client: "MlflowClient", run_id: str, flush_every_s: float = 10.0,
                 on_flush: "Callable[[list], None] | None" = None):
        self.client, self.run_id = client, run_id
        self.on_flush = on_flush  # sees every batch before the store does (the local copy of the history)
        self.flush_every_s = flush_every_s
        self._pending: list = []
        self._last_flush = time.monotonic()
        self._logged_upto: dict[str, int] = {}

    def skip_logged(self, keys: Iterable[str] | None = None) -> None:
        run = self.client.get_run(self.run_id)
        for key in keys if keys is not None else run.data.metrics:
            history = self.client.get_metric_history(self.run_id, key)
            if history:
                self._logged_upto[key] = max(int(m.step) for m in history)

    def add(self, key: str, value: float, step: int) -> None:
        if step <= self._logged_upto.get(key, -1):
            return
        from mlflow.entities import Metric

        self._pending.append(Metric(key, float(value), int(time.time() * 1000), int(step)))

    def add_many(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.add(k, v, step)

    def maybe_flush(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if self.on_flush is not None:
            self.on_flush(pending)
        for i in range(0, len(pending), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=pending[i : i + MAX_METRICS_PER_BATCH])
        self._last_flush = time.monotonic()
