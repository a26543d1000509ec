"""A sweep's grid joined with the runs in the store, and aggregated over seeds.

Two tables (pandas DataFrames) carry every report:

- ``trials``: one row per grid trial (the sweep's expanded grid, in grid order) with the run that
  stands for it (matched by config hash anywhere in the store), its status (``finished``,
  ``diverged``, ``stopped``, ``failed``, ``interrupted``, ``running`` or ``missing``), its numbers
  and a ``detail`` (where a run stopped or diverged, the error of a failed one), and ``chance``: the
  test metric of a model that learned nothing (``Task.chance_value``: perplexity = vocabulary size),
  where a learning-rate curve puts a diverged run (``cemlab.report.stats.divergence.at_chance``); the
  verdicts rank a diverged run, or a finished one whose metric is not finite or no better than
  chance, below every finished run (``cemlab.report.stats.divergence.outcomes``). The cells' means and the
  figures read finished runs with a finite, better-than-chance metric only (``n_exploded`` counts
  the others).
- ``cells``: one row per grid cell = the trials that differ only in their seed. The main metric
  (test perplexity; test RMSE for the GP study) is aggregated over the cell's finished seeds:
  ``mean``, ``std`` (sample standard deviation, ddof=1; empty with one seed) and ``n``, next to
  ``n_expected`` and how many seeds are diverged, stopped, failed, interrupted, running or missing.

Nothing is invented: a cell without a finished seed has an empty mean and says why in ``note``.
Only finished runs have a value: a run stopped early by ASHA (``stopped``) is listed with its last
validation metric in ``detail``, but that is not a final result and enters no comparison.

``search: optuna`` sweeps: ``expand`` gives one trial per grid cell at the centre of the learning
rate range, but the runs sample learning rates inside each cell. Such a cell's trials are its runs,
found by the tag ``cemlab.search_cell`` (``cemlab.sweeps.sweepfile.expand.sampled_trials``): one row per sampled
learning rate (the trial ``cemlab.sweeps.sweepfile.expand.trial_with_lr`` makes for it, whose config hash must
be the run's, so runs of an older version of the sweep file are not mixed in), sorted by learning
rate; every sampled rate is then a point of the cell's learning-rate curve (Fig. 3a, Akima). Such a
cell is ``missing`` (one row, at the centre) only when it has no run at all.

The columns that figures and claims select on are declared once, in ``COLUMNS`` (name, default and
type, where the value comes from): the trial's axis of that name when the sweep names it, else the
task's ``table_fields`` (a subset), else the resolved ``RunConfig``, else the default; ``family``
comes from the task; ``group`` and ``variant`` are the sweep file's own names (legend labels).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from cemlab.report.stats.divergence import worst_outcomes
from cemlab.sweeps.sweepfile.expand import sampled_trials
from cemlab.tasks import format_eta, get_task, task_of
from cemlab.tracking.runs import RunRecord, RunStore, pick_run
from cemlab.tracking import environment, schema

#: Status of a grid trial with no run in the store.
MISSING = "missing"
#: Statuses other than finished, each counted per cell (``n_<status>``); any other status a run
#: may carry is still named in the cell's note.
NOT_FINISHED = (schema.STATUS_DIVERGED, schema.STATUS_STOPPED, schema.STATUS_FAILED, schema.STATUS_INTERRUPTED,
                schema.STATUS_RUNNING, MISSING)
#: At most this many characters of a failed run's error go into ``detail``.
MAX_ERROR_CHARS = 200

#: Static model facts copied from a run's metrics into the tables.
MODEL_FACTS = {
    "params_total": schema.PARAMS_TOTAL,
    "params_attention": schema.PARAMS_ATTENTION,
    "params_mlp": schema.PARAMS_MLP,
    "params_embedding": schema.PARAMS_EMBEDDING,
    "flops_per_token": schema.FLOPS_PER_TOKEN,
    "flops_per_example": schema.FLOPS_PER_EXAMPLE,
    "token_budget": schema.TOKEN_BUDGET,
    "total_steps": schema.TOTAL_STEPS,
    "train_tokens": schema.DATA_TRAIN_TOKENS,
}

@dataclass(frozen=True)
class Column:
    """A column figures and claims select on. Its value for a trial: the sweep's axis of the same
    name (``axis``), else the task's ``table_fields`` (each task returns a subset), else
    ``from_config`` of the resolved ``RunConfig``, else ``default``; then ``cast``."""

    name: str
    default: Any
    cast: Callable[[Any], Any] = str
    from_config: Callable[[Any], Any] | None = None
    axis: bool = True          # a sweep axis of this name sets it
    cell: bool = True          # part of what identifies a cell (``CELL_COLUMNS``)
    axis_cast: Callable[[Any], Any] | None = None   # ``cast`` for an axis value, if it differs

    def value(self, axes: dict, derived: dict, cfg) -> Any:
        if self.axis and self.name in axes:
            return (self.axis_cast or self.cast)(axes[self.name])
        if self.name in derived:
            return self.cast(derived[self.name])
        return self.cast(self.from_config(cfg) if self.from_config is not None else self.default)


#: The selection columns, declared once, in table order (after family, group, variant, size, task,
#: metric): a figure selecting on a new axis needs a line here.
COLUMNS: tuple[Column, ...] = (
    Column("lr", math.nan, float, lambda cfg: cfg.train.lr),
    Column("seed", 0, int, lambda cfg: cfg.train.seed, cell=False),
    Column("T", 1, int),
    Column("precond", ""),
    Column("kq_diagonal", "", str, lambda cfg: cfg.model.attention.kq_diagonal),
    Column("kernel", ""),
    Column("param_matched", False, bool, lambda cfg: cfg.model.mlp.param_matched),
    Column("eta", "", str, axis_cast=format_eta),
    Column("x0", ""),
    Column("corpus", "", axis=False),
    Column("score_only", False, bool, axis=False, cell=False),
)
#: The column that names the model family (from the task's ``table_fields``; '' if it gives none).
FAMILY = Column("family", "", axis=False)

#: Columns that identify a cell (with ``cell``, the JSON of the axes without the seed).
CELL_COLUMNS = ["sweep", "figure", "scale", "family", "group", "variant", "size", "task", "metric",
                *(c.name for c in COLUMNS if c.cell)]
#: Columns of the trials table before its run's columns.
TRIAL_COLUMNS = ["order", "sweep", "figure", "scale", "trial_id", "search_cell", "family", "group", "variant", "size",
                 "task", "metric", "config_hash", *(c.name for c in COLUMNS), "cell"]


def _scalar(v: Any) -> Any:
    """Axis values as plain JSON scalars (lists and objects as their JSON text)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return json.dumps(v, sort_keys=True, default=str)


def trial_row(trial, order: int) -> dict[str, Any]:
    """The columns of one grid trial (``cemlab.sweeps.sweepfile.schema.Trial`` or anything with its fields)."""
    cfg = trial.config
    axes = {k: _scalar(v) for k, v in dict(trial.axes or {}).items()}
    task = task_of(cfg)
    group = str(trial.group or task.default_group(cfg))
    derived = task.table_fields(cfg, group)
    row = {
        "order": order,
        "sweep": trial.sweep,
        "figure": trial.figure,
        "scale": trial.scale,
        "trial_id": trial.trial_id,
        "family": FAMILY.value(axes, derived, cfg),
        "group": group,
        "variant": trial.variant,
        "size": str(trial.size),
        "task": cfg.task,
        "metric": task.test_metric,
        "config_hash": trial.config_hash,
        **{c.name: c.value(axes, derived, cfg) for c in COLUMNS},
    }
    cell_axes = {k: v for k, v in axes.items() if k != "seed"}
    cell_axes.update(group=group, variant=row["variant"], size=row["size"], sweep=row["sweep"])
    row["cell"] = json.dumps(cell_axes, sort_keys=True, default=str)
    return row


def run_detail(run: RunRecord | None, task: str) -> str:
    """What a person needs to know about a run that did not finish: where ASHA stopped it (and
    its last validation metric, which is not a final result), where it diverged, its error."""
    if run is None:
        return ""
    tags = run.tags
    if run.status == schema.STATUS_STOPPED:
        text = f"stopped early by ASHA at step {tags.get(schema.STOPPED_STEP, '?')}"
        keys = get_task(task).val_metrics
        last = next(((k, run.metrics[k]) for k in keys if math.isfinite(run.metrics.get(k, math.nan))), None)
        if last:
            text += f"; last {last[0]} {last[1]:.4g}"
        return text + " (not a final result)"
    if run.status == schema.STATUS_DIVERGED and schema.DIVERGED_STEP in tags:
        return f"diverged at step {tags[schema.DIVERGED_STEP]}"
    if run.status == schema.STATUS_FAILED and tags.get(schema.ERROR):
        return tags[schema.ERROR][:MAX_ERROR_CHARS]
    return ""


def join_trials(trials: Iterable, store: RunStore) -> pd.DataFrame:
    """The grid's trials with the run that stands for each (``cemlab.tracking.runs.pick_run``); a
    ``search: optuna`` cell gives one row per sampled learning rate (``cemlab.sweeps.sweepfile.expand.sampled_trials``)."""
    rows = []
    for cell in trials:
        searched = getattr(cell, "search", None) is not None
        pairs = sampled_trials(store, cell) if searched else [(cell, store.runs_for_hash(cell.config_hash))]
        for t, runs in pairs:
            row = trial_row(t, len(rows))
            run = pick_run(runs)
            row["search_cell"] = cell.trial_id if searched else ""
            row["status"] = run.status if run else MISSING
            row["run_id"] = run.run_id if run else ""
            row["run_name"] = run.run_name if run else ""
            row["run_sweep"] = run.tags.get(schema.SWEEP, "") if run else ""
            row["n_runs"] = len(runs)
            value = run.metrics.get(row["metric"], math.nan) if run else math.nan
            row["value"] = value if row["status"] == schema.STATUS_FINISHED else math.nan
            val = run.metrics.get(get_task(row["task"]).val_metrics[0], math.nan) if run else math.nan
            row["val"] = val if row["status"] == schema.STATUS_FINISHED else math.nan
            row["detail"] = run_detail(run, row["task"])
            row["chance"] = get_task(row["task"]).chance_value(t.config)
            for col, key in MODEL_FACTS.items():
                row[col] = run.metrics.get(key, math.nan) if run else math.nan
            row.update(environment.from_tags(run.tags) if run else dict.fromkeys(environment.TAGS, ""))
            rows.append(row)
    columns = [*TRIAL_COLUMNS, "status", "run_id", "run_name", "run_sweep", "n_runs", "value", "val", "detail",
               "chance", *MODEL_FACTS, *environment.TAGS]
    return pd.DataFrame(rows, columns=columns)


def _finite_mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else math.nan


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan


def aggregate(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (trials equal but for the seed), in grid order; see the module docstring."""
    out = []
    # a finished run whose metric is not finite or no better than chance: a worst outcome (the verdicts'
    # rule), no value of its cell's mean
    exploded_all = pd.Series(worst_outcomes(trials) & (trials["status"] == schema.STATUS_FINISHED).to_numpy(),
                             index=trials.index)
    for cell, g in trials.groupby("cell", sort=False):
        g = g.sort_values("order")
        first = g.iloc[0]
        values = g["value"].to_numpy(dtype=float)
        chance = g["chance"].to_numpy(dtype=float) if "chance" in g else np.full(len(g), np.nan)
        exploded = exploded_all.loc[g.index].to_numpy()
        finite = values[np.isfinite(values) & ~exploded]
        counts = g["status"].value_counts().to_dict()
        row = {c: first[c] for c in CELL_COLUMNS}
        row.update(
            order=int(first["order"]),
            cell=cell,
            mean=float(finite.mean()) if len(finite) else math.nan,
            val_mean=_finite_mean(g["val"].to_numpy(dtype=float) if "val" in g else np.array([])),
            std=_std(finite),
            n=int(len(finite)),
            n_expected=int(len(g)),
            **{f"n_{status}": int(counts.get(status, 0)) for status in NOT_FINISHED},
            n_exploded=int(exploded.sum()),
            seeds=" ".join(str(s) for s in g["seed"]),
            run_ids=" ".join(r for r in g["run_id"] if r),
        )
        for col in MODEL_FACTS:
            vals = g[col].to_numpy(dtype=float)
            vals = vals[np.isfinite(vals)]
            row[col] = float(vals.mean()) if len(vals) else math.nan
        row["chance"] = float(chance[np.isfinite(chance)][0]) if np.isfinite(chance).any() else math.nan
        row["note"] = cell_note(row, counts)
        out.append(row)
    cols = ["order", *CELL_COLUMNS, "mean", "std", "n", "val_mean", "n_expected", *(f"n_{s}" for s in NOT_FINISHED),
            "n_exploded",
            "note", *MODEL_FACTS, "chance", "seeds", "run_ids", "cell"]
    df = pd.DataFrame(out, columns=cols)
    return df.sort_values("order", kind="stable").reset_index(drop=True)


def cell_note(row: dict[str, Any], counts: dict[str, int]) -> str:
    """A short human note on a cell's completeness: '' when every seed finished with its metric."""
    parts = []
    if row["n"] < row["n_expected"]:
        parts.append(f"{row['n']}/{row['n_expected']} seeds finished")
    for status, k in counts.items():
        if status != schema.STATUS_FINISHED:
            parts.append(f"{k} {status}")
    if row["n"] < counts.get(schema.STATUS_FINISHED, 0):
        parts.append(f"{counts[schema.STATUS_FINISHED] - row['n']} finished without a finite, better-than-chance "
                     f"{row['metric']}")
    return "; ".join(parts)


def selection_key(cells: pd.DataFrame) -> str:
    """The column a choice among cells is made on: the validation metric's seed mean
    (``val_mean``), so that a verdict judged on test is not chosen on test; the test mean only
    for cells whose runs logged no validation metric at all (runs of an older cemlab)."""
    if "val_mean" in cells and np.isfinite(cells["val_mean"].to_numpy(dtype=float)).any():
        return "val_mean"
    return "mean"


def best_lr(cells: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """For each group of cells equal in ``by``, the cell with the lowest validation mean (chosen on
    validation, ``selection_key``; its learning rate is kept in ``lr``) among those with a test
    value; groups without any finished cell keep their first cell (mean empty).

    Used where a figure or a claim compares models at their best learning rate of the grid."""
    rows = []
    for _, g in cells.groupby(by, sort=False, dropna=False):
        done = g[np.isfinite(g["mean"].to_numpy(dtype=float))]
        key = selection_key(done) if len(done) else "mean"
        done = done[np.isfinite(done[key].to_numpy(dtype=float))] if len(done) else done
        pick = done.loc[done[key].idxmin()] if len(done) else g.iloc[0]
        row = pick.to_dict()
        row["n_lr"] = int(len(g))
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values("order", kind="stable").reset_index(drop=True) if len(df) else df


def cell_display(cells: pd.DataFrame) -> pd.DataFrame:
    """The per-cell table of the page: variant, size, learning rate, test mean +- std (ddof=1) and n
    over finished seeds, the validation mean the report chooses on, and the cell's note."""
    def pm(r) -> str:
        if not math.isfinite(r["mean"]):
            return ""
        return f"{r['mean']:.4g} +- {r['std']:.2g}" if math.isfinite(r["std"]) else f"{r['mean']:.4g}"
    return pd.DataFrame({"variant": cells["variant"], "size": cells["size"], "lr": cells["lr"],
                         "test mean +- std": [pm(r) for _, r in cells.iterrows()],
                         "n": cells["n"].astype(int), "of": cells["n_expected"].astype(int),
                         "val mean": cells["val_mean"] if "val_mean" in cells else math.nan,
                         "note": cells["note"]})


def reuse_setting(row, attention: bool) -> str:
    """The setting of a cell in Fig. 3c (MLP) / Fig. 4 (attention), as the figures and the reuse claims read it."""
    if row["family"] == "llama" or str(row["family"]).startswith("reuse"):
        return "plain reuse"
    if attention:
        return "CEM"
    return "CEM param-matched" if row["param_matched"] else "CEM dim-matched"
