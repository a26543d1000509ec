"""The task registry: every task by its name (a run config's ``task:`` value).

It sits beside the run config, below :mod:`cemlab.tasks`, so that ``RunConfig`` checks its
``task:`` against it without importing the tasks (which import the config). The built-in tasks
(the modules of :mod:`cemlab.tasks`, found by themselves) register on the first question the
registry is asked; a task from outside cemlab registers from a plugin module (the entry-point group
``cemlab.plugins`` or the environment variable ``CEMLAB_PLUGINS``, see
:mod:`cemlab.models.registry`) with :func:`cemlab.tasks.register_task`.

The built-ins are imported by module name (``BUILTINS``) on that first question, the way plugins
are: a static import would make the config and the tasks import each other.
"""

from __future__ import annotations

import importlib

from cemlab.models.registry import PLUGINS_ENV, PLUGINS_GROUP, Registry, UnknownName

#: The package whose modules define the built-in tasks (imported on the registry's first question).
BUILTINS = "cemlab.tasks"


class TaskRegistry(Registry):
    """A :class:`~cemlab.models.registry.Registry` of tasks that loads the built-in tasks first."""

    def __init__(self) -> None:
        super().__init__("task", "task")
        self._builtins_loaded = False

    def _load_builtins(self) -> None:
        if not self._builtins_loaded:
            self._builtins_loaded = True
            importlib.import_module(BUILTINS)

    def names(self) -> list[str]:
        self._load_builtins()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return super().__contains__(name)

    def get(self, name: str):
        if name not in self:
            raise UnknownName(f"task={name!r} is unknown; choose one of {sorted(self.names())} (a task from "
                              f"outside cemlab: register it with cemlab.tasks.register_task in a module named in "
                              f"{PLUGINS_ENV} or in the entry-point group {PLUGINS_GROUP})")
        return self._items[name]


#: Every task by its name; ``cemlab.tasks.TASKS`` is this registry.
TASKS = TaskRegistry()
