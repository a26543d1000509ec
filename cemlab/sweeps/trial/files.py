"""Where a sweep's trials live on disk, spelled in one place.

A trial's checkpoint folder is ``<runs>/checkpoints/<config hash>`` (``cemlab.train.checkpoint``):
keyed by the config, not the sweep, so that a trial trained once is found by every sweep that
has it. Its log is ``<runs>/logs/<sweep>-<scale>/<trial id>.log`` (one per sweep and scale; a
retried attempt appends) and the test hook's fault counter sits beside the logs. The driver's
stages (decide, execute, record) and the trial process ask :class:`TrialFiles` for these paths;
no other module builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cemlab.train.checkpoint import checkpoint_folder, read_state


@dataclass(frozen=True)
class TrialFiles:
    """The files of the trials of one sweep invocation (absolute paths; pickled to Ray trials)."""

    runs_dir: Path
    log_dir: Path

    def checkpoints(self, trial: Any) -> Path:
        """The trial's checkpoint folder (not created)."""
        return self.checkpoints_of(trial.config_hash)

    def checkpoints_of(self, config_hash: str) -> Path:
        """The checkpoint folder of the trial with this config hash (a run's tag; not created)."""
        return checkpoint_folder(self.runs_dir, config_hash)

    def state(self, trial: Any) -> dict[str, Any] | None:
        """The trial's ``state.json`` (None: no folder, or nothing readable in it)."""
        return read_state(self.checkpoints(trial))

    def run_id(self, trial: Any) -> str | None:
        """The MLflow run the trial's checkpoint folder points at, if any."""
        return (self.state(trial) or {}).get("run_id")

    def log(self, trial_id: str) -> Path:
        """The trial's log file for this sweep and scale."""
        return self.log_dir / f"{trial_id}.log"

    def fault_counter(self, trial_id: str) -> Path:
        """How many times the test hook has failed this trial (``CEMLAB_SWEEP_FAULTS``)."""
        return self.log_dir / "faults" / f"{trial_id}.count"
