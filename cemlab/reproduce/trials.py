"""Rerun a sample of a committed report's trials and judge them against the stated guarantee
(``cemlab reproduce``; the guarantee and its measurements: docs/reproducibility.md).

1. :func:`read_committed`: the trials of a report folder's ``trials.csv`` (the main job's folder, a
   ladder rung's folder) or of a store's trial runs, with their test and validation metrics and the
   environment they recorded (``cemlab.tracking.environment``; rows from before it was recorded
   have none).
2. :func:`choose`: named trials, or a random sample of those with a result, by a printed seed.
3. :func:`rebuild`: each trial as this checkout's sweep file makes it (the seed and the learning
   rate given as axis overrides, as ``cemlab sweep`` reruns one); refused before any training when
   its config hash is not the committed one (the code or the sweep file changed what it trains).
4. :func:`expected`: what the guarantee promises for it: bit-identical numbers when the committed
   run recorded this machine's environment kind, else a relative difference of at most
   :data:`CROSS_KIND_RTOL` (the committed run's environment differs or is unknown).
5. :func:`rerun`: the trial trained again, in this process, in a fresh runs folder and store (never
   the user's: a store with the trial would hand its run back instead of training).
"""

from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.tracking import environment as env_mod

#: Largest relative difference of a test or validation metric accepted between runs of one config on
#: different environment kinds (or where the committed run did not record its environment): about twice
#: the largest measured, 0.127 (the main job's 162 trials on an Intel Xeon against its committed run on
#: an AMD EPYC: a CEM attention trial at lr 4e-3; 17 of 162 beyond 2e-2, the median 5.5e-6; every large
#: one at a high rate, where training amplifies a last-bit difference), docs/reproducibility.md.
CROSS_KIND_RTOL = 0.25
#: Columns of a committed trial that are read (``trials.csv``); the environment columns are optional.
NEEDED = ("sweep", "scale", "trial_id", "config_hash", "seed", "lr", "status", "value", "val")


class ReproduceError(SweepError):
    """Bad input to ``cemlab reproduce``, found before anything trains; the message names the fix."""


@dataclass
class Committed:
    """One committed trial: where it came from, its metrics and the environment it recorded."""

    sweep: str
    scale: str
    trial_id: str
    config_hash: str
    seed: int
    lr: float
    status: str
    test: float
    val: float
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """A rerun next to its committed trial, and whether it holds the guarantee."""

    committed: Committed
    status: str
    test: float
    val: float
    seconds: float
    exact: bool              # the guarantee asked for bit-identical numbers
    rtol: float

    def rel(self, which: str) -> float:
        a, b = getattr(self.committed, which), getattr(self, which)
        if not (math.isfinite(a) and math.isfinite(b)):
            return 0.0 if (math.isnan(a) and math.isnan(b)) else math.inf
        return abs(b - a) / abs(a) if a else abs(b - a)

    @property
    def holds(self) -> bool:
        if self.status != self.committed.status:
            return False
        if self.exact:
            return _same(self.test, self.committed.test) and _same(self.val, self.committed.val)
        return self.rel("test") <= self.rtol and self.rel("val") <= self.rtol


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def read_committed(source: str) -> list[Committed]:
    """The trials of ``source``: a report folder holding ``trials.csv``, or an MLflow store (a
    tracking URI, or a runs folder holding ``mlflow/mlflow.db``)."""
    p = Path(source)
    if p.is_dir() and (p / "trials.csv").is_file():
        return _from_csv(p / "trials.csv")
    if p.is_dir() and (p / "mlflow" / "mlflow.db").is_file():
        return _from_store(f"sqlite:///{(p / 'mlflow' / 'mlflow.db').resolve().as_posix()}")
    if "://" in source:
        return _from_store(source)
    if p.is_dir():
        raise ReproduceError(f"{source}: no trials.csv and no mlflow/mlflow.db in this folder; give a report folder "
                             "(e.g. docs/main-job/recursion_ablation, docs/ladder/recursion_ablation/workstation-tpp5), "
                             "a runs folder or a tracking URI")
    raise ReproduceError(f"{source}: no such folder; give a report folder (e.g. docs/main-job/recursion_ablation), "
                         "a runs folder or a tracking URI")


def _from_csv(path: Path) -> list[Committed]:
    import pandas as pd

    df = pd.read_csv(path, dtype={"config_hash": str, "trial_id": str, "run_id": str}, keep_default_na=True)
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise ReproduceError(f"{path}: column(s) {missing} missing; cemlab reproduce reads a report's trials.csv "
                             "(written by cemlab report), which has them")
    out = []
    for r in df.to_dict("records"):
        env = {c: ("" if _blank(r.get(c)) else str(r[c])) for c in env_mod.TAGS}
        out.append(Committed(str(r["sweep"]), str(r["scale"]), str(r["trial_id"]), str(r["config_hash"]),
                             int(r["seed"]), float(r["lr"]), str(r["status"]), _num(r["value"]), _num(r["val"]), env))
    return out


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v) == ""


def _from_store(uri: str) -> list[Committed]:
    from cemlab.tasks import TASKS
    from cemlab.tracking import schema
    from cemlab.tracking import store as st

    client = st.get_client(uri)
    runs = st.search_runs(client, st.all_experiment_ids(client), f"tags.`{schema.ROLE}` = 'trial'")
    out = []
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        task = TASKS.get(tags.get(schema.TASK, "lm"))
        seed = tags.get(schema.axis_tag("seed"))
        lr = tags.get(schema.axis_tag("lr"))
        if seed is None or lr is None or schema.TRIAL_ID not in tags:
            continue
        out.append(Committed(tags.get(schema.SWEEP, ""), tags.get(schema.SCALE, ""), tags[schema.TRIAL_ID],
                             tags.get(schema.CONFIG_HASH, ""), int(float(seed)), float(lr), st.run_status(run),
                             float(metrics.get(task.test_metric, math.nan)),
                             float(metrics.get(task.val_metrics[0], math.nan)), env_mod.from_tags(tags)))
    if not out:
        raise ReproduceError(f"{uri}: no trial runs of a sweep in this store (tag {schema.ROLE}=trial)")
    return out


def choose(trials: list[Committed], n: int | None, names: list[str] | None,
           seed: int | None) -> tuple[list[Committed], int | None]:
    """The trials to rerun: ``names`` (trial ids, each found once), else ``n`` drawn at random, by
    ``seed`` (drawn when None and returned, so that it can be printed), among those with a result."""
    if names:
        by_id: dict[str, list[Committed]] = {}
        for t in trials:
            by_id.setdefault(t.trial_id, []).append(t)
        chosen = []
        for name in names:
            found = by_id.get(name, [])
            if len(found) != 1:
                what = "is not a trial of it" if not found else f"names {len(found)} trials (scales " \
                    f"{sorted({t.scale for t in found})})"
                raise ReproduceError(f"--trial {name} {what}; its trial ids look like {trials[0].trial_id}")
            chosen.append(found[0])
        return chosen, None
    done = [t for t in trials if t.status in ("finished", "diverged")]
    if n is None or n < 1:
        raise ReproduceError("give --trials N (N >= 1, a random sample) or --trial ID (named ones)")
    if n > len(done):
        raise ReproduceError(f"--trials {n}: only {len(done)} trials have a result to compare with; ask for fewer")
    seed = secrets.randbelow(10**6) if seed is None else seed
    return random.Random(seed).sample(done, n), seed


def rebuild(c: Committed):
    """The trial ``c`` as this checkout makes it; refused when its config hash is not the committed one."""
    from cemlab.sweeps.sweepfile.expand import trial_with_lr
    from cemlab.sweeps.sweepfile.load import load_sweep

    spec = load_sweep(c.sweep)
    if c.scale not in spec.all_scales():
        raise ReproduceError(f"{c.trial_id}: scale {c.scale!r} is not a scale of sweep {c.sweep!r} in this checkout")
    for t in spec.expand(c.scale, overrides=[f"seed=[{c.seed}]"]):
        cand = t if t.trial_id == c.trial_id else trial_with_lr(t, c.lr)
        if cand.trial_id == c.trial_id:
            if cand.config_hash != c.config_hash:
                raise ReproduceError(
                    f"{c.trial_id}: this checkout's config hash is {cand.config_hash}, the committed run's "
                    f"{c.config_hash}: the code or sweep file changed what this trial trains. Run cemlab reproduce "
                    f"from the commit that made it ({c.env.get('env_commit') or 'see git log of its trials.csv'})")
            return cand
    raise ReproduceError(f"{c.trial_id}: sweep {c.sweep!r} at scale {c.scale!r} has no such trial in this checkout")


def expected(c: Committed, threads: int | None = None) -> tuple[bool, float, str]:
    """(bit-identical expected, relative tolerance otherwise, why) for committed trial ``c`` rerun on this
    machine with ``threads`` threads (its sweep's; default torch's current count)."""
    if c.env.get("env_isa") and env_mod.this_kind_matches(c.env, threads):
        return True, 0.0, "bit-identical (same environment kind)"
    why = "environment not recorded" if not c.env.get("env_isa") else "other environment"
    return False, CROSS_KIND_RTOL, f"within {CROSS_KIND_RTOL:g} ({why})"


def planned_seconds(trial) -> float:
    """The plan's slot-seconds for ``trial`` (``cemlab plan``'s figures: its training FLOPs at the
    measured CPU FLOP/s plus the measured time around training, ``cemlab.sweeps.ladder_plan``)."""
    from cemlab.sweeps.ladder_plan import trial_seconds
    from cemlab.sweeps.plan import plan_trial

    p = plan_trial(trial)
    return trial_seconds(p.flops or 0.0, p.steps)


def threads_of(trial) -> int:
    """The thread count a sweep trains ``trial`` with (``cemlab.sweeps.trial.job.prepare_config``)."""
    return max(1, int(trial.resources.cpus_per_worker))


def rerun(c: Committed, trial, runs: Path, cache_dir: str | None) -> Outcome:
    """Train ``trial`` again as its sweep trains it (its thread count, CPU), in ``runs`` (a fresh
    runs folder with its own store), and compare with ``c``."""
    import time

    from cemlab.sweeps.trial.files import TrialFiles
    from cemlab.train.run import train

    cfg = trial.config.model_copy(deep=True)
    cfg.train.num_threads = threads_of(trial)
    cfg.train.progress_bar = False
    cfg.train.accelerator = "gpu" if trial.resources.gpus_per_worker > 0 else "cpu"
    cfg.train.checkpoint_dir = str(TrialFiles(runs, runs / "logs").checkpoints(trial))
    if cache_dir:
        cfg.data.cache_dir = cache_dir
    if cfg.hash() != c.config_hash:
        raise ReproduceError(f"{c.trial_id}: preparing the config changed its hash (a bug)")
    exact, rtol, _ = expected(c, cfg.train.num_threads)
    t0 = time.perf_counter()
    result = train(cfg, tracking_uri=f"sqlite:///{(runs / 'mlflow' / 'mlflow.db').as_posix()}", resume=False)
    from cemlab.tasks import task_of

    task = task_of(cfg)
    return Outcome(c, result.status, float(result.metrics.get(task.test_metric, math.nan)),
                   float(result.metrics.get(task.val_metrics[0], math.nan)), time.perf_counter() - t0, exact, rtol)
