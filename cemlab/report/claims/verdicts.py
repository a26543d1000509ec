"""How a claim's rule turns runs into a verdict, and the claims.csv / comparisons.csv tables.

The method is stated for a reviewer in ``docs/verdicts.md``; in short:

- **Effects on the log scale.** Per seed, a comparison's difference is a linear combination of the
  compared cells' log metrics (for perplexity: of their mean cross-entropies), e.g.
  log(ppl_favoured / ppl_reference); the interval is built there and shown as exp(.) - 1 in percent.
  Tolerances and margins are relative changes, compared on the same scale (log(1 + tol)).
- **Choose on other seeds than you judge.** Where a position of a comparison may be any of several
  cells (a cell's learning rates, the best of several preconditioners), the *decision* tests every
  choice (``decision.every_choice_p``), so nothing is selected on the seeds that judge; the *effect
  shown* takes each choice on the median validation metric of the cell's other seeds
  (leave-one-seed-out).
- **A divergence is the worst outcome.** A diverged run, or one whose metric is not finite or no
  better than chance, is an outcome of its cell ranked below every finished run and scored where it
  weakens no test against its cell (the t statistic's peak, else the worst finished run of the
  choice), in every compared cell alike; a failed run has no value and its
  seed does not pair (``divergence.outcomes``, ``bounds.paired_diffs_by_seed``, ``pairing.pick_cell``).
- **The interval shown decided.** Each comparison's interval is the one its tests decided at: each
  end at the one-sided level of its test (the look's share of alpha, Holm's step, the every-choice
  factor), its coverage in the ``level`` column (``bounds.decision_bounds``).
- **No silent gaps.** A planned comparison whose cells have no usable runs is a comparison of its
  own with the word ``not enough runs``; it counts in k and leaves an ``all`` claim at best
  ``not enough runs``.
- **Multiplicity that matches the decision** (``decision.decide``): ``all`` claims are supported by
  intersection-union, contradicted by Holm over the k planned comparisons; ``any`` the reverse. Each
  claim has one primary condition (its entry's ``primary_condition``); other conditions and the
  shared-rate verdict are sensitivity checks, labelled as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from cemlab.paper import PAPER_REGIME, SESOI
from cemlab.report.claims.pairing import (  # noqa: F401 (re-exported: the rules and plugins build comparisons with them)
    Check, ClaimData, Unrun, WHERE, cells_compared, check_of_diffs, coefficients, compare, eta_condition,
    etas_of, log2_ratio, num, pct, pick_cell, regime_of, rel, shown, sizes_of)
from cemlab.report.claims.shown_effect import outside_reason
from cemlab.report.stats.divergence import UNUSABLE  # noqa: F401 (re-exported with the above)
from cemlab.report.stats.significance import NOT_ENOUGH
from cemlab.report.stats.decision import ALPHA, decide
from cemlab.report.stats.bounds import smallest_p


METHOD = ("paired t-test over seeds on the log scale; every choice tested; intersection-union for 'all', Holm for "
          "'any' and contradictions; a diverged run is its cell's worst outcome; a side stands only where the cells "
          "that could erase it have a bracketed learning-rate optimum; the interval shown is the one that decided, "
          "at its level (docs/verdicts.md)")
#: The method of a sweep with a confirmation stage (``selection_seeds``).
METHOD_UNION = ("paired t-test over seeds on the log scale; each cell's learning rate chosen on the selection seeds "
                "(lowest median validation), judged on the fresh seeds only: the favoured cell at its chosen rate "
                "against the other at every rate of the union of their chosen rates; intersection-union for 'all', "
                "Holm for 'any' and contradictions; a diverged run is its cell's worst outcome; the interval shown is "
                "the one that decided, at its level (docs/verdicts.md)")


@dataclass
class Verdict:
    """A claim with its verdict (one per ``condition`` for the claims judged per step size)."""

    id: str
    paper: str
    claim: str
    rule: str
    sweeps: list[str]
    verdict: str
    numbers: str
    scale: str
    missing: list[str] = field(default_factory=list)
    condition: str = ""
    effect: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    n_seeds: int = 0
    tokens_per_param: float = math.nan
    steps: float = math.nan
    corpus: str = ""
    paper_regime: str = PAPER_REGIME
    method: str = METHOD
    margin: float = SESOI
    primary: str = ""
    n_comparisons: int = 0
    lr_mode: str = "tuned"
    verdict_shared_lr: str = ""
    shared_lr: str = ""
    checks: list = field(default_factory=list)
    size_flips: str = ""
    #: ``primary`` (the claim's primary condition) or ``sensitivity`` (another condition: shown, never
    #: changes the primary verdict).
    role: str = "primary"
    #: The comparison that decided the verdict (its label); ``effect`` is its effect shown,
    #: ``ci_low`` / ``ci_high`` its interval that decided, of coverage ``level``
    #: (``bounds.Bounds``); ``decided_how`` what decided where that interval does not say it all.
    decided_by: str = ""
    level: float = math.nan
    decided_how: str = ""
    #: Comparisons no outcome of their seeds could decide (``undecidable``), with why.
    undecidable: str = ""
    #: Why ``effect`` lies outside [``ci_low``, ``ci_high``] ('' where it lies inside:
    #: ``shown_effect.outside_reason``), and the sides of the deciding comparison the edge rule voided
    #: with the cells at an edge (``Check.edge_note``).
    effect_outside: str = ""
    not_decisive: str = ""
    #: Seeds per cell the claim's sweep can reach at this scale (its last planned look; the grid's
    #: seeds without seeding); 0 where unknown (``look.sweep_verdicts`` sets it).
    seed_budget: int = 0
    #: How its comparisons combine (``significance.COMBINE_RULES``).
    combine: str = "all"

    @property
    def verdict_changes(self) -> bool:
        """The tuned verdict differs from the verdict at every shared learning rate."""
        return self.verdict_shared_lr in (SUPPORTED_W, CONTRADICTED_W, NEGLIGIBLE_W) and self.verdict_shared_lr != self.verdict


SUPPORTED_W, CONTRADICTED_W, NEGLIGIBLE_W = "supported", "contradicted", "negligible"


def primary_check(checks: list[Check], primary: str) -> Check:
    """The claim's primary comparison: the first whose label contains ``primary`` (the entry's
    headline contrast), else the first."""
    return next((c for c in checks if primary and primary in c.label), checks[0])


def _deciding(checks: list[Check], verdict: str) -> Check:
    """The comparison that decided a verdict: for ``supported`` (every comparison had to be) the
    weakest, for ``contradicted`` the strongest contradiction, for ``negligible`` the weakest
    negligible one, otherwise the first that left the claim open."""
    ev = [c for c in checks if c.evidence is not None]
    if verdict == SUPPORTED_W and ev:
        return max(ev, key=lambda c: c.evidence.p_claim)
    if verdict == CONTRADICTED_W and ev:
        return min(ev, key=lambda c: c.evidence.p_against)
    if verdict == NEGLIGIBLE_W:
        neg = [c for c in ev if c.verdict == NEGLIGIBLE_W]
        return max(neg, key=lambda c: c.evidence.p_negligible) if neg else checks[0]
    return next((c for c in checks if c.verdict == verdict), checks[0])


def size_flips(checks: list[Check]) -> str:
    """Comparisons made at several sizes whose sign flips: one size's interval that decided wholly
    below 0 and another's wholly above; each named with its effect per size, in size order (the trend against
    parameters)."""
    groups: dict[str, list[Check]] = {}
    for ch in checks:
        size = str(ch.cells.get("size", ""))
        if size and " vs " not in size:
            groups.setdefault(ch.label.replace(size, "").strip(), []).append(ch)
    out = []
    for key, g in groups.items():
        if len(g) < 2:
            continue
        below = any(c.bounds is not None and c.bounds.high < 0 for c in g)
        above = any(c.bounds is not None and c.bounds.low > 0 for c in g)
        if below and above:
            out.append(f"{key}: " + ", ".join(f"{c.cells['size']} {c.fmt(c.iv.effect)}" for c in g))
    return "; ".join(out)


def _condition_verdict(checks: list[Check], combine: str, alpha: float) -> str:
    """Decide one condition of a claim (``decision.decide``) at the two-sided level ``alpha``, and write
    each comparison's word, the one-sided levels its tests were held to and the interval that
    decided at those levels (``Check.settle``)."""
    verdict, words, levels = decide([ch.evidence for ch in checks], combine, alpha)
    a = alpha / 2
    for ch, w, lv in zip(checks, words, levels):
        ch.verdict = w
        holm = math.isfinite(lv) and not math.isclose(lv, a)   # a Holm step below a: said in the row
        if combine == "any":
            ch.settle(lv, a, a, holm="supported" if holm else "")
        else:
            ch.settle(a, lv, a, holm="contradicted" if holm else "")
    return verdict


def _shared_verdicts(c, data_of: Callable[..., ClaimData], rates: list[float], alpha: float,
                     planned: dict[str, set] | None = None) -> dict[str, str]:
    """Per condition, the verdict with every cell at one shared learning rate, at each rate of the
    grid (a sensitivity check), at the level ``alpha`` the tuned verdict is judged at: the word the
    verdicts at every rate agree on, else the list. ``planned``: per condition the labels of its tuned
    comparisons; one that a rate lacks (a cell never run at that rate, e.g. a rate only bracketing
    added to another cell) counts as a planned comparison without runs (``decision.decide``: an
    ``all`` condition is then at best ``not enough runs``), never as a condition of fewer comparisons."""
    per: dict[str, list[str]] = {}
    for lr in rates:
        checks, _ = c.evaluate(data_of("shared", lr))
        checks = [ch for ch in checks if ch is not None]
        for cond in dict.fromkeys([*(planned or {}), *(ch.condition for ch in checks)]):
            mine = [ch for ch in checks if ch.condition == cond]
            gap = len((planned or {}).get(cond, set()) - {ch.label for ch in mine})
            word = (decide([ch.evidence for ch in mine] + [None] * gap, c.combine, alpha)[0] if gap
                    else _condition_verdict(mine, c.combine, alpha) if mine else NOT_ENOUGH)
            per.setdefault(cond, []).append(f"lr {lr:.3g}: {word}")
    out = {}
    for cond, vs in per.items():
        words = {v.split(": ", 1)[1] for v in vs}
        out[cond] = words.pop() + " at every rate" if len(words) == 1 and len(vs) == len(rates) else "; ".join(vs)
    return out


def evaluate(claims: list, cells_of: Callable[[str], pd.DataFrame], scale: str,
             trials_of: Callable[[str], pd.DataFrame] | None = None,
             history: Callable[[str, str], list] | None = None,
             sweeps: dict[str, list[str]] | None = None, alpha: float = ALPHA,
             sensitivity: bool = True, edge_seeds: list[int] | None = None,
             selection_seeds: list[int] | None = None) -> list[Verdict]:
    """Verdicts of ``claims`` (``cemlab.report.claims.catalog.Claim``) from the cells (and per-seed trials)
    of their sweeps at ``scale``: one per claim and condition, the claim's primary condition first
    marked ``primary``, the others ``sensitivity``. A claim reads the sweeps its entry names
    (``Claim.sweeps``) and no other; ``sweeps`` (claim id -> sweeps) narrows that to the sweeps given
    for it. ``alpha``: the error rate each decision is held to (the sequential seeding of a sweep
    judges each planned look at a share of it).

    The verdict (tuned) lets every cell be at any of its learning rates, every choice tested; the
    sensitivity verdict ``verdict_shared_lr`` puts all cells at one shared rate, at each rate of
    the grid (``n/a`` with the reason for a grid with one rate), at the same ``alpha``; without
    ``sensitivity`` it is left out (``not judged``: the looks of a running sweep, which it opens no
    cell for). ``selection_seeds``: a sweep with a confirmation stage: each tuned comparison chooses
    its cells' rates on these seeds and is judged on the others by the union rule
    (``cemlab.report.stats.confirmation``)."""
    out = []
    for c in claims:
        own = tuple(getattr(c, "sweeps", ()))
        mine_sweeps = (list(own) or None) if sweeps is None else sweeps.get(c.id, [])

        def data_of(mode="tuned", lr=math.nan):
            return ClaimData(cells_of, trials_of, history, mine_sweeps, c.margin, mode, own, alpha, lr,
                             relative_margin=getattr(c, "relative_margin", True), edge_seeds=edge_seeds,
                             selection_seeds=selection_seeds)

        first = data_of()
        checks, missing = c.evaluate(first)
        checks, missing = [ch for ch in checks if ch is not None], list(dict.fromkeys(missing))
        rates = first.rates(own[0]) if own else []
        planned: dict[str, set] = {}
        for ch in checks:
            planned.setdefault(ch.condition, set()).add(ch.label)
        shared = _shared_verdicts(c, data_of, rates, alpha, planned) \
            if sensitivity and len(rates) > 1 and first.per_rate else {}
        conditions = list(dict.fromkeys(ch.condition for ch in checks)) or [""]
        want = getattr(c, "primary_condition", "")
        primary_cond = next((x for x in conditions if want and x == want), conditions[0])
        conditions = [primary_cond] + [x for x in conditions if x != primary_cond]
        for cond in conditions:
            mine = [ch for ch in checks if ch.condition == cond]
            verdict = _condition_verdict(mine, c.combine, alpha) if mine else NOT_ENOUGH
            v = Verdict(c.id, c.paper, c.claim, c.rule, mine_sweeps or [], verdict,
                        "; ".join(ch.describe() for ch in mine), scale, missing, cond, paper_regime=c.paper_regime,
                        margin=c.margin, primary=c.primary, n_comparisons=len(mine), checks=mine,
                        role="primary" if cond == primary_cond else "sensitivity", combine=c.combine,
                        method=METHOD_UNION if selection_seeds else METHOD)
            if len(rates) > 1 and not first.per_rate:
                v.verdict_shared_lr = "n/a: the rule reads each seed's whole learning-rate curve, not one rate per cell"
            elif len(rates) > 1 and not sensitivity:
                v.verdict_shared_lr = "not judged (a look of the running sweep)"
            elif len(rates) > 1:
                v.verdict_shared_lr = shared.get(cond, NOT_ENOUGH)
                v.shared_lr = " ".join(f"{r:.3g}" for r in rates)
            else:
                v.verdict_shared_lr = "n/a: one learning rate in the grid (the verdict is at that rate)"
            settle(v, mine, verdict)
            out.append(v)
    return out


def settle(v: Verdict, checks: list[Check], verdict: str) -> Verdict:
    """Give ``v`` its comparisons and verdict, and what follows from them: the numbers, the
    comparison that decided it with its effect and the interval that decided (relative changes, at
    its level), the comparisons no outcome of its seeds could decide, and the regime of the claim's
    primary comparison."""
    v.checks, v.verdict, v.n_comparisons = checks, verdict, len(checks)
    v.numbers = "; ".join(ch.describe() for ch in checks)
    v.size_flips = size_flips(checks)
    v.undecidable = undecidable(checks)
    if checks:
        d = _deciding(checks, verdict)
        v.decided_by = d.label
        v.effect = shown(d.iv.effect, d.fmt)
        b = d.bounds
        v.ci_low, v.ci_high = (shown(b.low, d.fmt), shown(b.high, d.fmt)) if b is not None else (math.nan, math.nan)
        v.level = d.level
        v.decided_how = d.how
        v.effect_outside, v.not_decisive = outside_reason(d, descriptive=False), d.edge_note()
        v.n_seeds = d.iv.n
        p = primary_check(checks, v.primary)
        v.tokens_per_param = p.regime.get("tokens_per_param", math.nan)
        v.steps = p.regime.get("steps", math.nan)
        corpora = dict.fromkeys(ch.regime.get("corpus", "") for ch in checks)
        v.corpus = ", ".join(x for x in corpora if x)
    return v


def undecidable(checks: list[Check]) -> str:
    """The comparisons that no outcome of their seeds could decide at the levels they were held to
    (an exact sign test whose smallest p-value, 0.5^n, is above the level; a t-test on one seed),
    each with why: said on the page before the verdict."""
    out = []
    for ch in checks:
        n = ch.iv.n
        if not n or ch.evidence is None:
            continue
        if smallest_p(n, ch.discrete) > max(ch.alpha_claim, ch.alpha_against):
            why = (f"an exact sign test on {n} seeds reaches p = 0.5^{n} = {0.5 ** n:.3g} at best, above its level "
                   f"{ch.alpha_claim:.3g}" if ch.discrete else f"{n} seed: a t-test needs two")
            out.append(f"{ch.label}: cannot be decided ({why})")
    return "; ".join(out)
