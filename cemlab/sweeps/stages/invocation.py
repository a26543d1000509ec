"""One invocation of ``cemlab sweep``: the state its stages share, and what it ends with.

:class:`Invocation` is handed from stage to stage (``cemlab.sweeps.runner`` lists them): the
sweep and scale, the MLflow store and parent run, the folders, the progress table, and the
:class:`TrialOutcome` of every trial as the stages decide or learn it. :class:`SweepResult` is
what ``run_sweep`` returns; its :attr:`~SweepResult.exit_code` is the command's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cemlab.sweeps.stages import progress as pg
from cemlab.sweeps.sweepfile.files import sweeps_dir
from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.sweeps.sweepfile.load import SweepSpec
from cemlab.sweeps.trial.files import TrialFiles
from cemlab.sweeps.trial.job import TrialJob
from cemlab.tracking import schema
from cemlab.tracking.conventions import run_link

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REPORT = 3
EXIT_STORE_LOST = 4
EXIT_INTERRUPTED = 130


@dataclass
class TrialOutcome:
    """How one trial of the sweep ended in this invocation."""

    trial: Trial
    status: str                    # finished | diverged | stopped | failed | interrupted | reused | done |
                                   # recorded | waited | missing (see cemlab.sweeps.stages.progress)
    run_id: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None   # training time measured by the trial (train's RunResult.seconds)
    wall: float | None = None      # wall time in this invocation, from start to end (process start-up too)
    attempts: int = 0
    resumed: bool = False          # the last attempt continued from a checkpoint
    log_path: str | None = None
    error: str | None = None
    nodes: list[str] = field(default_factory=list)   # Ray node id of each rank (last attempt), when it ran now
    note: str | None = None        # recorded: where from; waited/reused: whose run
    waited_on: str | None = None   # waited: the parent run of the sweep that trained it


@dataclass
class SearchOutcome:
    """One Optuna-searched grid cell: how many trials ran in this invocation, which ASHA stopped."""

    cell: str
    samples: int
    ran: list[str] = field(default_factory=list)          # trial ids run now
    stopped: list[str] = field(default_factory=list)      # of those, stopped early by ASHA
    iterations: dict[str, int] = field(default_factory=dict)  # trial id -> reports (training_iteration)


@dataclass
class SweepResult:
    """What ``run_sweep`` did. ``report`` and ``report_error`` are set by the command that builds
    the sweep's report afterwards (``cemlab.cli``); the sweep itself does not build it."""

    sweep: str
    scale: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    parent_reopened: bool
    outcomes: list[TrialOutcome]
    searches: list[SearchOutcome] = field(default_factory=list)
    reused_run_ids: list[str] = field(default_factory=list)
    report: Path | None = None
    report_error: str | None = None
    interrupted: bool = False
    seconds: float = 0.0
    store_error: str | None = None       # the store went away during the sweep (exit code 4)
    concurrent_with: list[str] = field(default_factory=list)   # parent runs of sweeps this one waited on
    counts_checked: bool = False         # the counts were checked against the store after the sweep
    command: str = ""                    # the command line that reruns (resumes) this sweep
    looks: list[dict] = field(default_factory=list)   # seeding: the looks made (cemlab.sweeps.stages.seeding)
    brackets: list[dict] = field(default_factory=list)   # tuning: the bracketing steps made (stages.bracketing)
    confirmation: dict = field(default_factory=dict)     # confirmation: the stage made (stages.confirmation)
    carried: list[dict] = field(default_factory=list)    # ladder.carry: each family's start (stages.carrying)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out

    @property
    def failed(self) -> list[TrialOutcome]:
        return [o for o in self.outcomes if o.status in (schema.STATUS_FAILED, pg.MISSING)]

    @property
    def exit_code(self) -> int:
        if self.store_error:
            return EXIT_STORE_LOST
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed:
            return EXIT_FAILED
        if self.report_error:
            return EXIT_REPORT
        return EXIT_OK

    def dashboard_url(self) -> str:
        """The parent run in the MLflow UI (a server), else the store's URI."""
        return run_link(self.tracking_uri, self.experiment_id, self.parent_run_id)


@dataclass
class Invocation:
    """State of one invocation, shared by the stages."""

    spec: SweepSpec
    scale: str
    client: Any
    uri: str
    experiment_id: str
    parent_run_id: str
    parent_reopened: bool
    runs_dir: Path
    log_dir: Path
    retries: int
    cache_dir: str | None
    faults: dict
    progress: pg.SweepProgress
    other_driver: str | None = None   # another driver of this sweep and scale runs now: its parent run ("": not known yet)
    outcomes: dict[str, TrialOutcome] = field(default_factory=dict)
    searches: list[SearchOutcome] = field(default_factory=list)
    watch: Any = None                 # the store's watch while trials run (cemlab.sweeps.stages.guards.StoreWatch)
    overrides: list[str] = field(default_factory=list)   # the command line's key=value
    looks: list[dict] = field(default_factory=list)      # seeding: each look made (cemlab.sweeps.stages.seeding)
    brackets: list[dict] = field(default_factory=list)   # tuning: each bracketing step (stages.bracketing)
    confirmation: dict = field(default_factory=dict)     # confirmation: the stage (stages.confirmation)
    carried: list[dict] = field(default_factory=list)    # ladder.carry: each family's start (stages.carrying)
    #: cemlab sweep --gpu-slots measured: the GPUs per worker of every trial that holds a GPU (a runtime
    #: choice, not the sweep file's; ``gpu_slots.with_share``), None: the scale's setting
    gpu_share: float | None = None

    def job(self, trials: dict[str, Trial] | None = None, cell: Trial | None = None) -> TrialJob:
        return TrialJob(sweep=self.spec.name, scale=self.scale, tracking_uri=self.uri,
                        parent_run_id=self.parent_run_id, runs_dir=str(self.runs_dir),
                        sweeps_dir=str(self.spec.path.parent if self.spec.path else sweeps_dir()),
                        log_dir=str(self.log_dir), trials=trials or {}, cell=cell, cache_dir=self.cache_dir,
                        faults=self.faults)

    @property
    def files(self) -> TrialFiles:
        """Where the trials' checkpoints and logs are."""
        return TrialFiles(self.runs_dir, self.log_dir)


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as JSON in ``path``, replaced atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


#: MLflow keeps at most this many characters of a tag value.
TAG_CHARS = 5000


def record_tag(inv: "Invocation", key: str, record: Any, short: "Callable[[Any], Any] | None" = None) -> None:
    """A stage's record on the parent run as the JSON tag ``key`` (the bracketing steps, the looks, the
    carried starts, the confirmation): ``short(record)`` in its place where the JSON would be longer
    than MLflow keeps (``TAG_CHARS``), then cut there."""
    text = json.dumps(record, sort_keys=True, default=str)
    if len(text) > TAG_CHARS and short is not None:
        text = json.dumps(short(record), sort_keys=True, default=str)
    inv.client.set_tag(inv.parent_run_id, key, text[:TAG_CHARS])
