"""Reading cemlab's runs out of an MLflow store (read only, cached): the read view that the report
and ``cemlab plan`` share.

Every run that carries a config-hash tag (``cemlab.config_hash``) is a candidate result for the
grid cell with that hash, whichever sweep (or plain ``cemlab train``) produced it: that is how the
Llama baselines shared by several figures are found once and reused. Finding runs by hash, their
status and which of several runs stands for a config are ``cemlab.tracking.store``'s rules (with a
run that ASHA stopped early counted as a result, after finished and diverged ones); this module adds
a cache (one store scan per report), metric histories and the sweep's parent run.

Sweeps with ``search: optuna`` sample each grid cell's learning rate: their runs carry the tag
``cemlab.search_cell`` (the id of the cell's trial in ``expand``) and are found by it, with the
sweep and scale tags (:meth:`RunStore.search_cell_runs`, one store scan for every cell); the
sweep layer turns them into sampled trials (``cemlab.sweeps.sweepfile.expand.sampled_trials``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from cemlab.tasks import TASKS
from cemlab.tracking import outcomes, schema
from cemlab.tracking import store as tracking_store


@dataclass
class RunRecord:
    """The parts of one MLflow run that reports use."""

    run_id: str
    run_name: str
    experiment_id: str
    start_time: int
    status: str
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def _test_metrics(task: str | None) -> list[str]:
    """The test metric of the task a run is tagged with (``cemlab.task``); of every task there is
    for a run without the tag or of a task this process does not know (its plugin not loaded)."""
    if task is not None and task in TASKS:
        return [TASKS.get(task).test_metric]
    return list(dict.fromkeys(t.test_metric for _, t in TASKS.items()))


def _record(run) -> RunRecord:
    status = tracking_store.run_status(run)
    metrics = {k: float(v) for k, v in run.data.metrics.items()}
    # A run tagged finished whose main metric (its task's test metric) is not finite diverged at the very end.
    if status == schema.STATUS_FINISHED and any(
        k in metrics and not math.isfinite(metrics[k]) for k in _test_metrics(run.data.tags.get(schema.TASK))
    ):
        status = schema.STATUS_DIVERGED
    return RunRecord(run_id=run.info.run_id, run_name=run.info.run_name or "", experiment_id=run.info.experiment_id,
                     start_time=int(run.info.start_time or 0), status=status, tags=dict(run.data.tags),
                     metrics=metrics)


def pick_run(records: list[RunRecord]) -> RunRecord | None:
    """The record that stands for a config: the newest of the most preferred outcome
    (``cemlab.tracking.outcomes.PREFERENCE``), else the newest of any; ``records`` are newest first."""
    return outcomes.pick(records, lambda rec: rec.status, fallback=True)


class RunStore:
    """A read view of one MLflow store: runs by config hash, histories, parent runs."""

    def __init__(self, tracking_uri: str, client=None):
        self.uri = tracking_uri
        #: a sqlite store whose file does not exist: empty, and not created by reading it
        self.absent = not tracking_store.store_exists(tracking_uri)
        self._client = client  # an MlflowClient on tracking_uri to use, or None: made on first use
        self._by_hash: dict[str, list] = {}       # hash -> MLflow runs, newest first
        self._records: dict[str, RunRecord] = {}  # run id -> record
        self._history: dict[tuple[str, str], list[tuple[int, float]]] = {}
        #: (sweep, scale, search cell) -> config hash -> records, newest first; None until scanned
        self._search_cells: dict[tuple[str, str, str], dict[str, list[RunRecord]]] | None = None

    @property
    def client(self):
        if self._client is None:
            self._client = tracking_store.get_client(self.uri)
        return self._client

    def prefetch(self, hashes: Iterable[str]) -> None:
        """Look up the runs of all these config hashes at once (one store scan for many)."""
        new = [h for h in dict.fromkeys(hashes) if h not in self._by_hash]
        if not new:
            return
        found = {h: [] for h in new} if self.absent else tracking_store.find_runs_by_hash(new, self.client)
        for h, runs in found.items():
            runs = [r for r in runs if r.data.tags.get(schema.ROLE) != "sweep"]
            self._by_hash[h] = runs
            for r in runs:
                self._records.setdefault(r.info.run_id, _record(r))

    def runs_for_hash(self, config_hash: str) -> list[RunRecord]:
        self.prefetch([config_hash])
        return [self._records[r.info.run_id] for r in self._by_hash[config_hash]]

    def best_run(self, config_hash: str) -> RunRecord | None:
        """The run that stands for a grid cell: the newest one of the most preferred status
        (``cemlab.tracking.outcomes.PREFERENCE``, then any)."""
        return pick_run(self.runs_for_hash(config_hash))

    def search_cell_runs(self, sweep: str, scale: str, cell_id: str) -> dict[str, list[RunRecord]]:
        """The runs of one ``search: optuna`` grid cell (tag ``cemlab.search_cell`` = ``cell_id``,
        with the sweep's and scale's tags), by config hash (one per sampled learning rate), newest
        first; sorted by hash. The first call scans the store once for every search cell."""
        if self._search_cells is None:
            self._search_cells = {}
            if not self.absent:
                exp_ids = tracking_store.all_experiment_ids(self.client)
                runs = tracking_store.search_runs(self.client, exp_ids, f"tags.`{schema.SEARCH_CELL}` LIKE '%'") \
                    if exp_ids else []
                for run in sorted(runs, key=lambda r: r.info.start_time or 0, reverse=True):
                    tags = run.data.tags
                    if tags.get(schema.ROLE) == "sweep":
                        continue
                    key = (tags.get(schema.SWEEP, ""), tags.get(schema.SCALE, ""), tags[schema.SEARCH_CELL])
                    rec = self._records.setdefault(run.info.run_id, _record(run))
                    self._search_cells.setdefault(key, {}).setdefault(tags.get(schema.CONFIG_HASH, ""), []).append(rec)
        found = self._search_cells.get((sweep, scale, cell_id), {})
        return {h: found[h] for h in sorted(found)}

    def has_runs_for(self, trial) -> bool:
        """Whether a grid trial (``cemlab.sweeps.sweepfile.schema.Trial``) has any run: by its config hash, or
        for a ``search: optuna`` cell, any run of the cell."""
        if self.runs_for_hash(trial.config_hash):
            return True
        return getattr(trial, "search", None) is not None and \
            bool(self.search_cell_runs(trial.sweep, trial.scale, trial.trial_id))

    def record(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    def has_runs(self) -> bool:
        """Whether the store holds any run at all."""
        if self.absent:
            return False
        ids = [e.experiment_id for e in self.client.search_experiments(max_results=1000)]
        return bool(ids) and bool(self.client.search_runs(ids[:100], max_results=1))

    def latest_parent_run(self, sweep: str, scale: str | None = None) -> RunRecord | None:
        """The sweep's most recent parent run (``cemlab.role=sweep`` in ``cemlab/<sweep>``), at
        ``scale`` when it has one there."""
        if self.absent:
            return None
        exp = self.client.get_experiment_by_name(f"cemlab/{sweep}")
        if exp is None:
            return None
        runs = self.client.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.ROLE}` = 'sweep'",
                                       max_results=1000, order_by=["attributes.start_time DESC"])
        runs = [r for r in runs if r.data.tags.get(schema.SWEEP, sweep) == sweep]
        same = [r for r in runs if scale is None or r.data.tags.get(schema.SCALE) == scale]
        pick = (same or runs or [None])[0]
        return _record(pick) if pick is not None else None

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """A metric's history as sorted (step, value) pairs; the last value logged at a step wins."""
        if (run_id, key) not in self._history:
            points = sorted(self.client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
            by_step: dict[int, float] = {}
            for m in points:
                by_step[int(m.step)] = float(m.value)
            self._history[(run_id, key)] = sorted(by_step.items())
        return self._history[(run_id, key)]
