"""The tasks cemlab trains, and the one place that says what differs between them.

* ``lm`` (:class:`~cemlab.tasks.lm.LanguageModelling`): a causal LM on a tokenised corpus, test
  perplexity, a budget in tokens, sweeps over model sizes (paper Figs 2-4);
* ``gp`` (:class:`~cemlab.tasks.gp.GPRegression`): the recursive CEM regressor on GP draws, test
  RMSE, a budget in examples (paper Table 3).

Code that behaves differently per task asks the task, ``task_of(cfg).unit``, instead of comparing
task names. Each task is one module here: its :class:`~cemlab.tasks.base.Task` subclass (facts,
names, data, budget: cheap, config only) and the training-time object its ``build`` returns (model,
loss, metrics, recursion). To add a task: a module here (it is found by itself, see
:func:`_discover`) and its name in ``RunConfig.task`` with its config section, if it has one.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from cemlab.tasks.base import Task, TaskData, format_eta, format_lr

if TYPE_CHECKING:  # pragma: no cover
    from cemlab.config import RunConfig



def _discover() -> dict[str, Task]:
    """One instance of every ``Task`` subclass defined in a module of this package, by name."""
    found: dict[str, Task] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Task) and obj is not Task and obj.__module__ == module.__name__:
                if obj.name in found:
                    raise TypeError(f"two tasks are named {obj.name!r}: {type(found[obj.name]).__name__} and "
                                    f"{obj.__name__}; give one another name")
                found[obj.name] = obj()
    return found


#: Every task by its name (the config's ``task:`` value).
TASKS: dict[str, Task] = _discover()


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"task={name!r} is unknown; choose one of {sorted(TASKS)}") from None


def task_of(cfg: "RunConfig") -> Task:
    """The task of a run config."""
    return get_task(cfg.task)


__all__ = ["TASKS", "Task", "TaskData", "format_eta", "format_lr", "get_task", "task_of"]
