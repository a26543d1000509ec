"""Lines a person opens, copies or runs: an MLflow link, a report's or a log's path, the command
that resumes a sweep. Each is printed whole, on one line, at any terminal width.

:func:`print_link` prints ``label target``. The target is never wrapped: a console that wraps
at its width (rich's, as ``cemlab sweep`` uses) would put a newline inside a long URL, and a
terminal's link detection, a double-click or a copy would then take only its first part. On a
terminal, when ``label target`` is wider than the terminal, the label gets a line of its own and
the target the next one, indented, still whole (the terminal folds it visually, but a copy or a
click takes all of it). Where the output is a terminal, a URL or a path is also carried whole in
an OSC 8 hyperlink (a path as its ``file://`` URI; through rich's ``link`` style on a rich
console), which terminals that know OSC 8 open on a click; others ignore the escape. Without a
terminal (a log file, a pipe, CI) the line is plain text with no escape, label and target on one
line.

Nothing here imports rich or MLflow: the command modules import this one at the top, and
``cemlab --help`` loads every command's module; a rich console is used through its own methods.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

#: What a target is: a URL opens in a browser, a path in a file manager or an editor (both get an
#: OSC 8 link on a terminal); a command is run, so it gets none.
URL, PATH, COMMAND = "url", "path", "command"
#: Before a target printed on the line below its label.
INDENT = "  "


def href(target: str | Path, kind: str = URL) -> str | None:
    """The address an OSC 8 hyperlink carries for ``target``: a URL as it is, a path as its
    absolute ``file://`` URI, a command none (nor a URL without a scheme, e.g. the UI's own fragment)."""
    if kind == PATH:
        return Path(target).expanduser().absolute().as_uri()
    if kind == URL and str(target).startswith(("http://", "https://", "file://")):
        return str(target)
    return None


def print_link(label: str, target: str | Path, kind: str = URL, *, console: "Console | None" = None,
               file: IO[str] | None = None) -> None:
    """Print ``label`` and ``target`` (a :data:`URL`, :data:`PATH` or :data:`COMMAND`) with the
    target whole on one line (see the module docstring). ``console``: the rich console of the
    command's other output (``cemlab sweep``'s), which draws the OSC 8 link as its ``link`` style;
    otherwise ``file`` (default stdout), written directly."""
    target = str(target)
    if console is not None:
        tty, width = console.is_terminal, console.width
    else:
        file = file or sys.stdout
        tty, width = is_terminal(file), terminal_width(file)
    link = href(target, kind) if tty else None
    own_line = bool(label) and tty and len(label) + 1 + len(target) > width
    lead = INDENT if own_line else (f"{label} " if label else "")
    if console is None:
        shown = f"\x1b]8;;{link}\x1b\\{target}\x1b]8;;\x1b\\" if link else target
        file.write((f"{label}\n" if own_line else "") + lead + shown + "\n")
        file.flush()
        return
    if own_line:
        console.print(label, markup=False, highlight=False)
    line = console.render_str(lead, markup=False, highlight=False)
    line.append(target, style=f"link {link}" if link else None)
    console.print(line, soft_wrap=True, markup=False, highlight=False)


def is_terminal(file: IO[str]) -> bool:
    """``file`` is a terminal that takes escapes (not ``TERM=dumb``)."""
    try:
        return file.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def terminal_width(file: IO[str]) -> int:
    """Columns of the terminal ``file`` writes to (``$COLUMNS`` first, as rich reads it; 80 when unknown)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(file.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
