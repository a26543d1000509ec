"""Every URL, path and command cemlab prints for a person to open, copy or run is one whole line
at 40, 80 and 200 columns, on a terminal (rich's terminal rendering, with the OSC 8 hyperlink
carrying the whole target) and without one (plain text, no escape at all).

The output is parsed back as a terminal would show it: OSC 8 escapes are read (their targets) and
removed, and each expected value, written out here rather than built with cemlab's link helpers,
must be found whole within one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cemlab.links import COMMAND, PATH, URL, print_link

sys.path.insert(0, str(Path(__file__).parent))
from links_support import PARENT, PARENT_URL, SERVER, WIDTHS, console, line_with, terminal_view  # noqa: E402


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "no-terminal"])
@pytest.mark.parametrize("width", WIDTHS)
def test_a_link_path_or_command_is_one_whole_line(width, tty, tmp_path):
    path = tmp_path / "a folder with spaces" / "reports" / "attention_replacement" / "index.html"
    command = "cemlab sweep attention_replacement --scale smoke train.tokens=65536 --cache-dir '/tmp/a b'"
    c, out = console(width, tty)
    print_link("MLflow, the parent run and its trials:", PARENT_URL, URL, console=c)
    print_link("Report:", path, PATH, console=c)
    print_link("To resume, run:", command, COMMAND, console=c)
    raw = out.getvalue()
    lines, hrefs = terminal_view(raw)
    for label, value in (("MLflow, the parent run and its trials:", PARENT_URL), ("Report:", str(path)),
                         ("To resume, run:", command)):
        line = line_with(lines, value)
        if not tty or len(label) + 1 + len(value) <= width:
            assert line == f"{label} {value}"       # label and target together
        else:
            assert line == f"  {value}" and lines[lines.index(line) - 1] == label   # the label above
    if tty:  # the URL and the path carried whole in their OSC 8 links; a command gets none
        assert hrefs == [PARENT_URL, path.absolute().as_uri()], raw
    else:
        assert "\x1b" not in raw and len(lines) == 4 and lines[-1] == ""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_link_written_to_a_terminal_file_is_one_whole_line(width, tmp_path, monkeypatch):
    """Commands without a rich console (``cemlab ui``, ``report``, ``train``) write to the file: in a
    pseudo-terminal ``width`` columns wide, and to a file that is not a terminal."""
    import fcntl
    import os
    import struct
    import termios

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    path = tmp_path / "reports" / "index.html"
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    with open(slave, "w", closefd=True) as tty:
        print_link("  cemlab/attention_replacement:", PARENT_URL, URL, file=tty)
        print_link("Report:", path, PATH, file=tty)
        print_link("Stop it with:", "cemlab ui --stop", COMMAND, file=tty)
    chunks = []
    while True:  # all of it: one read may return a part; the closed terminal ends with EIO
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    raw = b"".join(chunks).decode().replace("\r\n", "\n")
    lines, hrefs = terminal_view(raw)
    assert hrefs == [PARENT_URL, path.as_uri()], raw
    for label, value in (("  cemlab/attention_replacement:", PARENT_URL), ("Report:", str(path)),
                         ("Stop it with:", "cemlab ui --stop")):
        line = line_with(lines, value)
        if len(label) + 1 + len(value) <= width:
            assert line == f"{label} {value}"
        else:
            assert line == f"  {value}" and lines[lines.index(line) - 1] == label

    with open(tmp_path / "log", "w") as log:   # not a terminal: plain, one line each
        print_link("  cemlab/attention_replacement:", PARENT_URL, URL, file=log)
    assert (tmp_path / "log").read_text() == f"  cemlab/attention_replacement: {PARENT_URL}\n"


def _sweep_end(tmp_path: Path):
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.sweeps.stages import progress as pg
    from cemlab.sweeps.stages.invocation import Invocation, SweepResult, TrialOutcome

    spec = load_sweep("attention_replacement")
    trial = spec.expand("smoke")[0]
    log_dir = tmp_path / "runs with a long folder name" / "logs" / "attention_replacement" / "smoke"
    log = log_dir / f"{trial.trial_id}.log"
    command = "cemlab sweep attention_replacement --scale smoke model.attention=[cem] seed=[0,1] --cpus 2"
    inv = Invocation(spec=spec, scale="smoke", client=None, uri=SERVER, experiment_id="1", parent_run_id=PARENT,
                     parent_reopened=False, runs_dir=tmp_path / "runs", log_dir=log_dir, retries=1, cache_dir=None,
                     faults={}, progress=pg.SweepProgress("attention_replacement"))
    failed = TrialOutcome(trial, "failed", log_path=str(log), error="RuntimeError: boom")
    result = SweepResult("attention_replacement", "smoke", SERVER, "1", PARENT, False, [failed], interrupted=True,
                         command=command)
    return inv, result, {"parent": PARENT_URL, "logs": str(log_dir), "log": str(log), "command": command}


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "no-terminal"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_sweeps_first_and_last_lines_keep_links_whole(width, tty, tmp_path):
    from cemlab.sweeps.stages import progress as pg

    inv, result, expected = _sweep_end(tmp_path)
    c, out = console(width, tty)
    pg.print_start(inv, inv.spec.expand("smoke"), c)
    pg.print_end(result, c)
    raw = out.getvalue()
    lines, hrefs = terminal_view(raw)
    assert sum(PARENT_URL in line for line in lines) == 2          # at the start and at the end
    for value in (expected["logs"], expected["log"], expected["command"]):
        line_with(lines, value)
    for line in (line for line in lines if PARENT_URL in line):
        assert line.endswith(PARENT_URL)
    if tty:
        assert hrefs.count(PARENT_URL) == 2 and Path(expected["log"]).as_uri() in hrefs, raw
        assert not any(expected["command"] in h for h in hrefs)
    else:
        assert "\x1b" not in raw


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "no-terminal"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_reports_retry_command_is_one_whole_line(width, tty, tmp_path):
    """A report that could not be built after the sweep: the command that retries it, quoted for a
    shell, whole on its line."""
    from cemlab.cli import report_after_sweep
    from cemlab.sweeps.stages.invocation import SweepResult

    result = SweepResult("no_such_sweep", "smoke", f"sqlite:///{tmp_path / 'none.db'}", "1", PARENT, False, [])
    c, out = console(width, tty)
    report_after_sweep(result, c, ["train.tokens=65536", "model.attention=[cem]"], "no_such_sweep")
    lines, hrefs = terminal_view(out.getvalue())
    assert result.report_error and "SweepError" in result.report_error and not hrefs
    line = line_with(lines, "cemlab report no_such_sweep train.tokens=65536 'model.attention=[cem]'")
    assert line.startswith("To retry, run: " if width == 200 or not tty else "  ")
