"""Every link cemlab prints, taken as printed, opens a page of a real ``mlflow server`` that lists
the runs, in a real headless browser (chromium and chromedriver, driven by selenium as in
tests/test_report_browser.py).

The output is captured as a terminal shows it: ``cemlab ui`` and ``cemlab train`` run in a
pseudo-terminal 40 and 80 columns wide, the sweep's last lines (``print_end``) go through rich's
terminal rendering at 80 columns. Each URL is read from that output (``https?://`` up to the end
of its line, and the OSC 8 hyperlink that carries it), never rebuilt with cemlab's link helpers,
and must be whole on its line. Then:

* the sweep's parent run link shows the parent run with every trial under "Child runs";
* ``cemlab ui``'s dashboard link shows the runs of both cemlab experiments in one table, and each
  experiment's link its runs table (model-training view, not the GenAI overview);
* ``cemlab train`` against the server prints none of MLflow's own "View run" / "View experiment"
  lines, and its link shows the trained run in the runs table.

Screenshots are saved under tmp_path.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_support as rs  # noqa: E402
from browser_support import body_text, browser, wait_for  # noqa: E402,F401  (browser: the fixture)
from links_support import console, terminal_view  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
CEMLAB = str(Path(sys.executable).with_name("cemlab"))
SWEEPS = ["kq_diagonal", "attention_replacement"]
URL_AT_END = re.compile(r"(?:^|\s)(https?://\S+)$")


def in_terminal(argv: list[str], columns: int, env: dict[str, str], timeout: float = 300.0) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal ``columns`` wide as its stdin, stdout and stderr; its
    exit code and everything it wrote (line ends as ``\\n``)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env={**env, "TERM": "xterm-256color"},
                            cwd=REPO, start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            pytest.fail(f"{argv} still running after {timeout:.0f}s:\n{b''.join(chunks).decode()[-3000:]}")
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def printed_links(raw: str, columns: int | None = None) -> dict[str, str]:
    """label -> URL of every URL in ``raw`` terminal output: the URL ends its line, it is the one
    its OSC 8 hyperlink carries, the label is what precedes it on the line (or on the line above,
    where label and URL did not fit ``columns`` together)."""
    lines, hrefs = terminal_view(raw)
    out = {}
    for i, line in enumerate(lines):
        m = URL_AT_END.search(line)
        if not m:
            assert not re.search(r"(^|\s)https?://", line), f"a URL not at the end of its line: {line!r}"
            continue
        url, label = m.group(1), line[: m.start(1)].strip()
        if not label:
            label = lines[i - 1].strip()
            assert columns is None or len(lines[i - 1]) + 1 + len(url) > columns  # put below only when needed
        assert url in hrefs, (url, hrefs)
        out[label] = url
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """cemlab's local server on a store holding two crafted sweeps (parent run and trials each)."""
    from mlflow.tracking import MlflowClient

    from cemlab.tracking import server

    root = tmp_path_factory.mktemp("links")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_RUNS_DIR", str(root / "runs"))
        mp.setenv("CEMLAB_SWEEPS_DIR", str(rs.write_sweeps(root / "sweeps")))
        url = server.start_server()
        try:
            rs.populate(url, root / "unused", SWEEPS)
            client = MlflowClient(url)
            sweeps = {}
            for name in SWEEPS:
                exp = client.get_experiment_by_name(f"cemlab/{name}")
                runs = client.search_runs([exp.experiment_id])
                parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
                trials = [r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
                sweeps[name] = {"experiment": exp, "parent": parent, "trials": trials}
            yield {"url": url, "root": root, "sweeps": sweeps, "env": dict(os.environ)}
        finally:
            server.stop_server()


def see(browser, link: str, names: list[str], shot: Path, expand: bool = False) -> str:
    """Open ``link``; wait until every name in ``names`` is on the page (``expand``: open the
    parent rows of a runs table first, as a user would); save a screenshot; the page's text."""
    from selenium.webdriver.common.by import By

    browser.get(link)
    wait_for(lambda: names[0] in body_text(browser), what=f"{names[0]} at {link}")
    if expand:
        for button in browser.find_elements(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']"):
            button.click()
    wait_for(lambda: all(n in body_text(browser) for n in names), what=f"every run of {names} at {link}")
    assert browser.save_screenshot(str(shot))
    text = body_text(browser)
    assert "Detect Issues" not in text and "Welcome to MLflow" not in text   # not the GenAI overview, not home
    return text


def test_the_sweeps_and_the_dashboards_links_open_their_runs(served, browser, tmp_path):
    from cemlab.sweeps.stages import progress as pg
    from cemlab.sweeps.stages.invocation import SweepResult

    url, sweep = served["url"], served["sweeps"]["kq_diagonal"]
    parent = sweep["parent"]
    result = SweepResult("kq_diagonal", "smoke", url, sweep["experiment"].experiment_id, parent.info.run_id, False, [])
    c, out = console(80, True)
    pg.print_end(result, c)
    end = printed_links(out.getvalue(), 80)
    assert list(end) == ["MLflow, the parent run and its trials:"], out.getvalue()
    text = see(browser, end["MLflow, the parent run and its trials:"], [parent.info.run_name, *sweep["trials"]],
               tmp_path / "parent.png")
    assert "Child runs" in text

    code, raw = in_terminal([CEMLAB, "ui"], 40, served["env"], timeout=120)
    assert code == 0, raw
    ui = printed_links(raw, 40)
    names = [f"cemlab/{n}" for n in sorted(SWEEPS)]
    assert list(ui) == ["MLflow dashboard:", *(f"{n}:" for n in names)], raw
    assert "\n  (running; store sqlite:///" in raw and "\nStop it with: cemlab ui --stop\n" in raw   # a command whole
    assert f"\nPoint other clients at it:\n  export MLFLOW_TRACKING_URI={url}\n" in raw
    parents = [served["sweeps"][n]["parent"].info.run_name for n in SWEEPS]
    text = see(browser, ui["MLflow dashboard:"], parents, tmp_path / "dashboard.png")
    assert "Displaying Runs from 2 Experiments" in text
    for name in SWEEPS:
        s = served["sweeps"][name]
        see(browser, ui[f"cemlab/{name}:"], [s["parent"].info.run_name, *s["trials"]], tmp_path / f"{name}.png",
            expand=True)


def test_train_prints_its_runs_table_and_none_of_mlflows_links(served, browser, tmp_path, data_cache):
    argv = [CEMLAB, "train", str(REPO / "configs" / "default.yaml"), f"data.cache_dir={data_cache}",
            "train.num_threads=1", "train.tokens=16384", "train.val_interval=4", "train.val_batches=1",
            "train.test_batches=1", f"train.checkpoint_dir={tmp_path / 'ck'}", "--tracking-uri", served["url"]]
    code, raw = in_terminal(argv, 80, served["env"])
    assert code == 0, raw
    assert "View run" not in raw and "View experiment" not in raw, raw    # MLflow's own lines, silenced
    links = printed_links(raw, 80)
    label = "cemlab train: the run in MLflow's runs table:"
    assert list(links) == [label], raw
    run_name = re.search(r"cemlab train: (.+?) \([\d,]+ parameters\)", raw).group(1)
    see(browser, links[label], [run_name], tmp_path / "train.png")
