"""The sweep's progress: one table for all trials, live in a terminal, plain lines otherwise.

:class:`SweepProgress` holds one :class:`Row` per trial (grid order) and is fed by the driver:
trials skipped because the store already has them (``reused`` from another sweep, ``done`` in an
earlier invocation of this one), and, through :class:`TuneCallback` (a ``ray.tune.Callback``
running in the driver), Tune's events: start, each validation report (step, loss, validation
perplexity), retries, completion, errors.

:class:`ProgressDisplay` shows it: in a terminal a ``rich.live.Live`` table redrawn in place
(twice a second), fitted to the terminal's width and height by ``cemlab.sweeps.stages.progress_view``,
with the progress line (count, elapsed, smoothed time left) always last; otherwise (CI, a log
file) one line per change of a trial's status, one per validation report of a trial (with the
count and the time left) and a summary line every ``interval`` seconds. Trials write their own output to log files, so this is all the sweep prints,
with a line when it starts (:func:`print_start`) and its outcome at the end (:func:`print_end`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ray.tune import Callback
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from cemlab.links import COMMAND, PATH, print_link
from cemlab.sweeps.look_levels import seeds_given_note
from cemlab.sweeps.stages.progress_view import looks_made
from cemlab.sweeps.trial import tune_report as tr
from cemlab.sweeps.stages.progress_view import Column, choose_rows, fit_columns, fit_height, trial_labels
from cemlab.sweeps.plan import plan_trial
from cemlab.tasks import get_task
from cemlab.tracking import schema
from cemlab.tracking.conventions import run_link
from cemlab.train.plan import duration as _duration

QUEUED = "queued"
RUNNING = "running"
RETRYING = "retrying"
REUSED = "reused"      # the store had a finished run of this config from another sweep invocation
DONE = "done"          # finished in an earlier invocation of this sweep (same parent run)
RECORDED = "recorded"  # the runs folder kept a result the store lacked: recorded into it, not trained
WAITED = "waited"      # another sweep trained this config meanwhile (the trial waited on its lock): its run
MISSING = "missing"    # the trial said it had a result, but the store holds no such run after the sweep
#: Statuses that mean nothing was trained in this invocation.
NOT_TRAINED = (REUSED, DONE, RECORDED, WAITED)
#: Statuses a trial ends with (besides REUSED and DONE): finished, diverged, stopped, failed.
FINAL = (schema.STATUS_FINISHED, schema.STATUS_DIVERGED, schema.STATUS_STOPPED, schema.STATUS_FAILED,
         schema.STATUS_INTERRUPTED, REUSED, DONE, RECORDED, WAITED, MISSING)
STYLE = {schema.STATUS_FINISHED: "green", DONE: "green", REUSED: "cyan", RECORDED: "cyan", WAITED: "cyan",
         MISSING: "bold red", schema.STATUS_DIVERGED: "yellow",
         schema.STATUS_STOPPED: "magenta", schema.STATUS_FAILED: "bold red", schema.STATUS_INTERRUPTED: "red",
         RUNNING: "bold blue", RETRYING: "bold yellow", QUEUED: "dim"}
#: Seconds over which the shown time left follows a new estimate (see SweepProgress.eta).
ETA_SMOOTHING = 30.0


@dataclass
class Row:
    """One trial in the table."""

    trial_id: str
    variant: str
    size: str
    label: str = ""                   # what tells it apart from the other trials (progress_view)
    status: str = QUEUED
    step: int = 0
    total: int = 0
    loss: float = math.nan
    metric: str = ""                  # the task's headline metric (``ppl``, ``rmse``): what val and test hold
    val: float = math.nan             # its latest validation value
    test: float = math.nan            # its test value
    run_id: str = ""
    attempts: int = 0
    started: float | None = None
    ended: float | None = None
    seconds: float | None = None      # training time the trial itself measured
    note: str = ""                    # error message, log path, what was reused
    reported_step: int = -1           # the step of its last validation line (plain output)

    flops: float | None = None        # training FLOPs of the whole trial (cemlab plan's count)

    @property
    def elapsed(self) -> float | None:
        if self.started is None:
            return self.seconds
        return (self.ended or time.time()) - self.started

    @property
    def fraction(self) -> float:
        """Share of its training done: 1 when it ended, else steps done / total steps."""
        if self.status in FINAL:  # a trial ASHA stopped trained only part of its steps
            return self.step / self.total if self.status == schema.STATUS_STOPPED and self.total else 1.0
        return min(1.0, self.step / self.total) if self.total else 0.0


def _num(x: float, fmt: str = "{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


class SweepProgress:
    """The state of every trial of one sweep invocation (thread-safe)."""

    def __init__(self, title: str):
        self.title = title
        self.rows: dict[str, Row] = {}
        self.trials: dict[str, Any] = {}     # trial id -> cemlab.sweeps.sweepfile.schema.Trial
        self.lock = threading.Lock()
        self.events: list[str] = []          # status changes not yet printed (plain mode)
        self.started = time.time()
        # The metric shown: the headline metric of the trials' task (``Task.metric``), set as they are added.
        self.task = get_task("lm")
        #: search: optuna cells -> [samples still to be drawn, FLOPs of one] (rows appear as they start)
        self.expected: dict[str, list] = {}
        self._eta: tuple[float, float, float] | None = None  # (first estimate, last, time left shown): eta()

    def _use_task(self, name: str) -> None:
        self.task = get_task(name)

    @property
    def metric(self) -> str:
        return self.task.metric

    # -- updates ------------------------------------------------------------------------------
    def add(self, trial, flops: float | None = None) -> Row:
        """A trial's row (made once); ``flops``: its training FLOPs (default: counted as ``cemlab
        plan`` counts them), for the estimate of the time left."""
        return self.add_many([trial], None if flops is None else [flops])[0]

    def add_many(self, trials: list, flops: list[float | None] | None = None) -> list[Row]:
        """Rows for ``trials``, added at once, so that the table never counts a part of them."""
        new = [t for t in trials if t.trial_id not in self.rows]
        counted = {t.trial_id: f for t, f in zip(trials, flops)} if flops is not None else {}
        counted.update({t.trial_id: self._flops(t) for t in new if t.trial_id not in counted})
        with self.lock:
            for trial in new:
                if trial.trial_id in self.rows:
                    continue
                self._use_task(getattr(trial, "task", "lm"))
                row = Row(trial.trial_id, trial.variant, trial.size or "-", metric=self.task.metric)
                row.flops = counted[trial.trial_id]
                self.rows[trial.trial_id] = row
                self.trials[trial.trial_id] = trial
                cell = getattr(getattr(trial, "config", None), "tracking", None)
                cell = cell.tags.get(schema.SEARCH_CELL) if cell is not None else None
                if cell in self.expected and self.expected[cell][0] > 0:
                    self.expected[cell][0] -= 1
            if new:
                for tid, label in trial_labels(list(self.trials.values())).items():
                    self.rows[tid].label = label
            return [self.rows[t.trial_id] for t in trials]

    def expect(self, cell, samples: int, flops: float | None = None) -> None:
        """``samples`` more trials of a ``search: optuna`` cell will run (their rows appear as they start)."""
        with self.lock:
            self.expected[cell.trial_id] = [samples, flops if flops is not None else self._flops(cell)]

    def _flops(self, trial) -> float | None:
        try:
            return plan_trial(trial).flops
        except Exception:  # an estimate only: a trial without a count leaves the estimate out
            return None

    def set_status(self, trial_id: str, status: str, note: str = "", **values: Any) -> None:
        with self.lock:
            row = self.rows[trial_id]
            changed = row.status != status
            row.status = status
            if note or changed:
                row.note = note
            for k, v in values.items():
                setattr(row, k, v)
            now = time.time()
            if status == RUNNING and row.started is None:
                row.started = now
            if status in FINAL and row.started is not None:
                row.ended = now
            if changed:
                self.events.append(self._event_line(row))

    def update(self, trial_id: str, result: dict[str, Any]) -> None:
        """A result reported by the trial (see ``cemlab.sweeps.trial.tune_report``). A validation result at
        a new step becomes one line of the plain output."""
        with self.lock:
            row = self.rows[trial_id]
            row.step = int(result.get(tr.STEP_KEY, row.step) or row.step)
            row.total = int(result.get(tr.TOTAL_KEY, row.total) or row.total)
            row.run_id = str(result.get(tr.RUN_ID_KEY) or row.run_id)
            val_key, test_key = self.task.val_metric, self.task.test_metric
            for attr, key in (("loss", schema.TRAIN_LOSS), ("val", val_key), ("test", test_key)):
                if isinstance(result.get(key), (int, float)):
                    setattr(row, attr, float(result[key]))
            if isinstance(result.get(tr.SECONDS_KEY), (int, float)):
                row.seconds = float(result[tr.SECONDS_KEY])
            validated = isinstance(result.get(val_key), (int, float)) and row.step != row.reported_step
            if validated:
                row.reported_step = row.step
        if validated:
            line = (f"{time.strftime('%H:%M:%S')}  {'validated':<11}  {row.label or row.trial_id}  step "
                    f"{row.step}/{row.total or '?'}  loss {_num(row.loss)}  val {self.metric} "
                    f"{_num(row.val, self._fmt)}  [{self.summary(short=True)}]")
            with self.lock:
                self.events.append(line)

    def counts(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for row in self.rows.values():
                out[row.status] = out.get(row.status, 0) + 1
            return out

    # -- rendering ----------------------------------------------------------------------------
    def _event_line(self, row: Row) -> str:
        parts = [time.strftime("%H:%M:%S"), f"{row.status:<11}", row.trial_id]
        if row.status in (schema.STATUS_FINISHED,) + NOT_TRAINED and not math.isnan(row.test):
            parts.append(f"test {self.metric} {self.task.format_metric(row.test)}")
        if row.status in FINAL and row.elapsed is not None and row.status not in (REUSED, DONE, RECORDED):
            parts.append(f"in {_duration(row.elapsed)}")
        if row.note:
            parts.append(f"({row.note})")
        return "  ".join(parts)

    def take_events(self) -> list[str]:
        with self.lock:
            events, self.events = self.events, []
            return events

    def time_left(self, now: float | None = None) -> float | None:
        """Seconds until every trial has run, from the FLOPs this invocation trained so far per
        second of wall time (trials run concurrently, so a rate of the whole sweep, not a mean
        duration) and the FLOPs left: queued trials, the unfinished share of running ones, samples a
        search cell has yet to draw. None before any training here finished a step, or without counts."""
        now = now or time.time()
        with self.lock:
            ran = [r for r in self.rows.values() if r.started is not None]
            if not ran or any(r.flops is None for r in self.rows.values() if r.status not in (REUSED, DONE)):
                return None
            done = sum(r.flops * r.fraction for r in ran)
            wall = now - min(r.started for r in ran)
            left = sum(r.flops * (1 - r.fraction) for r in self.rows.values() if r.status not in FINAL)
            left += sum(n * f for n, f in self.expected.values() if n and f)
        if left == 0:
            return 0.0
        return left / (done / wall) if done > 0 and wall > 0 else None

    def eta(self, now: float | None = None) -> float | None:
        """The time left as shown: :meth:`time_left` smoothed. Between two estimates the shown
        value counts down with the clock and moves towards the new estimate by the share
        ``1 - exp(-dt / tau)``, ``tau`` = ``ETA_SMOOTHING`` seconds (less while the estimate is
        younger than twice that, when the first estimates are still rough), so a finished trial or
        a validation report moves it by seconds, not minutes, while a lasting change still shows."""
        now = now or time.time()
        raw = self.time_left(now)
        if raw is None or raw == 0 or self._eta is None:
            self._eta = None if raw is None else (now, now, raw)
            return raw
        first, then, shown = self._eta
        tau = max(1e-3, min(ETA_SMOOTHING, (now - first) / 2))
        carried = max(0.0, shown - (now - then))
        shown = carried + (1 - math.exp(-max(0.0, now - then) / tau)) * (raw - carried)
        self._eta = (first, now, shown)
        return shown

    @property
    def _fmt(self) -> str:
        return "{:" + self.task.metric_format + "}"

    def summary(self, short: bool = False) -> str:
        """The progress line: trials ended of all (queued, and samples still to be drawn, included),
        the count by status, elapsed time and the time left (``short``: without title and counts)."""
        counts = self.counts()
        total = sum(counts.values()) + sum(n for n, _ in self.expected.values())
        if not total:
            return f"{self.title}: deciding which trials to run"
        ended = sum(n for s, n in counts.items() if s in FINAL)
        order = [RUNNING, RETRYING, QUEUED, schema.STATUS_FINISHED, DONE, REUSED, RECORDED, WAITED,
                 schema.STATUS_DIVERGED, schema.STATUS_STOPPED, schema.STATUS_FAILED, schema.STATUS_INTERRUPTED,
                 MISSING]
        parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
        left = self.eta()
        eta = "" if ended == total else f", about {_duration(left)} left" if left is not None else ", time left: estimating"
        if short:
            return f"{ended}/{total} done, elapsed {_duration(time.time() - self.started)}{eta}"
        return (f"{self.title}: {ended}/{total} trials done ({', '.join(parts)}), elapsed "
                f"{_duration(time.time() - self.started)}{eta}")

    def running_lines(self) -> list[str]:
        with self.lock:
            return [f"  {r.label or r.trial_id}: step {r.step}/{r.total or '?'} loss {_num(r.loss)} val {self.metric} "
                    f"{_num(r.val, self._fmt)}" for r in self.rows.values() if r.status in (RUNNING, RETRYING)]

    def _columns(self) -> list[Column]:
        """The table's columns in display order, each with its priority (see ``progress_view``)."""
        fmt, m = self._fmt, self.metric

        def status(r: Row) -> Text:
            return Text(r.status + (f" +{r.attempts - 1}" if r.attempts > 1 else ""), style=STYLE.get(r.status, ""))

        def step(r: Row) -> str:
            return f"{r.step}/{r.total}" if r.total else (str(r.step) if r.step else "-")

        return [Column("trial", "left", lambda r: r.label or r.trial_id, 0),
                Column("status", "left", status, 1), Column("step", "right", step, 2),
                Column("loss", "right", lambda r: _num(r.loss), 6),
                Column(f"val {m}", "right", lambda r: _num(r.val, fmt), 4),
                Column(f"test {m}", "right", lambda r: _num(r.test, fmt), 3),
                Column("time", "right", lambda r: _duration(r.elapsed), 5),
                Column("trial id (log name)", "left", lambda r: r.trial_id, 7)]

    def view(self, width: int, height: int | None = None, console: Console | None = None) -> Group:
        """The title, the table fitted to ``width`` (and ``height`` lines: the rows that do not fit
        counted on one line), and the progress line last (see ``cemlab.sweeps.stages.progress_view``)."""
        with self.lock:
            rows = list(self.rows.values())
        summary = Text(self.summary())
        title = Text(self.title, style="bold")

        def build(limit: int) -> Group:
            shown = choose_rows(rows, limit, lambda r: r.status in (RUNNING, RETRYING, schema.STATUS_FAILED),
                                lambda r: r.ended if r.status in FINAL else None, lambda r: r.status == QUEUED)
            parts: list[Any] = [title, fit_columns(self._columns(), shown, width)]
            if len(shown) < len(rows):
                rest: dict[str, int] = {}
                for r in rows:
                    if r not in shown:
                        rest[r.status] = rest.get(r.status, 0) + 1
                parts.append(Text(f"... {len(rows) - len(shown)} more: "
                                  + ", ".join(f"{n} {s}" for s, n in rest.items()), style="dim"))
            return Group(*parts, summary)

        if height is None:
            return build(len(rows))
        console = console or Console(width=width, height=height)
        return fit_height(console, build, len(rows), height)

    def failures(self) -> list[Row]:
        with self.lock:
            return [r for r in self.rows.values() if r.status == schema.STATUS_FAILED]


class ProgressDisplay:
    """Shows a :class:`SweepProgress` while the sweep runs (a context manager)."""

    def __init__(self, progress: SweepProgress, console: Console, live: bool | None = None, interval: float = 30.0):
        self.progress, self.console = progress, console
        self.live = console.is_terminal if live is None else live
        self.interval = interval
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _renderable(self):
        """The view fitted to the terminal (one line spare for the cursor); plain-mode lines dropped."""
        self.progress.take_events()
        width, height = self.console.size
        return self.progress.view(width, max(8, height - 1), self.console)

    def __enter__(self) -> "ProgressDisplay":
        if self.live:
            self._live = Live(console=self.console, refresh_per_second=2, get_renderable=self._renderable,
                              transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._thread = threading.Thread(target=self._plain_loop, name="cemlab-progress", daemon=True)
            self._thread.start()
        return self

    def _plain_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(1.0):
            self._print_events()
            if time.monotonic() - last >= self.interval:
                last = time.monotonic()
                self.console.print(self.progress.summary(), highlight=False)
                for line in self.progress.running_lines():
                    self.console.print(line, highlight=False)

    def _print_events(self) -> None:
        for line in self.progress.take_events():
            self.console.print(line, highlight=False)

    def __exit__(self, *exc) -> bool:
        if self._live is not None:
            self._live.update(self.progress.view(self.console.size.width))  # every row: the final table
            self._live.stop()
        else:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._print_events()
        return False


class TuneCallback(Callback):
    """Tune events -> table rows (runs in the driver). ``resolve`` maps a Tune config to its
    cemlab trial. Tune pickles its callbacks with the experiment state: the copy is inert."""

    def __init__(self, progress: SweepProgress, resolve: Callable[[dict], Any], log_of: Callable[[str], Any] = str):
        self.progress, self.resolve, self.log_of = progress, resolve, log_of
        self.by_tune_id: dict[str, str] = {}
        self.errors: dict[str, str] = {}      # cemlab trial id -> Tune's error file

    def __getstate__(self) -> dict:
        return {"progress": None, "resolve": None, "log_of": str, "by_tune_id": {}, "errors": {}}

    def _id(self, trial) -> str | None:
        if self.progress is None:
            return None
        if trial.trial_id not in self.by_tune_id:
            t = self.resolve(trial.config)
            self.progress.add(t)
            self.by_tune_id[trial.trial_id] = t.trial_id
        return self.by_tune_id[trial.trial_id]

    def on_trial_start(self, iteration, trials, trial, **info):
        tid = self._id(trial)
        if tid is not None:
            self.progress.set_status(tid, RUNNING, attempts=self.progress.rows[tid].attempts + 1)

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.on_trial_start(iteration, trials, trial, **info)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        tid = self._id(trial)
        if tid is not None:
            self.progress.update(tid, result)

    def on_trial_recover(self, iteration, trials, trial, **info):
        tid = self._id(trial)
        if tid is not None:
            self.progress.set_status(tid, RETRYING, note="retrying from its last checkpoint")

    def on_trial_error(self, iteration, trials, trial, **info):
        tid = self._id(trial)
        if tid is not None:
            self.errors[tid] = str(getattr(trial, "error_file", "") or "")
            self.progress.set_status(tid, schema.STATUS_FAILED, note=f"log {self.log_of(tid)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        tid = self._id(trial)
        if tid is not None:
            self.progress.set_status(tid, (trial.last_result or {}).get(tr.STATUS_KEY) or schema.STATUS_STOPPED)


def print_start(inv, trials: list, console: Console, other_pid: int | None = None) -> None:
    """The sweep's first lines: what it runs, where it logs; another driver of it running now
    (``inv``: a ``cemlab.sweeps.stages.invocation.Invocation``)."""
    spec, scale = inv.spec, inv.scale
    what = (f"{len(trials)} grid cell(s), learning rate searched ({trials[0].search.samples} samples each)"
            if spec.search == "optuna" and trials else f"{len(trials)} trials")
    console.print(f"Sweep {spec.name} ({spec.figure}), scale {scale}: {what}; parent run {inv.parent_run_id}"
                  f"{' (resumed)' if inv.parent_reopened else ''}", highlight=False, markup=False)
    print_link("  MLflow, the parent run (its trials are listed as they start):",
               run_link(inv.uri, inv.experiment_id, inv.parent_run_id), console=console)
    print_link("  logs:", inv.log_dir, PATH, console=console)
    if note := seeds_given_note(spec, scale, trials):
        console.print(f"  seeds: {note}", highlight=False, markup=False)
    if inv.other_driver is not None:
        console.print(f"note: another `cemlab sweep {spec.name} --scale {scale}` is running "
                      f"(pid {other_pid or '?'}, parent run {inv.other_driver or 'not known yet'}); trials it "
                      f"is training wait for it and take its result", highlight=False)


def print_end(result, console: Console) -> None:
    """The sweep's outcome (``result``: a ``cemlab.sweeps.stages.invocation.SweepResult``): counts, failures
    with their logs, trials recorded or taken from another sweep, how to resume, the MLflow link."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts().items()))
    checked = " (checked against the store)" if result.counts_checked else ""
    console.print(f"Sweep {result.sweep} at scale {result.scale}: {counts or 'no trials'}{checked} in "
                  f"{_duration(result.seconds)}", highlight=False)
    for line in looks_made(result):
        console.print(f"  {line}", highlight=False, markup=False)
    for o in result.failed:
        console.print(f"  {o.status}: {o.trial.trial_id}: {o.error or 'see its log'}", highlight=False, markup=False)
        print_link("          log:", o.log_path, PATH, console=console)
    for o in result.outcomes:
        if o.status == RECORDED:
            console.print(f"  recorded: {o.trial.trial_id}: {o.note} (run {o.run_id})", highlight=False)
    if result.concurrent_with:
        n = sum(o.status == WAITED for o in result.outcomes)
        console.print(f"  waited: {n} trial(s) were trained meanwhile by another sweep (parent run(s) "
                      f"{', '.join(result.concurrent_with)}); this sweep took their runs", highlight=False)
    if result.store_error:
        console.print(f"Stopped: {result.store_error}. Finished trials are kept in the store, stopped ones keep "
                      f"their checkpoints.", highlight=False, markup=False)
        print_link("Once the server answers again, to resume, run:", result.command, COMMAND, console=console)
    elif result.interrupted:
        print_link("Interrupted (finished trials are kept, interrupted ones continue from their checkpoints); "
                   "to resume, run:", result.command, COMMAND, console=console)
    print_link("MLflow, the parent run and its trials:", result.dashboard_url(), console=console)
