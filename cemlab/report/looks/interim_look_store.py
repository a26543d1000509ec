"""The looks of a running seeded sweep, judged from its store as ``cemlab report`` reads it: what
``cemlab sweep`` hands the sweep layer as its ``looker`` (``cemlab.sweeps.stages.seeding``), so that
the sweep layer never imports the report. The looks themselves: ``cemlab.report.looks.interim_look``."""

from __future__ import annotations

from cemlab.report.inputs.context import ReportContext, sweep_context
from cemlab.report.inputs.seeded import cell_of, full_grid, seed_of
from cemlab.report.claims.catalog import claims_for
from cemlab.report.stats.bracketing import family_edges, tuning_family
from cemlab.sweeps.sweepfile.tuning_section import family_of
from cemlab.sweeps.tuning_policy import STEP, Tried, steps_taken
from cemlab.report.looks.interim_look import Look, next_trials, replay
from cemlab.report.looks.confirmation_look import comparison_graph, selection_verdicts, share_rates


def look_from_store(sweep: str, scale: str, store, grids, index: int, alpha: float | list[float]) -> Look:
    """Look ``index`` of ``sweep`` from the runs in ``store`` (``cemlab.tracking.runs.RunStore``),
    its trials read as the report reads them, the looks before it replayed (the last one made when
    one of them left nothing open)."""
    return _look_and_cells(ReportContext(sweep, scale, store, grids), index, alpha)[0]


def _look_and_cells(ctx: ReportContext, index: int, alpha: float | list[float]) -> tuple[Look, set[str]]:
    """Look ``index`` on ``ctx``'s store and the cells (table ids) its sweep has runs of."""
    spec = ctx.grids.spec(ctx.sweep)
    looks = spec.looks(ctx.scale, ctx.grids.trials(ctx.sweep, ctx.scale))
    look = replay(claims_for(spec.claims), ctx.trials, ctx.scale, ctx.sweep, looks, alpha, ctx.history,
                  upto=index + 1, sensitivity=False).made[-1]
    trials = ctx.trials()
    return look, set(trials["cell"]) if len(trials) else set()


def sweep_look(inv, trials: list, overrides: list[str] | None, j: int) -> tuple[dict | None, list]:
    """Look ``j`` of a running seeded sweep (``cemlab.sweeps.stages.seeding``; ``inv``: its
    ``Invocation``) judged from its store: the look as a dict and the trials of the next seeds for
    its open cells, at every rate each has (the grid's and those its bracketing looks added; [] at
    the last look); (None, []) when an earlier look left nothing open."""
    spec = inv.spec
    looks = spec.looks(inv.scale, trials)
    look, have = _look_and_cells(sweep_context(inv, overrides), j, spec.look_alphas(inv.scale, trials))
    if look.index != j:
        return None, []
    last = j == len(looks) - 1
    todo = [] if last else next_trials(full_grid(spec, inv.scale, trials, overrides), look.open_cells,
                                       looks[j + 1][len(looks[j]):], have)
    look.added = len(todo)
    return look.as_dict(), todo


def family_policies(spec, scale: str, trials: list) -> dict:
    """Family, as the report names it (``tuning_family`` of the trial's cell) -> its tuning policy
    (``SweepSpec.family_policies``: a family carried up a ladder steps from its own start)."""
    policies = spec.family_policies(scale, trials)
    return {tuning_family(cell_of(x)): policies[family_of(x)] for x in trials if family_of(x) in policies}


def sweep_bracket(inv, trials: list, overrides: list[str] | None, step: int) -> tuple[dict | None, list]:
    """Bracketing step ``step`` of a running sweep (``cemlab.sweeps.stages.bracketing``) judged from
    its store on the grid's own seeds (look 0's): every cell whose best rate is an end of the rates
    it has (``bracketing.family_edges``) gets the rates its tuning policy gives it
    (its own, ``family_policies``; ``Policy.judge``: by default the rate beyond that end at the grid's
    spacing, within the file's bounds and steps) for those seeds, as ordinary trials of the
    sweep file (named and hashed as if it listed that rate). Returns the step as a dict (each cell's
    rates, best rate, edge and the rate added) and the trials to run; ([] when every cell is
    bracketed or can go no further)."""
    spec, scale = inv.spec, inv.scale
    ctx = sweep_context(inv, overrides)
    seeds = [int(s) for s in spec.looks(scale, trials)[0]]
    t = ctx.trials()
    t = t[t["seed"].astype(int).isin(seeds)] if len(t) else t
    rows, own, have = [], {}, {}
    shared, policies = spec.tuning_policy(scale, trials), family_policies(spec, scale, trials)
    for r in family_edges(t).itertuples() if shared is not None else ():
        policy = policies.get(r.family, shared)
        nxt = policy.judge(Tried(tuple(r.lrs), tuple(r.scores), steps_taken(policy.grid, r.lrs)))
        added = nxt.rates if nxt.state == STEP else ()
        rows.append(dict(cell=r.family, lrs=list(r.lrs), best_lr=r.best_lr, edge=r.edge or "bracketed",
                         added_lr=added[0] if added else None, state=nxt.state, reason=nxt.reason))
        have[r.family] = [float(x) for x in r.lrs]
        if added:
            own[r.family] = {float(x) for x in added}
    if own and spec.confirmation_budget(scale, trials) is not None:   # compared cells share their rates
        shared = share_rates(own, have, comparison_graph(selection_verdicts(ctx, seeds)),
                             spec.rate_ratio(scale, trials), tuple(spec.tuning.bounds))
        for row in rows:
            row["shared_lrs"] = sorted(shared.get(row["cell"], set()) - own.get(row["cell"], set()))
        own = shared
    wanted: dict[float, set] = {}
    for fam, rates in own.items():
        for rate in rates:
            wanted.setdefault(float(rate), set()).add(fam)
    todo = []
    for rate, families in wanted.items():
        todo += [x for x in spec.expand(scale, overrides=[*(overrides or []), f"lr=[{rate:g}]"])
                 if seed_of(x) in seeds and tuning_family(cell_of(x)) in families]
    return dict(step=step, seeds=seeds, cells=rows, added=len(todo)), todo
