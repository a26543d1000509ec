"""A look of a seeded sweep read from the MLflow store: what ``cemlab sweep`` calls between its
batches of seeds (``cemlab.sweeps.stages.seeding``; ``cemlab.cli`` hands it to the sweep, so that
the sweep layer never imports the report).

:func:`judge` reads the sweep's trials as ``cemlab report`` reads them (``build.ReportContext``,
the added seeds included), replays its looks up to the one asked for (``look.replay``) and returns
that look with the trials of the next seeds for its open cells (``look.next_trials``).
"""

from __future__ import annotations

from pathlib import Path

from cemlab.report.build import ReportContext
from cemlab.report.claims import claims_for
from cemlab.report.grids import SweepGrids
from cemlab.report.look import full_grid, next_trials, replay
from cemlab.report.sequential import look_alpha
from cemlab.tracking.runs import RunStore


def judge(sweep: str | Path, scale: str, tracking_uri: str, overrides: list[str] | None, index: int) -> tuple[dict, list]:
    """Look ``index`` of ``sweep`` (a name, or the path of its file) at ``scale`` from the store at
    ``tracking_uri``: ``(the look as a dict, the trials it adds)``. An earlier look that left
    nothing open is returned instead (its ``index`` says so), with nothing to add."""
    grids = SweepGrids(overrides)
    name = grids.add_file(sweep)
    spec = grids.spec(name)
    trials = grids.trials(name, scale)
    looks = spec.looks(scale, trials)
    store = RunStore(tracking_uri)
    ctx = ReportContext(name, scale, store, grids)
    loop = replay(claims_for(spec.claims), ctx.trials, scale, name, looks, look_alpha(len(looks)), ctx.history,
                  upto=index + 1)
    look = loop.made[-1]
    todo = []
    if look.index == index and index + 1 < len(looks) and look.open_cells:
        todo = next_trials(full_grid(spec, scale, trials, grids.overrides), look.open_cells,
                           looks[index + 1][len(looks[index]):])
    look.added = len(todo)
    return look.as_dict(), todo
