"""A task's section of a sweep scale (``scales.yaml``: ``<scale>.<task name>``): the resources of
each trial and the run-config fields every trial of the task starts from.

Each task names the model of its section (``Task.scale_model``, this :class:`TaskScale` unless the
task needs more settings per scale: a subclass), so that a task added from outside cemlab brings
its scale settings with it; ``cemlab.sweeps.sweepfile.schema.ScaleSpec`` holds the sections by task name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StrictSpec(BaseModel):
    """Base of the sweep and scale file sections: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN and infinity are never values


class Resources(StrictSpec):
    """What one trial asks the scheduler for: ``workers`` processes (DDP ranks), each with
    ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs."""

    workers: int = Field(default=1, ge=1, le=4096, description="Training processes per trial (DDP ranks).")
    cpus_per_worker: float = Field(default=1, gt=0, le=1024, description="CPUs per worker (also its torch threads).")
    gpus_per_worker: float = Field(default=0, ge=0, le=64, description="GPUs per worker.")

    @property
    def cpus(self) -> float:
        """CPUs of the whole trial (every worker's), as Ray reserves them."""
        return self.workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        """GPUs of the whole trial (every worker's), as Ray reserves them."""
        return self.workers * self.gpus_per_worker


class TaskScale(StrictSpec):
    """Settings of one task at one scale (its section of a scale, keyed by the task's name)."""

    resources: Resources = Field(default_factory=Resources)
    base: dict[str, Any] = Field(default_factory=dict, description="RunConfig fields of every trial of this task.")
