"""What the rungs below a ladder rung found, per family, judged as the sweep's bracketing stage judges:
the ``carrier`` ``cemlab sweep`` hands a ladder rung with ``ladder.carry`` (``cemlab.sweeps.stages.carrying``),
so that the sweep layer never imports the report.

Per rung below, its trials are read from the store (the runs of that rung's scale, as ``cemlab report``
reads them), else from a committed report folder (``--carry-from DIR``: a rung's folder with its
``trials.csv``, or the ladder's folder, whose ``trials.csv`` has a ``rung_scale`` column and which holds a
folder per rung). Each family's best rate and edge are those of :func:`rung_found`: ``family_edges`` on
the rung's selection seeds (its first look's), ``edge_of`` of the tuning policy, the rule the bracketing
stage steps by (``interim_look_store.sweep_bracket``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cemlab.report.inputs.context import ReportContext
from cemlab.report.inputs.grids import SweepGrids
from cemlab.report.inputs.seeded import cell_of
from cemlab.report.stats.bracketing import family_edges, tuning_family
from cemlab.sweeps.carry import Found
from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.sweeps.sweepfile.tuning_section import family_of
from cemlab.tracking.runs import RunStore


def rung_found(trials: pd.DataFrame, seeds: list[int], tokens: float) -> dict[str, Found]:
    """Family (``tuning_family`` of a cell) -> what a rung of ``tokens`` per parameter found for it, from
    its trials table (the report's: ``cell``, ``lr``, ``seed``, ``status``, ``value``, ``val``, ``chance``)
    read on ``seeds`` (the rung's selection seeds): its best rate and edge (``family_edges``)."""
    if trials.empty:
        return {}
    t = trials[trials["seed"].astype(int).isin([int(s) for s in seeds])]
    return {r.family: Found(float(tokens), float(r.best_lr), r.edge) for r in family_edges(t).itertuples()}


def store_trials(spec, scale: str, uri: str, overrides: list[str] | None) -> pd.DataFrame:
    """The trials of ``spec``'s sweep at ``scale`` with a run in the store at ``uri`` (empty: none)."""
    grids = SweepGrids(overrides)
    name = grids.add_file(spec.path) if spec.path is not None else spec.name
    t = ReportContext(name, scale, RunStore(uri), grids).trials()
    return t[t["run_id"].astype(str) != ""] if len(t) else t


def folder_trials(spec, scale: str, folder: str | Path, overrides: list[str] | None) -> pd.DataFrame | None:
    """The trials of ``scale`` in a committed report folder (module docstring), each given its ``cell``
    (the trial of that id in the sweep file at that scale, at every rate the table has); None where the
    folder has no table of that rung."""
    folder = Path(folder)
    path = folder / "trials.csv"
    if not path.is_file():
        return None
    t = pd.read_csv(path)
    if "rung_scale" in t.columns:   # the ladder's folder: a folder per rung
        path = folder / scale / "trials.csv"
        if not path.is_file():
            return None
        t = pd.read_csv(path)
    if "scale" in t.columns:
        t = t[t["scale"].astype(str) == scale]
    if t.empty or "trial_id" not in t.columns or "lr" not in t.columns:
        return None
    rates = sorted({float(x) for x in t["lr"].dropna()})
    grid = spec.expand(scale, overrides=[*(overrides or []), f"lr=[{','.join(f'{r:g}' for r in rates)}]"])
    cells = {x.trial_id: cell_of(x) for x in grid}
    t = t.assign(cell=t["trial_id"].map(cells))
    for col in ("value", "val", "chance"):
        if col not in t.columns:
            t[col] = float("nan")
    return t[t["cell"].notna()]


def sweep_found(spec, scale: str, trials: list, overrides: list[str] | None, uri: str,
                carry_from: str | Path | None = None) -> dict[tuple, list[Found]]:
    """Family of the grid ``trials`` (``family_of``) -> what each rung below ``scale`` found for it (the
    store's runs of that rung, else ``carry_from``'s table; a rung below in neither is skipped).
    ``SweepError`` naming the fix where the rung just below is in neither."""
    ladder, rung = spec.ladder, spec.rungs()[scale]
    keys = {tuning_family(cell_of(t)): family_of(t) for t in trials}
    out: dict[tuple, list[Found]] = {}
    for r in [x for x in ladder.rungs if x < rung]:
        name = ladder.rung_name(r)
        t = store_trials(spec, name, uri, overrides)
        if t.empty and carry_from is not None:
            t = folder_trials(spec, name, carry_from, overrides)
        if t is None or t.empty:
            if r == ladder.below(rung):
                raise SweepError(
                    f"{spec.source}: ladder.carry: rung {rung:g} ({scale}) starts from what the rung below found, but "
                    f"neither the store nor {'--carry-from ' + str(carry_from) if carry_from else 'a --carry-from folder'}"
                    f" has runs of rung {r:g} ({name}); run it first (cemlab sweep {spec.name} --rung {r:g}) or give "
                    f"--carry-from DIR (a committed report folder of that rung, or the ladder's)")
            continue
        seeds = spec.looks(name, spec.expand(name, overrides=overrides))[0]
        for fam, found in rung_found(t, seeds, r).items():
            if fam in keys:
                out.setdefault(keys[fam], []).append(found)
    return out
