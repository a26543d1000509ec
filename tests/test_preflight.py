"""Dead dependencies and bad data are named within seconds, before compute is spent.

Each test runs the real ``cemlab`` command in a subprocess, against a tracking URI or Ray address
on a free local port with nothing listening, or a data path that does not exist; it measures the
wall time to the exit and reads the message. A command that hangs is killed (with its process
group) after a minute and the test fails. The last tests run the sweep in this process up to its
store and Ray, with stand-ins for both: a local server that starts while Ray starts and fails is
still the sweep's error, as when it started first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_YAML = ROOT / "configs" / "default.yaml"
HANG_S = 60


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cli_env(tmp_path):
    """Environment of a ``cemlab`` subprocess: its own runs and reports folders, no tracking URI
    and no Ray address; any MLflow server a command starts there is stopped after the test."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env.update(CEMLAB_RUNS_DIR=str(tmp_path / "runs"), CEMLAB_REPORTS_DIR=str(tmp_path / "reports"),
               CEMLAB_SWEEPS_DIR=str(ROOT / "sweeps"), PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    yield env
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEMLAB_RUNS_DIR", env["CEMLAB_RUNS_DIR"])
        from cemlab.tracking.server import stop_server

        stop_server()


def cemlab(env: dict, *args: str) -> tuple[int, str, float]:
    """Run ``cemlab ARGS``; (exit code, stdout + stderr, seconds). Fails the test on a hang."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "cemlab.cli", *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"`cemlab {' '.join(args)}` still running after {HANG_S}s; output:\n{out[-3000:]}")
    return proc.returncode, out, time.monotonic() - t0


def flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# A dead tracking store: every command that needs it says so within 15 s
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["train", str(DEFAULT_YAML)],
    ["report", "attention_replacement"],
    ["sweep", "attention_replacement", "--scale", "smoke", "--no-report"],
    ["plan", "attention_replacement", "--scale", "smoke"],
], ids=lambda c: c[0])
def test_a_dead_tracking_uri_fails_within_15s_naming_it(cli_env, command):
    uri = f"http://127.0.0.1:{free_port()}"
    code, out, seconds = cemlab({**cli_env, "MLFLOW_TRACKING_URI": uri}, *command)
    assert code != 0, out[-2000:]
    assert seconds < 15, f"{seconds:.1f}s"
    text = flat(out)
    assert uri in text, out[-2000:]
    assert "cemlab ui" in text and "MLFLOW_TRACKING_URI" in text, out[-2000:]   # how to get a server
    assert "Traceback" not in out
    # The store is checked before anything else starts: no local server, no Ray.
    assert not (Path(cli_env["CEMLAB_RUNS_DIR"]) / "mlflow" / "server.json").exists()
    assert "ray" not in out.lower().replace("cemlab", ""), out[-2000:]


def test_a_dead_tracking_uri_given_with_the_flag_fails_fast(cli_env):
    uri = f"http://127.0.0.1:{free_port()}"
    code, out, seconds = cemlab(cli_env, "train", str(DEFAULT_YAML), "--tracking-uri", uri)
    assert code != 0 and seconds < 15 and uri in flat(out), (seconds, out[-2000:])


def test_probe_store_names_dead_stores_and_passes_a_new_sqlite_file(tmp_path, monkeypatch):
    """The probe itself (a live server passes it in every sweep test, which probe the local
    server): a sqlite file yet to be created passes, its missing folder does not; a closed port,
    a database port nothing listens on and a server that never answers fail within the timeout
    with the URI in the message."""
    from cemlab.tracking.store import StoreError, probe_store

    probe_store(f"sqlite:///{tmp_path}/fresh.db")   # the embedded store: created on first use
    with pytest.raises(StoreError, match="does not exist"):
        probe_store(f"sqlite:///{tmp_path}/no/such/folder/x.db")
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StoreError, match=dead.replace(".", r"\.")):
        probe_store(dead, timeout_s=2)
    db = f"postgresql://cemlab@127.0.0.1:{free_port()}/mlflow"
    with pytest.raises(StoreError, match="no connection to 127.0.0.1"):
        probe_store(db, timeout_s=2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:   # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cemlab ui"):
            probe_store(uri, timeout_s=2)
        assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------------------------------------
# A dead RAY_ADDRESS: cemlab sweep says so within 30 s
# ---------------------------------------------------------------------------------------------


def test_a_dead_ray_address_fails_within_30s_naming_it(cli_env):
    address = f"127.0.0.1:{free_port()}"
    code, out, seconds = cemlab({**cli_env, "RAY_ADDRESS": address}, "sweep", "attention_replacement",
                                "--scale", "smoke", "--no-report")
    assert code == 2, out[-2000:]
    assert seconds < 30, f"{seconds:.1f}s"
    assert f"RAY_ADDRESS={address}" in flat(out), out[-2000:]
    assert "Traceback" not in out


# ---------------------------------------------------------------------------------------------
# Dry runs look at the data; flags and key=value overrides in any order
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["flag-last", "flag-first", "flag-before-config", "overrides-before-config"])
def test_dry_run_checks_the_data_path_in_any_argument_order(cli_env, order):
    overrides = ["data.source=text", "data.path=/no/such/file"]
    args = {"flag-last": [str(DEFAULT_YAML), *overrides, "--dry-run"],
            "flag-first": [str(DEFAULT_YAML), "--dry-run", *overrides],
            "flag-before-config": ["--dry-run", str(DEFAULT_YAML), *overrides],
            "overrides-before-config": ["--dry-run", *overrides, str(DEFAULT_YAML)]}[order]
    code, out, _ = cemlab(cli_env, "train", *args)
    assert code == 2, out[-2000:]
    text = flat(out)
    assert "data.path" in text and "/no/such/file" in text, out[-2000:]
    assert "unrecognized arguments" not in out


def test_dry_run_names_an_empty_folder_and_a_missing_tokenizer_and_passes_good_data(cli_env, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = cemlab(cli_env, "train", str(DEFAULT_YAML), "data.source=text", f"data.path={empty}", "--dry-run")
    assert code == 2 and "data.path" in out and str(empty) in flat(out), out[-2000:]

    code, out, _ = cemlab(cli_env, "train", str(DEFAULT_YAML), f"data.tokenizer={tmp_path / 'no-tok'}", "--dry-run")
    assert code == 2 and "data.tokenizer" in out and str(tmp_path / "no-tok") in flat(out), out[-2000:]

    good = tmp_path / "corpus.txt"
    good.write_text("A paragraph of text.\n\nAnother one.\n")
    code, out, _ = cemlab(cli_env, "train", "--json", "--dry-run", str(DEFAULT_YAML), "data.source=text",
                          f"data.path={good}", "train.lr=1e-3")
    assert code == 0, out[-2000:]
    assert '"run_name"' in out


def test_sweep_preflight_names_a_missing_data_path_before_starting(cli_env, tmp_path):
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "scales.yaml").write_text((ROOT / "sweeps" / "scales.yaml").read_text())
    (sweeps / "mydata.yaml").write_text(textwrap.dedent(f"""\
        figure: Fig 0
        task: lm
        base:
          data: {{source: text, path: {tmp_path / 'missing.txt'}}}
        axes: {{size: [86m], lr: [2.0e-3]}}
        variants: [{{group: llama, label: llama}}]
        """))
    code, out, seconds = cemlab({**cli_env, "CEMLAB_SWEEPS_DIR": str(sweeps)}, "sweep", "mydata", "--scale", "smoke")
    assert code == 2, out[-2000:]
    text = flat(out)
    assert "data.path" in text and str(tmp_path / "missing.txt") in text, out[-2000:]
    assert "llama" in text   # which trial reads it
    assert not (Path(cli_env["CEMLAB_RUNS_DIR"]) / "mlflow" / "server.json").exists()   # nothing started
    assert seconds < 30


# ---------------------------------------------------------------------------------------------
# The local server starts while Ray starts: a server that fails is still the sweep's error
# ---------------------------------------------------------------------------------------------

# Stand-ins for `mlflow server` (its command, given the port): one that answers every GET with 200
# (health and API probe pass), one that exits while starting, as a broken store makes it.
ANSWERS = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """)
EXITS = "print('cannot open the store'); raise SystemExit(3)"


@pytest.fixture
def sweep_in_process(tmp_path, monkeypatch):
    """``run_sweep`` in this process up to its store and Ray: the server's command and Ray's
    start are stand-ins (``server_does``: ANSWERS or EXITS; ``ray_does``: what ``connect_ray``
    does). Returns (events, run): the order of server launches, Ray's start and its shutdown."""
    from cemlab import timing
    from cemlab.sweeps import runner
    from cemlab.sweeps.stages import execute
    from cemlab.tracking import server

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(ROOT / "sweeps"))
    for name in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(timing.STAGES_ENV, "")   # restored after the test: the runner names its file
    monkeypatch.setattr(timing, "_pending", [])  # the spans of a sweep that did not start stay here
    monkeypatch.setattr(execute, "quiet_tune", lambda search: None)
    events: list[str] = []

    def run(server_does: str, ray_does):
        def command(backend, artifacts, port):
            events.append("server launched")
            return [sys.executable, "-c", server_does, str(port)]

        def connect_ray(cpus):
            events.append("ray start")
            return ray_does()

        monkeypatch.setattr(server, "_server_command", command)
        monkeypatch.setattr(execute, "connect_ray", connect_ray)
        monkeypatch.setattr(runner, "_shutdown_ray", lambda: events.append("ray shutdown"))
        return runner.run_sweep("attention_replacement", "smoke")

    yield events, run
    server.stop_server()


def test_a_server_that_fails_while_ray_starts_is_the_error_and_that_ray_is_shut_down(sweep_in_process, tmp_path):
    from cemlab.tracking.server import ServerError

    events, run = sweep_in_process
    with pytest.raises(ServerError, match=r"exited while starting; log .*server\.log:\n(.|\n)*cannot open the store"):
        run(EXITS, lambda: True)
    # launched, then Ray started while it started; its two retries; the driver's Ray shut down
    assert events == ["server launched", "ray start", "server launched", "server launched", "ray shutdown"]
    assert not (tmp_path / "runs" / "logs").exists()


def test_when_ray_and_the_server_both_fail_the_server_is_named_as_before(sweep_in_process):
    from cemlab.sweeps.sweepfile.schema import SweepError
    from cemlab.tracking.server import ServerError

    def ray_fails():
        raise SweepError("RAY_ADDRESS=x: no Ray")

    events, run = sweep_in_process
    with pytest.raises(ServerError, match="exited while starting"):
        run(EXITS, ray_fails)
    assert "ray shutdown" not in events   # this driver started no Ray


def test_a_ray_that_fails_leaves_the_started_server_recorded(sweep_in_process):
    from cemlab.sweeps.sweepfile.schema import SweepError
    from cemlab.tracking import server

    def ray_fails():
        raise SweepError("RAY_ADDRESS=x: no Ray")

    events, run = sweep_in_process
    with pytest.raises(SweepError, match="no Ray"):
        run(ANSWERS, ray_fails)
    assert events == ["server launched", "ray start"]
    assert server.running_server() is not None   # as when the server had started before Ray


def test_the_data_step_waits_for_the_stores_answer_outside_the_servers_start(sweep_in_process, monkeypatch):
    # Inside the server's start (its lock held, its 120 s start deadline running) a long data step
    # (a large or streamed corpus) would keep other sweeps and `cemlab ui` waiting and have a server
    # that started fine ended; measured, running it there saved no wall time (docs/performance.md).
    from cemlab.sweeps.stages import preflight, record
    from cemlab.tracking import server

    class Opened(Exception):
        pass

    events, run = sweep_in_process
    probe = preflight.probe_store

    def probed(uri, *args, **kwargs):
        out = probe(uri, *args, **kwargs)
        events.append("store answered")
        return out

    def open_invocation(*args, **kwargs):
        events.append("open invocation")
        raise Opened

    def data_step(*args):
        events.append("data step")
        assert server.running_server() is not None   # started, recorded, and its lock released

    monkeypatch.setattr(preflight, "prepare_on_ray", data_step)
    monkeypatch.setattr(preflight, "probe_store", probed)
    monkeypatch.setattr(record, "open_invocation", open_invocation)
    with pytest.raises(Opened):
        run(ANSWERS, lambda: True)
    assert events == ["server launched", "ray start", "store answered", "data step", "open invocation",
                      "ray shutdown"]


def test_an_interrupt_while_ray_starts_ends_the_server_still_starting(sweep_in_process):
    from cemlab.tracking import server

    before, launched = set(server._STARTED), []

    def interrupted():
        launched.extend(set(server._STARTED) - before)
        raise KeyboardInterrupt

    events, run = sweep_in_process
    with pytest.raises(KeyboardInterrupt):
        run(ANSWERS, interrupted)
    assert len(launched) == 1 and launched[0] not in server._STARTED   # ended (and reaped)
    with pytest.raises(ProcessLookupError):
        os.kill(launched[0], 0)
    assert server.running_server() is None and not server.state_path().exists()
