"""The tasks cemlab trains, and the one place that says what differs between them.

* ``lm`` (:class:`~cemlab.tasks.lm.LanguageModelling`): a causal LM on a tokenised corpus, test
  perplexity, a budget in tokens, sweeps over model sizes (paper Figs 2-4);
* ``gp`` (:class:`~cemlab.tasks.gp.GPRegression`): the recursive CEM regressor on GP draws, test
  RMSE, a budget in examples (paper Table 3).

Code that behaves differently per task asks the task, ``task_of(cfg).unit``, instead of comparing
task names. To add a task: a module here with a :class:`~cemlab.tasks.base.Task` subclass, its
entry in :data:`TASKS`, and its name in ``RunConfig.task`` (with its config section, if it has one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cemlab.tasks.base import Task, TaskData, format_eta, format_lr
from cemlab.tasks.gp import GPRegression
from cemlab.tasks.lm import LanguageModelling

if TYPE_CHECKING:  # pragma: no cover
    from cemlab.config import RunConfig

#: Every task by its name (the config's ``task:`` value).
TASKS: dict[str, Task] = {t.name: t for t in (LanguageModelling(), GPRegression())}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"task={name!r} is unknown; choose one of {sorted(TASKS)}") from None


def task_of(cfg: "RunConfig") -> Task:
    """The task of a run config."""
    return get_task(cfg.task)


__all__ = ["TASKS", "Task", "TaskData", "format_eta", "format_lr", "get_task", "task_of"]
