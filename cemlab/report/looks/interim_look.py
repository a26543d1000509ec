"""A look of a sweep that adds seeds where a verdict is open (``seeding:`` in its file).

At look ``j`` the sweep's claims are judged by the report's own code (``verdicts.evaluate``) on the
trials of the first ``n_j`` seeds only (``SweepSpec.looks``), at the look's level ``alpha_j``
(``SweepSpec.look_alphas``: the file's ``seeding.alpha_split``, else ``alpha / K``;
``cemlab.report.stats.sequential``). The cells of a comparison that is itself inconclusive, inside a
claim condition that is inconclusive, are *open*: the next look adds seeds to them, as ordinary
trials of the grid (:func:`next_trials`: the sweep file's trials with those seeds, same naming and
config hashing). Everything is read from the store, so a rerun of the sweep makes the same
decisions and finds the trials they ask for already done.

The report reads a seeded sweep as the grid's own seeds plus every added seed that has a run
(``cemlab.report.inputs.seeded.seeded_grid``): the seeds not added are not "missing".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Callable

import pandas as pd

from cemlab.report.inputs.seeded import at_seeds, cell_of, seed_of, selection_seeds, sweep_grid
from cemlab.report.stats.bracketing import tuning_family
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, NEGLIGIBLE, SUPPORTED


@dataclass
class Look:
    """What one look decided: its index, the seeds it read, the level it judged at, the claim
    conditions still open and the cells (table ``cell`` ids of the sweep's own grid) that get the
    next seeds."""

    index: int
    seeds: list[int]
    alpha: float
    open_claims: list[str] = field(default_factory=list)
    open_cells: list[str] = field(default_factory=list)
    added: int = 0          # trials of the next seeds this look asked for (0 at the last look)

    def as_dict(self) -> dict:
        return asdict(self)


def open_cells(verdicts: list, sweep: str) -> tuple[list[str], list[str]]:
    """``(open claim conditions, open cells of sweep)``: the cells of every comparison whose own
    verdict is inconclusive, in claim conditions that are inconclusive; cells of other sweeps are
    left out (their sweep adds its own seeds)."""
    claims, cells = [], []
    for v in verdicts:
        if v.verdict != INCONCLUSIVE:
            continue
        claims.append(f"{v.id} [{v.condition}]" if v.condition else v.id)
        for ch in v.checks:
            if ch.verdict != INCONCLUSIVE:
                continue
            for c in ch.cell_ids:
                try:
                    mine = json.loads(c).get("sweep") == sweep
                except (ValueError, AttributeError):
                    mine = False
                if mine and c not in cells:
                    cells.append(c)
    return claims, cells


#: Check verdicts that decide; a comparison that reaches one is not judged again at a later look.
DECISIVE = (SUPPORTED, CONTRADICTED, NEGLIGIBLE)


class LookLoop:
    """The looks of a seeded sweep, one after the other (:meth:`look`), with what each decided.

    A comparison (``Check``, by claim, condition and label) that is decisive at a look keeps that
    verdict at every later look (it is *frozen*): its cells may get more seeds for another
    comparison, but it is not judged again. A comparison open at every look so far has had every
    cell it reads extended at every look, so it is judged at look ``j`` on exactly the first
    ``n_j`` seeds of each of its cells: every verdict is the one of a fixed-size procedure at a
    planned look, which is what Bonferroni over the looks needs (``cemlab.report.stats.sequential``). A
    claim condition's verdict combines its comparisons' (frozen or current) by its rule."""

    def __init__(self, claims: list, scale: str, sweep: str, looks: list[list[int]], alpha: float | list[float],
                 history=None, sensitivity: bool = True):
        self.claims, self.scale, self.sweep, self.looks = claims, scale, sweep, looks
        #: Judge the shared-rate sensitivity verdicts too (the report's replay; the running sweep's
        #: looks need only the verdicts that open cells).
        self.sensitivity = sensitivity
        #: The two-sided level of each look (one number: every look at it).
        self.alphas = [float(a) for a in alpha] if isinstance(alpha, (list, tuple)) else [float(alpha)] * len(looks)
        if len(self.alphas) != len(looks):
            raise ValueError(f"{len(self.alphas)} levels for {len(looks)} looks: give one per look")
        self.history = history
        self.by_id = {c.id: c for c in claims}
        self.frozen: dict[tuple, object] = {}   # (claim, condition, label) -> the Check that decided
        self.verdicts: list = []
        self.made: list[Look] = []

    def look(self, j: int, trials_of: Callable[[str], pd.DataFrame]) -> Look:
        """Look ``j`` on ``trials_of`` (every sweep's trials; restricted here to the look's seeds), at
        its level ``alphas[j]``: a comparison decided here keeps this look's level and interval. Each
        cell's bracketing is read on look 0's seeds, the ones the sweep's bracketing look read."""
        from cemlab.report.claims.verdicts import evaluate

        seeds = self.looks[j]
        cells_of, trials_at = at_seeds(trials_of, seeds)
        self.verdicts = [self._freeze(v) for v in evaluate(self.claims, cells_of, self.scale, trials_at,
                                                            self.history, alpha=self.alphas[j],
                                                            sensitivity=self.sensitivity,
                                                            edge_seeds=self.looks[0])]
        open_claims, cells = open_cells(self.verdicts, self.sweep)
        look = Look(j, list(seeds), self.alphas[j], open_claims, cells)
        self.made.append(look)
        return look

    def _freeze(self, v):
        from cemlab.report.stats.significance import combine
        from cemlab.report.claims.verdicts import settle

        checks = []
        for ch in v.checks:
            key = (v.id, v.condition, ch.label)
            if key not in self.frozen and ch.verdict in DECISIVE:
                self.frozen[key] = ch
            checks.append(self.frozen.get(key, ch))
        if all(a is b for a, b in zip(checks, v.checks)):
            return v
        claim = self.by_id.get(v.id)
        return settle(v, checks, combine([ch.verdict for ch in checks], getattr(claim, "combine", "all")))


def replay(claims: list, trials_of: Callable[[str], pd.DataFrame], scale: str, sweep: str, looks: list[list[int]],
           alpha: float | list[float], history=None, upto: int | None = None, sensitivity: bool = True) -> LookLoop:
    """The looks the sweep made, replayed from its trials: look after look until nothing is open
    or the last look (or ``upto`` looks). The loop's ``verdicts`` are the sweep's final verdicts
    (``sensitivity``: with the shared-rate verdicts, as the report shows them)."""
    loop = LookLoop(claims, scale, sweep, looks, alpha, history, sensitivity)
    for j in range(len(looks) if upto is None else min(upto, len(looks))):
        if not loop.look(j, trials_of).open_cells:
            break
    return loop


def next_trials(full: list, cells: list[str], seeds: list[int], have: set[str] | None = None) -> list:
    """The trials of ``full`` (``full_grid``) with one of ``seeds`` in ``cells`` and in the cells
    equal to them but for the learning rate (a tuned comparison tests every rate of a cell, so every
    rate gets the seeds; ``Check.cell_ids`` lists them already, this keeps it so for any rule), in
    grid order; ``have``: the cells (table ids) that exist, the grid's and those a bracketing look
    added (``full`` lists every rate a bracketing look could have added)."""
    want, new = {tuning_family(c) for c in cells}, set(int(s) for s in seeds)
    return [t for t in full if seed_of(t) in new and tuning_family(cell_of(t)) in want
            and (have is None or cell_of(t) in have)]


def level_note(spec, scale: str, trials: list, seeds_run=None) -> str:
    """The report page's line on how its claims were judged: the level, and for a ``seeding``
    sweep its planned looks with the level of each (and, where ``seeds_run``, the seeds that have
    runs, holds none beyond the grid's: that no seed was added); for a sweep that judges no claim,
    that it judges none and why (its description says why)."""
    from cemlab.report.stats.sequential import ALPHA, split_text

    if not spec.claims:
        why = " ".join(str(spec.description or "").split())
        return "none: this sweep's file lists no claim" + (f" ({why})" if why else "")
    looks = spec.looks(scale, trials) if trials else [[]]
    if trials and spec.confirmation_budget(scale, trials) is not None:
        conf = spec.confirmation
        return (f"{len(spec.claims)} claim(s); each tuned comparison chooses every cell's learning rate on seeds "
                f"{', '.join(map(str, looks[0]))} (the lowest median validation metric) and is judged on the fresh "
                f"seeds of the confirmation stage, its favoured cell at the chosen rate against the other at every "
                f"rate of the union of their chosen rates, each one-sided test at {conf.alpha / 2:g} (alpha "
                f"{conf.alpha:g}; trial budget {spec.confirmation_budget(scale, trials)}; docs/verdicts.md)")
    if len(looks) < 2:
        return (f"{len(spec.claims)} claim(s), each at alpha {ALPHA:g} on the seeds of the grid (every one-sided "
                f"decision at {ALPHA / 2:g}; a claim that also reads a seeded sweep at that sweep's strictest look's "
                f"level; each comparison's interval at the level that decided it)")
    alphas = spec.look_alphas(scale, trials)
    even = all(abs(a - alphas[0]) < 1e-12 for a in alphas)
    seeds = "; ".join(f"look {j}: {len(s)} seeds at alpha {a:.4g} (one-sided {a / 2:.4g})"
                      for j, (s, a) in enumerate(zip(looks, alphas)))
    how = (f"alpha {ALPHA:g}/{len(looks)} = {alphas[0]:.3g} at each" if even else
           f"alpha {ALPHA:g} split over them as the sweep file fixes it (seeding.alpha_split: {split_text(alphas)})")
    note = (f"{len(spec.claims)} claim(s) at {len(looks)} planned looks, {how}: seeds were added only to the cells "
            f"of comparisons still inconclusive ({seeds}; Bonferroni over the looks, docs/verdicts.md); each "
            f"comparison is shown at the look that decided it (or the last), its interval at that look's level")
    if spec.split_note(scale, trials):
        note += f" ({spec.split_note(scale, trials)})"
    if seeds_run and set(seeds_run) <= set(looks[0]):   # runs exist, none of an added seed
        note += ("; no seed was added in the runs found (the grid's own seeds only, as `cemlab sweep --no-seeding` "
                 "runs it), judged at the planned levels all the same")
    return note


def planned_looks(ctx, sweep: str | None = None) -> tuple:
    """``(spec, trials, looks)`` of ``sweep`` (default ``ctx.sweep``) at the report's scale: its planned
    seed looks (one look of no seed where the sweep or its grid at this scale does not exist)."""
    spec, trials = sweep_grid(ctx, sweep)
    return spec, trials, (spec.looks(ctx.scale, trials) if trials else [[]])


def edge_seeds(ctx, sweep: str | None = None) -> list[int] | None:
    """The seeds a report's verdicts read each cell's bracketing on: a seeded sweep's first look (the
    one its bracketing look read, as ``LookLoop`` passes it); None for a sweep without seed looks,
    whose verdicts read every seed."""
    chosen_on = selection_seeds(ctx, sweep)
    if chosen_on is not None:
        return chosen_on
    spec, trials, looks = planned_looks(ctx, sweep)
    return [int(x) for x in looks[0]] if len(looks) >= 2 else None


def sweep_verdicts(claims: list, ctx, sweep: str | None = None) -> list:
    """The verdicts a report shows for ``claims`` read through ``ctx`` (``inputs.context.ReportContext``),
    judged for ``sweep`` (default ``ctx.sweep``): where that sweep is seeded at the scale, its looks
    replayed (:func:`replay`: every comparison at the look that decided it, at that look's level);
    else each claim at its sweeps' level (``sequential.claim_alpha``). Each verdict carries the
    seeds per cell its sweep can reach (``seed_budget``)."""
    from cemlab.report.stats.sequential import claim_alpha
    from cemlab.report.claims.verdicts import evaluate

    sweep = sweep or ctx.sweep
    spec, trials, looks = planned_looks(ctx, sweep)
    budget = spec.confirmation_budget(ctx.scale, trials) if spec is not None and trials else None
    if budget is not None:   # rates chosen on the grid's seeds, judged on the fresh ones (union rule)
        out = evaluate(claims, ctx.cells, ctx.scale, ctx.trials, ctx.history, alpha=spec.confirmation.alpha,
                       selection_seeds=[int(s) for s in looks[0]])
        have = ctx.trials(sweep)
        for v in out:
            v.seed_budget = int(have["seed"].nunique()) if len(have) else len(looks[0])
        return out
    if len(looks) < 2:
        out = [v for c in claims for v in evaluate([c], ctx.cells, ctx.scale, ctx.trials, ctx.history,
                                                   alpha=claim_alpha(c, ctx.grids, ctx.scale))]
    else:
        out = replay(claims, ctx.trials, ctx.scale, sweep, looks, spec.look_alphas(ctx.scale, trials),
                     ctx.history).verdicts
    for v in out:
        v.seed_budget = len(looks[-1])
    return out
