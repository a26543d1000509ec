"""The selection and confirmation stages of a sweep with ``confirmation:`` (``cemlab.sweeps.sweepfile.
confirmation_section``), judged from its store as ``cemlab report`` reads it.

- **Shared bracketing steps** (:func:`share_rates`): at a confirmation scale a rate a cell's
  bracketing step adds is also added to every cell it is compared with (the claims' comparisons on
  the selection seeds, :func:`comparison_graph`), with any rate between filled in, so compared cells
  always share their rates.
- **The confirmation stage** (:func:`sweep_confirm`, handed to the sweep layer by ``cemlab sweep``):
  each comparison's positions chosen on the selection seeds by the report's own code
  (``verdicts.evaluate`` with ``selection_seeds``: ``Check.confirmation``), the (cell, rate) pairs the
  union rule needs, and the fresh seeds the trial budget buys for them; the rest of the budget as
  extra seeds for the primary condition's pairs. It reads which rates were chosen and how many
  trials ran, never a verdict.
"""

from __future__ import annotations

import math

from cemlab.report.claims.catalog import claims_for
from cemlab.report.inputs.context import sweep_context
from cemlab.report.inputs.seeded import cell_of, seed_of
from cemlab.report.stats.bracketing import tuning_family


def comparison_graph(verdicts: list) -> dict[str, set[str]]:
    """Family -> the families it is compared with, from every comparison of ``verdicts`` (its
    ``cell_ids``, by tuning family)."""
    graph: dict[str, set[str]] = {}
    for v in verdicts:
        for ch in v.checks:
            fams = list(dict.fromkeys(tuning_family(c) for c in ch.cell_ids))
            for f in fams:
                graph.setdefault(f, set()).update(g for g in fams if g != f)
    return graph


def share_rates(wanted: dict[str, set[float]], have: dict[str, list[float]], graph: dict[str, set[str]],
                ratio: float, bounds: tuple[float, float]) -> dict[str, set[float]]:
    """The rates each family gets in a shared bracketing step: its own (``wanted``: family -> rates
    its policy adds), and every rate a family it is compared with adds, with the rates between its
    own and that one at the grid's spacing (``ratio``) filled in, inside ``bounds``; none it has."""
    out = {f: set(r) for f, r in wanted.items()}
    for f, rates in wanted.items():
        for g in graph.get(f, ()):
            own = have.get(g, [])
            if not own:
                continue
            for r in rates:
                out.setdefault(g, set()).update(_between(own, r, ratio, bounds))
    return {f: {r for r in rs if not any(math.isclose(r, h, rel_tol=1e-6) for h in have.get(f, []))}
            for f, rs in out.items() if rs}


def _between(own: list[float], rate: float, ratio: float, bounds: tuple[float, float]) -> list[float]:
    """The rates from the nearest end of ``own`` to ``rate`` at the spacing ``ratio`` (``rate`` included)."""
    lo, hi = min(own), max(own)
    out, k = [], 1
    if rate > hi:
        while hi * ratio ** k <= rate * (1 + 1e-6):
            out.append(hi * ratio ** k)
            k += 1
    elif rate < lo:
        while lo / ratio ** k >= rate * (1 - 1e-6):
            out.append(lo / ratio ** k)
            k += 1
    return [float(f"{r:.6g}") for r in out if bounds[0] * (1 - 1e-9) <= r <= bounds[1] * (1 + 1e-9)]


def needed_pairs(verdicts: list, only_primary_of: str | None = None) -> dict[str, set[float]]:
    """Family -> the rates the union rule needs it at on fresh seeds: for each comparison judged on
    them (``Check.confirmation``), each position's cells at every rate of the union of the chosen
    rates. ``only_primary_of``: the comparisons of that claim's primary condition only."""
    out: dict[str, set[float]] = {}
    for v in verdicts:
        if only_primary_of is not None and (v.id != only_primary_of or v.role != "primary"):
            continue
        for ch in v.checks:
            conf = getattr(ch, "confirmation", None)
            if conf is None:
                continue
            for fam in dict.fromkeys(tuning_family(c) for c in ch.cell_ids):
                out.setdefault(fam, set()).update(float(r) for r in conf.rates)
    return out


def selection_verdicts(ctx, selection: list[int]) -> list:
    """The sweep's claims on the selection seeds with each comparison's choice made there
    (``verdicts.evaluate`` with ``selection_seeds``; no shared-rate sensitivity)."""
    from cemlab.report.claims.verdicts import evaluate

    spec = ctx.grids.spec(ctx.sweep)
    return evaluate(claims_for(spec.claims), ctx.cells, ctx.scale, ctx.trials, ctx.history, sensitivity=False,
                    selection_seeds=selection)


def _count(pairs: dict[str, set[float]]) -> int:
    return sum(len(r) for r in pairs.values())


def confirmation_plan(verdicts: list, budget: int, spent: int, selection: list[int],
                      primary: str | None = None, primary_seeds: int | None = None) -> dict:
    """The arithmetic of the confirmation stage, from the selection stage's verdicts alone
    (``selection_verdicts``: which rates each comparison chose) and the trials run on the
    ``selection`` seeds (``spent``): the (family -> rates) pairs the union rule needs (``pairs``) and
    their count C (``c``), the fresh seeds n = floor((budget - spent) / C) (``n``), the pairs of
    ``primary``'s primary condition (``primary_pairs``) and their count (``cp``), the whole extra
    seeds the rest of the budget buys for them (``extra``), and the seeds themselves (``base_seeds``,
    ``extra_seeds``, after the selection seeds). Reads which rates were chosen, never a verdict.

    ``primary_seeds`` (the file's ``confirmation.primary_seeds``): the primary condition's pairs get
    that many fresh seeds first, whatever the selection chose (so that its verdict's seeds never
    shrink because a variant diverged and its cells chose other rates), and every other pair n =
    floor((budget - spent - primary_seeds x its pairs) / the other pairs' count) of them, at most as
    many; the primary pairs' seeds beyond n are ``extra``."""
    pairs = needed_pairs(verdicts)
    c = _count(pairs)
    prim = needed_pairs(verdicts, primary) if primary else {}
    cp = _count(prim)
    if primary_seeds is not None and cp:
        tp = min(primary_seeds, (budget - spent) // cp)
        rest = c - cp
        n = min(tp, (budget - spent - tp * cp) // rest) if rest else tp
        extra = tp - n
    else:
        n = (budget - spent) // c if c else 0
        extra = (budget - spent - n * c) // cp if cp and n else 0
    first = max(selection) + 1
    return dict(pairs=pairs, c=c, n=n, primary_pairs=prim, cp=cp, extra=extra,
                base_seeds=list(range(first, first + n)), extra_seeds=list(range(first + n, first + n + extra)))


def sweep_confirm(inv, trials: list, overrides: list[str] | None) -> tuple[dict | None, list]:
    """The confirmation stage of a running sweep (``cemlab.sweeps.stages.confirmation``; ``inv``: its
    ``Invocation``) judged from its store: the stage as a dict (the selection seeds, the trials run
    on them, the budget, the (family, rate) pairs and their count C, the fresh seeds n =
    floor((budget - run) / C), the primary condition's pairs and the extra seeds the rest buys:
    :func:`confirmation_plan`) and the trials to run, named and hashed as the sweep file's own;
    (None, []) without a budget."""
    spec, scale = inv.spec, inv.scale
    if spec.confirmation_budget(scale, trials) is None:
        return None, []
    ctx = sweep_context(inv, overrides)
    selection = sorted({seed_of(t) for t in trials})
    t = ctx.trials()
    spent = int(t["seed"].astype(int).isin(selection).sum()) if len(t) else 0
    budget = spec.confirmation_budget(scale, trials, spent)   # raised to spent + confirmation.fresh, if set
    plan = confirmation_plan(selection_verdicts(ctx, selection), budget, spent, selection, spec.confirmation.primary,
                             spec.primary_seeds(scale))
    pairs, primary = plan["pairs"], plan["primary_pairs"]
    base_seeds, extra_seeds = plan["base_seeds"], plan["extra_seeds"]
    todo = _trials_at(spec, scale, overrides, pairs, base_seeds) + _trials_at(spec, scale, overrides, primary,
                                                                                  extra_seeds)
    record = dict(stage="confirmation", selection_seeds=selection, spent=spent, budget=budget,
                  fresh=spec.fresh_trials(scale), pairs=plan["c"],
                  seeds=plan["n"], fresh_seeds=base_seeds, primary=spec.confirmation.primary, primary_pairs=plan["cp"],
                  primary_seeds=plan["n"] + plan["extra"],
                  extra_seeds=extra_seeds, cells=[dict(cell=f, rates=sorted(r)) for f, r in pairs.items()],
                  added=len(todo))
    return record, todo


def _trials_at(spec, scale: str, overrides: list[str] | None, pairs: dict[str, set[float]], seeds: list[int]) -> list:
    """The sweep file's trials of ``pairs`` (family -> rates) at ``seeds``, in grid order."""
    if not pairs or not seeds:
        return []
    rates = sorted({r for rs in pairs.values() for r in rs})
    full = spec.expand(scale, overrides=[*(overrides or []), f"lr=[{','.join(f'{r:g}' for r in rates)}]",
                                         f"seed=[{','.join(str(s) for s in seeds)}]"])
    out = []
    for x in full:
        fam = tuning_family(cell_of(x))
        lr = float(x.axes.get("lr", x.config.train.lr))
        if fam in pairs and any(math.isclose(lr, r, rel_tol=1e-6) for r in pairs[fam]):
            out.append(x)
    return out
