"""Where a sweep's wall time goes: stage timestamps, written as JSON lines, and the table they add
up to (``scripts/measure-timings.py stages`` prints it; docs/performance.md explains it).

The sweep driver names the file in ``$CEMLAB_STAGES_FILE`` (``<runs>/logs/<sweep>-<scale>/stages.jsonl``)
and every trial process inherits it; without the variable nothing is recorded. A stage is a span
``{"stage", "start", "end", "trial", "pid"}`` (wall-clock seconds, ``time.time()``, so that spans of
different processes line up); :func:`stage` records one around a block. Spans are kept in memory
and appended to the file by :func:`flush` (once per trial and once at the driver's end), so the
step loop never writes a file.

Stages of the driver: ``driver start`` (the process start to ``run_sweep``: Python and the CLI's
imports), ``sweep file and store`` (the sweep expanded, the store checked, the local MLflow server
started), ``ray start`` (while a local server that has to be started boots: inside the span before),
``data step``, ``open invocation``, ``trials`` (while trials run), ``finish``, ``ray shutdown``,
``report``. Stages of a trial (``trial`` set by :func:`set_trial`): ``trial`` (Tune's start to its
end, seen by the driver; Tune starts it once its worker has started), ``worker start`` (the worker
process's start to the trainable, for the first trial of a process only), ``trial process`` (the
trainable's own span), ``imports``, ``data load``,
``model build``, ``run start`` (the store's decision, the MLflow run and its first logs),
``trainer setup``, ``fit``, inside it ``validation``, ``checkpoint`` and ``step logging``; then ``test``
and ``run end`` (the final logs, the run's end, ``state.json``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Iterator

#: The environment variable naming the stages file (unset: nothing is recorded).
STAGES_ENV = "CEMLAB_STAGES_FILE"
#: The stages file's name in a sweep's log folder.
STAGES_NAME = "stages.jsonl"

_pending: list[dict] = []
_totals: dict[tuple[str, str | None], float] = {}
_trial: str | None = None


def enabled() -> bool:
    return bool(os.environ.get(STAGES_ENV))


def start_file(path: str | Path) -> None:
    """Record this process's stages (and its child processes') into ``path`` from now on."""
    os.environ[STAGES_ENV] = str(path)


def set_trial(trial_id: str | None) -> None:
    """The trial the stages of this process belong to from now on (None: the driver)."""
    global _trial
    _trial = trial_id


def record(name: str, start: float, end: float | None = None, trial: str | None = None) -> None:
    """Keep one span (``time.time()`` seconds) of this process; written by :func:`flush`."""
    if not enabled():
        return
    _pending.append({"stage": name, "start": start, "end": time.time() if end is None else end,
                     "trial": trial if trial is not None else _trial, "pid": os.getpid()})


def add(name: str, seconds: float) -> None:
    """Add ``seconds`` to stage ``name`` of the current trial: for a stage of every step, kept as one
    total (``{"stage", "seconds", "trial", "pid"}``) rather than a span per step."""
    if enabled():
        key = (name, _trial)
        _totals[key] = _totals.get(key, 0.0) + seconds


@contextlib.contextmanager
def stage(name: str, trial: str | None = None) -> Iterator[None]:
    """Record the span of the block as stage ``name`` (also when it raises)."""
    if not enabled():
        yield
        return
    t0 = time.time()
    try:
        yield
    finally:
        record(name, t0, trial=trial)


def flush() -> None:
    """Append the kept spans to ``$CEMLAB_STAGES_FILE``."""
    global _pending
    path = os.environ.get(STAGES_ENV)
    spans = _pending + [{"stage": n, "seconds": t, "trial": trial, "pid": os.getpid()}
                        for (n, trial), t in _totals.items()]
    _pending = []
    _totals.clear()
    if not path or not spans:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("".join(json.dumps(s) + "\n" for s in spans))


def process_start() -> float:
    """When this process started (``time.time()`` seconds), from ``/proc`` where there is one."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # no psutil: the first import of this module is close enough
        return _IMPORTED


_IMPORTED = time.time()
_trial_start: float | None = None


def set_trial_start(t: float) -> None:
    """When the current trial began holding its slot (``time.time()`` seconds): the worker process's
    start for a worker's first trial, the trainable's start for a reused worker's next one."""
    global _trial_start
    _trial_start = t


def trial_start() -> float:
    """When the current trial began holding its slot (:func:`set_trial_start`; else this process's start),
    the denominator of the GPU's busy share (``cemlab.train.callbacks.gpu_usage``)."""
    return _trial_start if _trial_start is not None else process_start()


# -- the table --------------------------------------------------------------------------------------
DRIVER_STAGES = ["driver start", "sweep file and store", "ray start", "data step", "open invocation", "finish", "ray shutdown", "report"]
TRIAL_STAGES = ["worker start", "imports", "data load", "model build", "run start", "trainer setup", "training", "validation",
                "checkpoint", "step logging", "test", "run end"]
INSIDE_FIT = ("validation", "checkpoint", "step logging")


def read_spans(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def concurrency(spans: list[dict]) -> int:
    """The most trials that ran at once (their ``trial`` spans overlapping)."""
    trials = [s for s in spans if s["stage"] == "trial"]
    events = sorted([(s["start"], 1) for s in trials] + [(s["end"], -1) for s in trials])
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return max(1, most)


def summarize(spans: list[dict], slots: int | None = None) -> dict:
    """Seconds per stage and the slot-time they add up to. ``slots``: trials at once (default: the
    most that overlapped). A driver stage holds every slot; a trial stage one. ``training`` is the
    ``fit`` span less the validation, checkpoints and step logging inside it; ``around the trial``
    is a trial's span that its process did not account for (Tune scheduling, worker start, the
    result's way back); ``slots idle`` is the slot-time of the ``trials`` stage that no trial held.
    Driver stages that overlap share their common seconds (:func:`driver_seconds`);
    ``driver_overlap``: the seconds by which the driver stages' spans add up to more than the wall
    time they cover (what running them at once saved)."""
    slots = slots or concurrency(spans)
    by = lambda name, who=None: [s for s in spans if s["stage"] == name and (who is None or (s["trial"] is None) == (who == "driver"))]
    dur = lambda ss: sum(s["seconds"] if "seconds" in s else s["end"] - s["start"] for s in ss)
    starts = [s["start"] for s in spans if "start" in s]
    ends = [s["end"] for s in spans if "end" in s]
    wall = max(ends) - min(starts)
    driver = [s for s in spans if s["trial"] is None and s["stage"] in DRIVER_STAGES + ["trials"] and "start" in s]
    seconds: dict[str, float] = driver_seconds(driver)
    trial_total = dur(by("trial"))
    process_total = dur(by("trial process"))
    for name in TRIAL_STAGES:
        seconds[name] = dur(by(name, "trial")) if name != "training" else 0.0
    seconds["training"] = dur(by("fit", "trial")) - sum(seconds[n] for n in INSIDE_FIT)
    seconds["other in the trial process"] = process_total - sum(seconds[n] for n in TRIAL_STAGES
                                                                if n != "worker start")
    seconds["around the trial"] = trial_total - process_total
    seconds["slots idle"] = seconds["trials"] * slots - trial_total - seconds["worker start"]
    driver_rest = wall - sum(seconds[n] for n in DRIVER_STAGES) - seconds["trials"]
    seconds["driver, other"] = driver_rest
    slot_time = wall * slots
    share = {}
    for name, s in seconds.items():
        share[name] = s * slots / slot_time if (name in DRIVER_STAGES or name == "driver, other") else s / slot_time
    share["trials"] = seconds["trials"] * slots / slot_time
    return {"wall": wall, "slots": slots, "slot_time": slot_time, "trials": len(by("trial")),
            "seconds": seconds, "share": share, "training_share": seconds["training"] / slot_time,
            "driver_overlap": dur(driver) - sum(seconds[n] for n in DRIVER_STAGES + ["trials"])}


def driver_seconds(spans: list[dict]) -> dict[str, float]:
    """Seconds per driver stage, each second of the driver's wall time counted once: where stages
    overlap (Ray starts while the store's server does), the seconds they share are split evenly
    among them. Without overlaps, each stage's spans added up."""
    seconds = {name: 0.0 for name in DRIVER_STAGES + ["trials"]}
    edges = sorted({t for s in spans for t in (s["start"], s["end"])})
    for a, b in zip(edges, edges[1:]):
        running = {s["stage"] for s in spans if s["start"] <= a and s["end"] >= b}
        for name in running:
            seconds[name] += (b - a) / len(running)
    return seconds


ROWS = (["driver start", "sweep file and store", "ray start", "data step", "open invocation"]
        + ["around the trial"] + TRIAL_STAGES + ["other in the trial process", "slots idle"]
        + ["finish", "ray shutdown", "report", "driver, other"])


def format_table(summaries: dict[str, dict]) -> str:
    """The stage table of one or more summaries (label -> :func:`summarize`), side by side."""
    labels = list(summaries)
    head = "| stage | " + " | ".join(f"{lb}: s | {lb}: share" for lb in labels) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(labels)]
    for row in ROWS:
        cells = []
        for lb in labels:
            s = summaries[lb]
            cells += [f"{s['seconds'].get(row, 0.0):.1f}", f"{100 * s['share'].get(row, 0.0):.1f}%"]
        name = f"per trial: {row}" if row in TRIAL_STAGES or row in ("around the trial", "other in the trial process") else row
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for key, fmt in (("wall", "{:.1f} s"), ("slots", "{}"), ("slot_time", "{:.1f} s"), ("trials", "{}"),
                     ("training_share", "{:.1%}"), ("driver_overlap", "{:.1f} s")):
        label = {"wall": "wall time", "slots": "trials at once", "slot_time": "slot-time (wall x trials at once)",
                 "trials": "trials run", "training_share": "training share of the slot-time",
                 "driver_overlap": "driver stages at once (seconds shared)"}[key]
        lines.append(f"| **{label}** | " + " | ".join(f"{fmt.format(summaries[lb].get(key, 0.0))} | " for lb in labels) + " |")
    return "\n".join(lines)
