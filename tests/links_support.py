"""Reading terminal output back as a person sees it, for the tests of printed links: OSC 8
hyperlinks (their targets) and colour escapes removed, lines split; a rich console that renders as
on a terminal (or not) at a given width."""

from __future__ import annotations

import io
import re

from rich.console import Console

WIDTHS = (40, 80, 200)
SERVER = "http://127.0.0.1:5793"
PARENT = "58997962b84449f19422ff22ecc0bc90"
PARENT_URL = f"{SERVER}/#/experiments/1/runs/{PARENT}?workflowType=machine_learning"

OSC8 = re.compile(r"\x1b\]8;[^;\x1b]*;([^\x1b]*)\x1b\\")
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def terminal_view(raw: str) -> tuple[list[str], list[str]]:
    """(the lines a terminal shows, the non-empty OSC 8 link targets) of ``raw`` output."""
    hrefs = [h for h in OSC8.findall(raw) if h]
    text = CSI.sub("", OSC8.sub("", raw))
    assert "\x1b" not in text, repr(text)
    return text.split("\n"), hrefs


def line_with(lines: list[str], value: str) -> str:
    """The one line that ends with ``value`` whole, after a space (a label) or at its start."""
    found = [line for line in lines if line == value or line.endswith(" " + value)]
    assert len(found) == 1, (value, lines)
    return found[0]


def console(width: int, tty: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=tty, highlight=False, soft_wrap=not tty,
                   color_system="standard" if tty else None), out
