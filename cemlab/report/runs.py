"""Reading cemlab's runs out of an MLflow store (read only).

Every run that carries a config-hash tag (``cemlab.config_hash``) is a candidate result for the
grid cell with that hash, whichever sweep (or plain ``cemlab train``) produced it: that is how the
Llama baselines shared by several figures are found once and reused. Sweep parent runs
(``cemlab.role=sweep``) are read separately: the report is logged as artifacts of the latest one.

The store is only read here, with one exception kept in ``publish_report``: the report's files are
logged to the sweep's parent run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from cemlab.tracking import schema

#: Preference when several runs share one config hash: a finished result wins over a diverged one
#: (also a result), then failed, then still running; within a status, the latest start wins.
STATUS_RANK = {
    schema.STATUS_FINISHED: 0,
    schema.STATUS_DIVERGED: 1,
    schema.STATUS_FAILED: 2,
    schema.STATUS_RUNNING: 3,
}

#: MLflow's own run status -> cemlab status, for runs without a ``cemlab.status`` tag.
_MLFLOW_STATUS = {"FINISHED": schema.STATUS_FINISHED, "FAILED": schema.STATUS_FAILED,
                  "KILLED": schema.STATUS_FAILED, "RUNNING": schema.STATUS_RUNNING,
                  "SCHEDULED": schema.STATUS_RUNNING}


@dataclass
class RunRecord:
    """The parts of one MLflow run that reports use."""

    run_id: str
    run_name: str
    experiment_id: str
    start_time: int
    status: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def config_hash(self) -> str | None:
        return self.tags.get(schema.CONFIG_HASH)


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else the project's store (``cemlab.tracking.store.tracking_uri``)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    try:
        from cemlab.tracking.store import tracking_uri
    except ImportError as e:  # the tracking helpers are not installed in this build
        raise RuntimeError(
            "no MLflow store given: set MLFLOW_TRACKING_URI or pass --tracking-uri "
            f"(cemlab.tracking.store is not available: {e})"
        ) from None
    return tracking_uri()


def store_is_absent(uri: str) -> bool:
    """True for a ``sqlite:`` URI whose database file does not exist: an empty store, which is
    reported as such instead of being created by the report."""
    if not uri.startswith("sqlite:"):
        return False
    path = urlparse(uri).path
    if uri.startswith("sqlite:////"):
        path = "/" + path.lstrip("/")
    elif uri.startswith("sqlite:///"):
        path = path[1:] if path.startswith("/") else path
    return not path or path == ":memory:" or not Path(path).exists()


class RunStore:
    """A read view of one MLflow store, with the trial runs indexed by config hash."""

    def __init__(self, tracking_uri: str):
        self.uri = tracking_uri
        self.absent = store_is_absent(tracking_uri)
        self._client = None
        self._runs: list[RunRecord] | None = None
        self._by_hash: dict[str, list[RunRecord]] | None = None
        self._history: dict[tuple[str, str], list[tuple[int, float]]] = {}

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _experiment_ids(self) -> list[str]:
        from mlflow.entities import ViewType

        ids, token = [], None
        while True:
            page = self.client.search_experiments(view_type=ViewType.ACTIVE_ONLY, page_token=token)
            ids += [e.experiment_id for e in page]
            token = page.token
            if not token:
                return sorted(ids)

    def _search(self, filter_string: str) -> list[RunRecord]:
        if self.absent:
            return []
        exp_ids = self._experiment_ids()
        out: list[RunRecord] = []
        for i in range(0, len(exp_ids), 50):  # the search API takes a bounded list of experiments
            token = None
            while True:
                page = self.client.search_runs(exp_ids[i:i + 50], filter_string=filter_string,
                                               max_results=1000, page_token=token)
                out += [_record(r) for r in page]
                token = page.token
                if not token:
                    break
        out.sort(key=lambda r: (r.start_time, r.run_id))
        return out

    def trial_runs(self) -> list[RunRecord]:
        """Every run with a config hash that is not a sweep's parent run."""
        if self._runs is None:
            runs = self._search(f"tags.`{schema.CONFIG_HASH}` LIKE '%'")
            self._runs = [r for r in runs if r.tags.get(schema.ROLE) != "sweep"]
            self._by_hash = {}
            for r in self._runs:
                self._by_hash.setdefault(r.config_hash, []).append(r)
        return self._runs

    def runs_for_hash(self, config_hash: str) -> list[RunRecord]:
        self.trial_runs()
        return list(self._by_hash.get(config_hash, []))

    def best_run(self, config_hash: str) -> RunRecord | None:
        """The run that stands for a grid cell (see ``STATUS_RANK``); None if there is none."""
        runs = self.runs_for_hash(config_hash)
        if not runs:
            return None
        return min(runs, key=lambda r: (STATUS_RANK.get(r.status, 9), -r.start_time, r.run_id))

    def latest_parent_run(self, sweep: str, scale: str | None = None) -> RunRecord | None:
        """The sweep's most recent parent run (``cemlab.role=sweep``), if any."""
        runs = self._search(f"tags.`{schema.ROLE}` = 'sweep' and tags.`{schema.SWEEP}` = '{sweep}'")
        if scale is not None:
            same = [r for r in runs if r.tags.get(schema.SCALE) == scale]
            runs = same or runs
        return runs[-1] if runs else None

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """A metric's history as sorted (step, value) pairs; the last value logged at a step wins."""
        if (run_id, key) not in self._history:
            points = sorted(self.client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
            by_step: dict[int, float] = {}
            for m in points:
                by_step[int(m.step)] = float(m.value)
            self._history[(run_id, key)] = sorted(by_step.items())
        return self._history[(run_id, key)]


def _record(run) -> RunRecord:
    tags = dict(run.data.tags)
    status = tags.get(schema.STATUS) or _MLFLOW_STATUS.get(run.info.status, schema.STATUS_FAILED)
    metrics = {k: float(v) for k, v in run.data.metrics.items()}
    # A run tagged finished whose main metric is not finite diverged at the very end.
    if status == schema.STATUS_FINISHED and any(
        k in metrics and not math.isfinite(metrics[k]) for k in (schema.TEST_PPL, schema.TEST_RMSE)
    ):
        status = schema.STATUS_DIVERGED
    return RunRecord(
        run_id=run.info.run_id,
        run_name=run.info.run_name or tags.get("mlflow.runName", ""),
        experiment_id=run.info.experiment_id,
        start_time=int(run.info.start_time or 0),
        status=status,
        tags=tags,
        params=dict(run.data.params),
        metrics=metrics,
    )
