"""Arguments ``cemlab sweep`` and ``cemlab plan`` share: the sweep name, ``--scale`` (its choices
read from ``sweeps/scales.yaml``) and ``key=value`` overrides, with shell completion (argcomplete)."""

from __future__ import annotations

import argparse

from cemlab.config import valid_keys
from cemlab.sweeps.sweepfile.files import list_sweeps, scale_names
from cemlab.sweeps.sweepfile.schema import DEFAULT_SCALE


def _sweep_completer(**_):
    try:
        return list_sweeps()
    except OSError:
        return []


def add_sweep_argument(parser: argparse.ArgumentParser, help_text: str, optional: bool = False) -> None:
    arg = parser.add_argument("sweep", nargs="?" if optional else None, help=help_text)
    arg.completer = _sweep_completer  # argcomplete


def add_scale_argument(parser: argparse.ArgumentParser) -> None:
    """``--scale``: one of the scales of ``sweeps/scales.yaml`` (argparse rejects others with the list)."""
    names = scale_names()
    parser.add_argument("--scale", default=DEFAULT_SCALE, choices=names or None, metavar="{" + ",".join(names) + "}"
                        if names else "SCALE",
                        help=f"what the sweep's sizes and budgets mean, from sweeps/scales.yaml (default {DEFAULT_SCALE})")


def _override_completer(prefix: str = "", **_):
    """Config keys (``train.tokens=``) once a section is typed, else the sections."""
    section, dot, _ = prefix.partition(".")
    if dot:
        return [f"{section}.{k}=" for k in valid_keys((section,))]
    return [f"{s}." if valid_keys((s,)) else f"{s}=" for s in valid_keys(())]


def add_overrides_argument(parser: argparse.ArgumentParser) -> None:
    arg = parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="set a config key in every trial after the scale and the sweep file (train.tokens=2048, "
                             "validated as in cemlab train), or replace an axis's values (seed=[0,1,2])")
    arg.completer = _override_completer  # argcomplete


def add_ladder_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--ladder`` and ``--rung X``: the rungs of the sweep file's ``ladder:`` instead of ``--scale``."""
    parser.add_argument("--ladder", action="store_true",
                        help=f"{verb} every rung of the sweep file's ladder (cheapest first) instead of one scale")
    parser.add_argument("--rung", default=None, metavar="X",
                        help=f"{verb} one rung of the ladder: its tokens per parameter (e.g. 5) or its scale name")
