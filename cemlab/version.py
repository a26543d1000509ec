"""cemlab's version (``cemlab.__version__``, ``cemlab --version``): the installed distribution's,
from its metadata; for a source checkout on ``PYTHONPATH`` that is not installed (a GPU node
without network), the ``version`` of the checkout's own ``pyproject.toml``; else :data:`UNKNOWN`.

MLflow reads it when it checks a logged model's requirements against the running environment:
without installed metadata it falls back to ``cemlab.__version__``."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "cemlab"
#: The version where neither the metadata nor a ``pyproject.toml`` of cemlab is found (PEP 440: a
#: local label on 0, so that it sorts below every release and is never taken for one).
UNKNOWN = "0+unknown"
#: The ``pyproject.toml`` of a source checkout: beside the ``cemlab/`` package folder.
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def source_version(pyproject: Path = PYPROJECT) -> str | None:
    """``[project] version`` of ``pyproject`` when it is cemlab's; None when there is none."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if project.get("name") != DISTRIBUTION or not isinstance(project.get("version"), str):
        return None
    return project["version"]


def package_version(pyproject: Path = PYPROJECT) -> str:
    """The installed metadata's version, else the source checkout's, else :data:`UNKNOWN`."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a source checkout that is not installed
        return source_version(pyproject) or UNKNOWN


__version__ = package_version()
