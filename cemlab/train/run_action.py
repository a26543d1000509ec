"""What to do with one run config, given the MLflow store in use now and the local runs folder.

The store is the record; the checkpoint folder (``state.json``, ``last.ckpt``, ``metrics.jsonl``)
is a cache of it. :func:`decide` is the one place that turns the two into an action, and both
``cemlab train --resume`` (``cemlab.train.run.train``) and the sweep driver
(``cemlab.sweeps.stages.trial_actions``) call it:

``reuse``   the current store holds an active (not deleted) run with this config hash and a
            result (finished, or diverged): nothing runs; the run is that one.
``record``  the store holds no such run, but the runs folder holds a finished result whose whole
            record is kept locally (``state.json`` with its result, the metric history in
            ``metrics.jsonl``): :func:`record_from_local` writes it into the current store as a
            new run (params, tags, config, metric history, local artifacts), tagged with the
            tracking URI and run id it came from; nothing is trained. This is what happens after
            moving to another tracking server, deleting a run in the MLflow UI, or resetting
            the database.
``resume``  the store holds the run the checkpoint points to, unfinished: training continues
            from the checkpoint into that run.
``run``     anything else: train (from the checkpoint, when there is one, into a new run; from
            scratch when the local result cannot be recorded).

``state.json`` names the store it was written for (``store``: tracking URI and experiment id);
run ids are UUIDs, so a run id of one store is never found in another, and the decision asks the
store rather than comparing URIs (a local server on the same database gets a new port each time).

MLflow is imported inside the function that writes metrics with it, so ``cemlab sweep``, which
imports this module, refuses a bad sweep file without loading MLflow.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from cemlab.config import flatten
from cemlab.tracking import conventions, mlflow_run as mr, outcomes, schema, store
from cemlab.tracking.store import best_run, find_runs_by_hash, run_status
from cemlab.train import checkpoint as ckpt
from cemlab.train.result import RunResult

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

    from cemlab.config import RunConfig

log = logging.getLogger("cemlab.train")

REUSE, RECORD, RESUME, RUN = "reuse", "record", "resume", "run"
#: Metric history kept beside the checkpoint: one JSON object per line, {"key", "value", "step", "timestamp"}.
METRICS_NAME = "metrics.jsonl"
#: Local files logged as the run's artifacts when a result is recorded into a store (besides config.yaml).
ARTIFACTS_DIR = "artifacts"


@dataclass
class Decision:
    """:func:`decide`'s answer; ``run``: the store's run (reuse, resume); ``reason``: one line why."""

    action: str
    run: "Run | None" = None
    state: dict[str, Any] | None = None
    reason: str = ""


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """The metric history kept in ``folder/metrics.jsonl``, one entry per (key, step) (a value
    logged again after a resume replaces the earlier one); a torn last line is skipped."""
    path = Path(folder) / METRICS_NAME
    if not path.is_file():
        return []
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        try:
            m = json.loads(line)
            out[(m["key"], int(m["step"]))] = m
        except (ValueError, KeyError, TypeError):
            continue
    return list(out.values())


def append_metrics(folder: Path, metrics: list) -> None:
    """Append MLflow ``Metric`` objects to ``folder/metrics.jsonl`` (called before each write to the store)."""
    if not metrics:
        return
    lines = "".join(json.dumps({"key": m.key, "value": m.value, "step": m.step, "timestamp": m.timestamp}) + "\n"
                    for m in metrics)
    with open(Path(folder) / METRICS_NAME, "a") as fh:
        fh.write(lines)


def clear_metrics(folder: Path) -> None:
    """A new run starts its history afresh."""
    (Path(folder) / METRICS_NAME).unlink(missing_ok=True)


def local_record_gap(folder: Path, state: dict[str, Any] | None) -> str | None:
    """None when the runs folder holds the whole record of a result (see the module docstring),
    else what is missing."""
    if not state or not state.get("result"):
        return "no result in state.json"
    result = state["result"]
    if result.get("status") not in outcomes.RESULTS:
        return f"the local result's status is {result.get('status')!r}"
    kept = {m["key"] for m in read_metrics(folder)}
    if not kept:
        return f"no metric history in {Path(folder) / METRICS_NAME} (written by an older cemlab)"
    missing = sorted(k for k in (result.get("metrics") or {}) if "/" in k and k not in kept)
    if missing:
        return f"the metric history lacks {', '.join(missing[:3])}"
    return None


def _active_run(client: "MlflowClient", run_id: str | None) -> "Run | None":
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except Exception as e:  # not in this store (another server, a reset database)
        if is_connection_error(e):
            raise
        return None
    return run if run.info.lifecycle_stage == "active" else None


def is_connection_error(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)) or \
        "Max retries exceeded" in text or "Connection refused" in text


def decide(client: "MlflowClient", config_hash: str, folder: Path, state: dict[str, Any] | None = None,
           runs: "list[Run] | None" = None, own_run_first: bool = False) -> Decision:
    """The action for the config ``config_hash`` (see the module docstring). ``state``: the
    folder's ``state.json`` (read here when None); ``runs``: the store's active runs of the hash,
    newest first, when the caller has searched already. ``own_run_first``: the run the folder
    names, when the store holds it, is reused or resumed before any other run of the hash is
    looked at (``cemlab train --resume`` continues its own checkpoint; a sweep reuses any result)."""
    if state is None and Path(folder).is_dir():
        state = ckpt.read_state(Path(folder))
    if runs is None:
        runs = find_runs_by_hash([config_hash], client)[config_hash]
    own_id = (state or {}).get("run_id")
    own = (next((r for r in runs if r.info.run_id == own_id), None) or _active_run(client, own_id)) if own_id else None
    if own is not None and own_run_first:
        if run_status(own) in outcomes.RESULTS:
            return Decision(REUSE, own, state, f"the store holds this folder's run {own_id} with a result")
        return Decision(RESUME, own, state, f"continuing run {own_id}")
    done = best_run(runs, outcomes.RESULTS)
    if done is not None:
        return Decision(REUSE, done, state, f"the store holds run {done.info.run_id} with a result")
    if state and state.get("result"):
        gap = local_record_gap(folder, state)
        if gap is None:
            return Decision(RECORD, None, state, f"the store lacks run {own_id}; its result is kept in {folder}")
        return Decision(RUN, None, None, f"the store lacks run {own_id} and the local result cannot be recorded "
                                         f"({gap}): training again")
    if own is not None:
        return Decision(RESUME, own, state, f"continuing run {own_id}")
    if own_id:
        return Decision(RUN, None, state, f"run {own_id} is not in this store (or deleted); logging into a new run")
    return Decision(RUN, None, state, "no run of this config yet")


def store_identity(uri: str, experiment_id: str | None) -> dict[str, Any]:
    """What ``state.json`` records about the store its run lives in."""
    return {"tracking_uri": uri, "experiment_id": experiment_id}


def record_from_local(client: "MlflowClient", cfg: "RunConfig", folder: Path, state: dict[str, Any], uri: str,
                      parent_run_id: str | None = None, role: str | None = None) -> RunResult:
    """Write the result kept in ``folder`` into the store as a new run, without training (see the
    module docstring); update ``state.json`` to point to it. Returns the result with the new run
    id and ``outcome="recorded"``."""
    from mlflow.entities import Metric

    result = RunResult.from_dict(state["result"])
    parent = parent_run_id or cfg.tracking.parent_run_id
    experiment_id = store.ensure_experiment(cfg.tracking.experiment, client)
    tags = mr.run_tags(cfg, role=role or ("trial" if parent else "train"), parent_run_id=parent)
    origin_uri = (state.get("store") or {}).get("tracking_uri") or state.get("tracking_uri") or ""
    tags[schema.RECORDED_FROM_URI] = origin_uri
    tags[schema.RECORDED_FROM_RUN] = str(state.get("run_id") or "")
    name = cfg.tracking.run_name or result.run_name or mr.run_name(cfg)
    # the original's system tags and description, kept in state.json (made afresh for older folders)
    system = state.get("system_tags") or conventions.system_tags(
        cfg, name, conventions.description(cfg, params=result.params, budget=(state.get("plan") or {}).get("budget")))
    run_id = mr.create_run(client, experiment_id, name, {**system, **tags})
    mr.log_params(client, run_id, flatten(cfg))
    mr.log_config(client, run_id, cfg)
    history = [Metric(m["key"], float(m["value"]), int(m.get("timestamp") or time.time() * 1000), int(m["step"]))
               for m in read_metrics(folder)]
    for i in range(0, len(history), mr.MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=history[i : i + mr.MAX_METRICS_PER_BATCH])
    artifacts = Path(folder) / ARTIFACTS_DIR
    if artifacts.is_dir() and any(artifacts.iterdir()):
        client.log_artifacts(run_id, str(artifacts))
    extra = {schema.DIVERGED_STEP: str(result.diverged_step)} if result.diverged_step else None
    mr.finish_run(client, run_id, result.status, extra)
    result.run_id, result.tracking_uri, result.outcome = run_id, uri, "recorded"
    new_state = {**state, "run_id": run_id, "tracking_uri": uri, "store": store_identity(uri, experiment_id),
                 "recorded_from": {"tracking_uri": origin_uri, "run_id": state.get("run_id")},
                 "result": result.to_dict()}
    ckpt.write_state(Path(folder), new_state)
    log.info("%s: recorded from local state in %s as run %s (was run %s in %s); not trained", name, folder, run_id,
             state.get("run_id"), origin_uri or "?")
    return result


def result_from_run(run: "Run", state: dict[str, Any] | None, uri: str) -> RunResult:
    """The result of a run the store already holds (``outcome="reused"``): the local result when
    it belongs to that run, else what the run's tags and metrics say."""
    local = (state or {}).get("result")
    if local and local.get("run_id") == run.info.run_id:
        result = RunResult.from_dict(local)
    else:
        m = {k: float(v) for k, v in run.data.metrics.items()}
        diverged = run.data.tags.get(schema.DIVERGED_STEP)
        total = int(m.get(schema.TOTAL_STEPS, 0))
        result = RunResult(status=run_status(run), config_hash=run.data.tags.get(schema.CONFIG_HASH, ""),
                           run_name=run.info.run_name or "", run_id=run.info.run_id, steps=
                           int(diverged) - 1 if diverged else total, total_steps=total, metrics=m,
                           diverged_step=int(diverged) if diverged else None,
                           params=int(m[schema.PARAMS_TOTAL]) if schema.PARAMS_TOTAL in m else None)
    result.tracking_uri, result.outcome, result.seconds = uri, "reused", 0.0
    return result
