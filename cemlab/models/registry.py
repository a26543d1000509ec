"""Named variants found from the config, and the plugins that add to them.

A ``Registry`` maps names (what a config says: ``precond: dplr``, ``task: gp``) to what implements
them. An unknown name fails with the names there are. cemlab keeps this small class instead of a
plugin framework because entry points (``importlib.metadata``) already do the discovery part:

- an installed package adds variants through the entry-point group ``cemlab.plugins`` (each entry
  names a module; importing it registers its variants);
- modules named in the environment variable ``CEMLAB_PLUGINS`` (comma-separated) are imported the
  same way; that is how a project or a test adds variants without packaging, and, because the
  variable is inherited, it reaches every process of a sweep (Ray workers, SLURM job steps).

Plugins are imported once per process, the first time any registry is asked for a name it lacks or
for all its names. This module imports nothing of cemlab, so the model library stays standalone.
It lives in the model library because the preconditioner kinds (``cemlab.models.preconditioners``)
are a registry and the model library may import nothing else of cemlab; the tasks, the report's
figures and claims and the tuning policies import it from here (the model library is the bottom layer).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from importlib.metadata import entry_points
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")

PLUGINS_ENV = "CEMLAB_PLUGINS"
PLUGINS_GROUP = "cemlab.plugins"
_loaded: set[str] = set()
_registries: list["Registry"] = []   # every registry made, for plugins_scope


def plugin_modules() -> list[str]:
    """The plugin modules of this process: the entry points of group ``cemlab.plugins``, then
    ``CEMLAB_PLUGINS``, in that order, each once."""
    names = list(_entry_point_modules(tuple(sys.path)))
    names += [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    return list(dict.fromkeys(names))


@functools.lru_cache(maxsize=8)
def _entry_point_modules(path: tuple[str, ...]) -> tuple[str, ...]:
    """The modules of the ``cemlab.plugins`` entry points installed on ``path`` (``sys.path``), read once
    per path: scanning every installed distribution takes about 10 ms, and every registry lookup asks."""
    return tuple(ep.value.split(":")[0] for ep in entry_points(group=PLUGINS_GROUP))


def load_plugins() -> list[str]:
    """Import every plugin module not yet imported; return those imported now. A module that cannot
    be imported is an error that names it and where it was listed."""
    new = [m for m in plugin_modules() if m not in _loaded]
    for name in new:
        _loaded.add(name)
        try:
            importlib.import_module(name)
        except ImportError as e:
            _loaded.discard(name)
            raise ImportError(f"cemlab plugin {name!r} (from the entry-point group {PLUGINS_GROUP!r} or "
                              f"{PLUGINS_ENV}) cannot be imported: {e}; install it or put its folder on "
                              f"PYTHONPATH") from e
    return new


class UnknownName(LookupError, ValueError):
    """A name no registry entry has: a ``LookupError`` and, so that pydantic reports it as a field's
    validation error, a ``ValueError``."""


class Registry(Generic[T]):
    """Names to implementations, in the order they were registered (built-ins first).

    ``what`` names the registry in messages ("preconditioner kind"), ``field`` the config field that
    selects from it ("model.attn_precond"), so that an unknown name says where to fix it."""

    def __init__(self, what: str, field: str = "") -> None:
        self.what, self.field = what, field
        self._items: dict[str, T] = {}
        _registries.append(self)

    def register(self, name: str, item: T | None = None, *, replace: bool = False):
        """``reg.register("x", obj)``, or as a decorator ``@reg.register("x")``. A name registered
        twice is an error unless ``replace=True`` (a plugin must not silently shadow a built-in)."""
        def add(obj: T) -> T:
            if name in self._items and not replace and self._items[name] is not obj:
                raise ValueError(f"{self.what} {name!r} is already registered ({self._items[name]!r}); "
                                 f"choose another name or pass replace=True")
            self._items[name] = obj
            return obj
        return add(item) if item is not None else add

    def names(self) -> list[str]:
        load_plugins()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def get(self, name: str) -> T:
        if name not in self:
            where = f"{self.field}={name!r}" if self.field else repr(name)
            raise UnknownName(f"{where}: unknown {self.what}; choose one of {self.names()} (or register one: "
                           f"docs/extending.md)")
        return self._items[name]

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._items[n]) for n in self.names()]


@contextlib.contextmanager
def plugins_scope() -> Iterator[None]:
    """Every registry and the set of imported plugins as they are now, restored on exit: what a
    plugin registers inside is forgotten, and the plugin is imported afresh the next time it is
    named (a test adds a plugin without leaving it to the tests after it)."""
    saved = [(r, {**vars(r), "_items": dict(r._items)}) for r in _registries]
    loaded = set(_loaded)
    try:
        yield
    finally:
        for r, state in saved:
            vars(r).clear()
            vars(r).update(state)
        for name in _loaded - loaded:
            sys.modules.pop(name, None)
        _loaded.intersection_update(loaded)
