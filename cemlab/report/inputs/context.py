"""What figure builders, claims and looks read: one sweep's trials and cells at one scale (its grid,
plus what its looks added: ``seeded.seeded_grid``), the cells of any other sweep (for comparisons and
borrowed baselines), and run histories (:class:`ReportContext`). Below the claims, figures, looks and
pages that all read it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cemlab.report.inputs.grids import SweepGrids
from cemlab.report.inputs.seeded import seeded_grid
from cemlab.report.inputs.table import aggregate, best_lr, join_trials
from cemlab.tracking.runs import RunStore


class ReportContext:
    """What figure builders and claims read: one sweep's trials and cells at one scale, the cells
    of any other sweep (for comparisons and borrowed baselines), and run histories."""

    def __init__(self, sweep: str, scale: str, store: RunStore, grids: SweepGrids):
        self.sweep, self.scale, self.store, self.grids = sweep, scale, store, grids
        self._trials: dict[str, pd.DataFrame] = {}
        self._cells: dict[str, pd.DataFrame] = {}

    def trials(self, sweep: str | None = None) -> pd.DataFrame:
        name = sweep or self.sweep
        if name not in self._trials:
            if sweep is None or name in self.grids.names():
                try:
                    grid = seeded_grid(self.grids, name, self.scale, self.store)  # a broken sweep file raises SweepError
                except ValueError:  # another sweep without this scale (a ladder rung is its own sweep's only)
                    if sweep is None or sweep == self.sweep:
                        raise
                    grid = []
            else:
                grid = []  # a claim names a sweep this project does not have
            self._trials[name] = join_trials(grid, self.store)
        return self._trials[name]

    def cells(self, sweep: str | None = None) -> pd.DataFrame:
        name = sweep or self.sweep
        if name not in self._cells:
            self._cells[name] = aggregate(self.trials(name))
        return self._cells[name]

    def baselines(self, cells: pd.DataFrame) -> dict[str, dict]:
        """The Llama baseline of each size in ``cells``: this sweep's own Llama cells when it has
        them, else the Llama cells of another sweep at this scale with the same size and learning
        rate(s) (the one with most finished seeds). Several learning rates: the best one."""
        out: dict[str, dict] = {}
        lrs = set(cells["lr"])
        for size in dict.fromkeys(cells["size"]):
            own = self.cells()
            cand = own[(own["family"] == "llama") & (own["size"] == size)]
            source = self.sweep
            if cand.empty or not np.isfinite(cand["mean"].to_numpy(dtype=float)).any():
                best = None
                for name in self.grids.names():
                    if name == self.sweep:
                        continue
                    c = self.cells(name)
                    c = c[(c["family"] == "llama") & (c["size"] == size) & c["lr"].isin(lrs)]
                    if c.empty or not np.isfinite(c["mean"].to_numpy(dtype=float)).any():
                        continue
                    if best is None or c["n"].max() > best[1]["n"].max():
                        best = (name, c)
                if best is None:
                    continue
                source, cand = best
            pick = best_lr(cand, ["size"]).iloc[0] if cand["lr"].nunique() > 1 else cand.iloc[0]
            out[size] = {k: pick[k] for k in ("mean", "std", "n", "lr", "params_total", "token_budget",
                                              "group", "variant")}
            out[size]["source"] = source
        return out

    def metric_keys(self, run_id: str) -> list[str]:
        rec = self.store.record(run_id)
        return sorted(rec.metrics) if rec else []

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return self.store.history(run_id, key)


def sweep_context(inv, overrides: list[str] | None) -> ReportContext:
    """The report's view of a running sweep's store (``inv``: its ``Invocation``)."""
    grids = SweepGrids(overrides)
    name = grids.add_file(inv.spec.path) if inv.spec.path is not None else inv.spec.name
    return ReportContext(name, inv.scale, RunStore(inv.uri, client=inv.client), grids)
