"""What importing costs. Names of a package imported when first used (PEP 562), so that importing a
light submodule (a config) does not load torch through its package ``__init__``::

    __getattr__, __dir__ = lazy_exports(__name__, {".module": ("Name", ...), ...})

and heavy imports (torch, Lightning, MLflow) made without the cyclic garbage collector, then frozen
out of its later collections::

    with frozen_imports():
        from cemlab.train.run import train
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import sys
from typing import Callable, Iterator


def lazy_exports(
    package: str, modules: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``modules`` (each module, relative to
    ``package`` where it starts with a dot -> the names it defines that the package exports): a name
    is imported from its module when first read, then kept in the package."""
    exports = {name: importlib.util.resolve_name(module, package) for module, names in modules.items()
               for name in names}

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


@contextlib.contextmanager
def frozen_imports() -> Iterator[None]:
    """Import inside this block with the cyclic garbage collector paused, then freeze everything the
    process holds (``gc.freeze``) and restore the collector as it was.

    Why: torch, Lightning and MLflow leave ~600k long-lived objects (modules, functions, classes) and
    no garbage worth collecting. Collecting while they load took a fifth of ``import
    cemlab.train.run`` (1.0 of 5.1 s), and every later full collection walks them again (a test
    process: 27-30 of 110-115 s in collections, 3.5-4.6 s with them frozen); frozen, they are never
    walked. The cost: the few cycles made while importing are never freed (docs/performance.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
