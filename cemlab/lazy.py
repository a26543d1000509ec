"""Names of a package imported when first used (PEP 562), so that importing a light submodule (a
config) does not load torch through its package ``__init__``.

    __getattr__, __dir__ = lazy_exports(__name__, {".module": ("Name", ...), ...})
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Callable


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
