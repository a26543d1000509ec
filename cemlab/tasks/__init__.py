"""The tasks cemlab trains, and the one place that says what differs between them.

* ``lm`` (:class:`~cemlab.tasks.lm.LanguageModelling`): a causal LM on a tokenised corpus, test
  perplexity, a budget in tokens, sweeps over model sizes (paper Figs 2-4);
* ``gp`` (:class:`~cemlab.tasks.gp.GPRegression`): the recursive CEM regressor on GP draws, test
  RMSE, a budget in examples (paper Table 3).

Code that behaves differently per task asks the task, ``task_of(cfg).unit``, instead of comparing
task names. Each task is one module here: its :class:`~cemlab.tasks.base.Task` subclass (facts,
names, data, budget: cheap, config only) and the training-time object its ``build`` returns (model,
loss, metrics, recursion). To add a task: a module here (it is found by itself, see
:func:`_discover`), and its config section in ``RunConfig`` if it has one of its own. A task from
outside cemlab registers with :func:`register_task` from a plugin module (``CEMLAB_PLUGINS`` or the
entry-point group ``cemlab.plugins``, see :mod:`cemlab.task_registry`).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, TypeVar

from cemlab.task_registry import TASKS
from cemlab.tasks.base import Task, TaskData, format_eta, format_lr

if TYPE_CHECKING:  # pragma: no cover
    from cemlab.config import RunConfig

T = TypeVar("T", bound=type)


def register_task(cls: T) -> T:
    """Register one instance of the ``Task`` subclass ``cls`` under its ``name`` (a class decorator
    for a plugin's task; the built-in tasks are found by :func:`_discover`)."""
    if not (isinstance(cls, type) and issubclass(cls, Task)) or not isinstance(getattr(cls, "name", None), str):
        raise TypeError(f"register_task takes a Task subclass with a name (class attribute), got {cls!r}")
    TASKS.register(cls.name, cls())
    return cls


def _discover() -> None:
    """Register one instance of every ``Task`` subclass defined in a module of this package."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Task) and obj is not Task and obj.__module__ == module.__name__:
                register_task(obj)


_discover()


def get_task(name: str) -> Task:
    """The task named ``name``; an unknown name fails naming the tasks there are."""
    return TASKS.get(name)


def task_of(cfg: "RunConfig") -> Task:
    """The task of a run config."""
    return get_task(cfg.task)


__all__ = ["TASKS", "Task", "TaskData", "format_eta", "format_lr", "get_task", "register_task", "task_of"]
