"""The looks of a running seeded sweep, judged from its store as ``cemlab report`` reads it: what
``cemlab sweep`` hands the sweep layer as its ``looker`` (``cemlab.sweeps.stages.seeding``), so that
the sweep layer never imports the report. The looks themselves: ``cemlab.report.stats.interim_look``."""

from __future__ import annotations

from cemlab.report.pages.build import ReportContext
from cemlab.report.claims.catalog import claims_for
from cemlab.report.stats.interim_look import Look, full_grid, next_trials, replay


def look_from_store(sweep: str, scale: str, store, grids, index: int, alpha: float | list[float]) -> Look:
    """Look ``index`` of ``sweep`` from the runs in ``store`` (``cemlab.tracking.runs.RunStore``),
    its trials read as the report reads them, the looks before it replayed (the last one made when
    one of them left nothing open)."""
    ctx = ReportContext(sweep, scale, store, grids)
    spec = grids.spec(sweep)
    looks = spec.looks(scale, grids.trials(sweep, scale))
    return replay(claims_for(spec.claims), ctx.trials, scale, sweep, looks, alpha, ctx.history, upto=index + 1,
                  sensitivity=False).made[-1]


def sweep_look(inv, trials: list, overrides: list[str] | None, j: int) -> tuple[dict | None, list]:
    """Look ``j`` of a running seeded sweep (``cemlab.sweeps.stages.seeding``; ``inv``: its
    ``Invocation``) judged from its store: the look as a dict and the trials of the next seeds for
    its open cells ([] at the last look); (None, []) when an earlier look left nothing open."""
    from cemlab.report.inputs.grids import SweepGrids
    from cemlab.tracking.runs import RunStore

    spec = inv.spec
    looks = spec.looks(inv.scale, trials)
    grids = SweepGrids(overrides)
    name = grids.add_file(spec.path) if spec.path is not None else spec.name
    look = look_from_store(name, inv.scale, RunStore(inv.uri, client=inv.client), grids, j,
                           spec.look_alphas(inv.scale, trials))
    if look.index != j:
        return None, []
    last = j == len(looks) - 1
    todo = [] if last else next_trials(full_grid(spec, inv.scale, trials, overrides), look.open_cells,
                                       looks[j + 1][len(looks[j]):])
    look.added = len(todo)
    return look.as_dict(), todo
