"""The effect a comparison shows beside its verdict: each seed's choice of rates made on the other
seeds' validation metric (``chosen_diffs``), and its descriptive 95% mark, the every-choice interval
of the tuned effect (``evidence_and_interval``). It describes; the verdict is the every-choice
test's (``cemlab.report.stats.decision``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.report.stats.bounds import every_choice_bound
from cemlab.report.stats.confirmation import UnionChoice, choose, selection_score
from cemlab.report.stats.decision import Evidence, comparison_evidence
from cemlab.report.stats.significance import LEVEL, Interval, t_interval


def evidence_and_interval(diffs_of: dict[tuple, np.ndarray], chosen: list, coefs, n_choices, tol: float, side: str,
                          margin: float, every_choice: bool = False) -> tuple[Evidence, Interval]:
    """A comparison's evidence from the per-seed differences of every choice (``diffs_of``: one
    candidate per position -> differences) and the interval shown: with candidates, the effect of each
    seed's choice made on the other seeds' validation (``chosen``, from ``chosen_diffs``) and the 95%
    interval of the tuned effect over every choice (``_shown_interval``); else the t-interval of the
    one choice. ``every_choice``: the claim must hold at every choice of every position (none may be
    picked in its favour)."""
    tested = tuple(0.0 for _ in coefs) if every_choice else coefs
    evidence = comparison_evidence(diffs_of, tested, n_choices, tol, side, margin)
    if max(n_choices) > 1:
        return evidence, _shown_interval(diffs_of, chosen, tested, n_choices)
    return evidence, t_interval(next(iter(diffs_of.values())))


def _shown_interval(diffs_of: dict[tuple, np.ndarray], chosen: list, tested, n_choices) -> Interval:
    """The effect shown for a comparison with candidates and its descriptive 95% mark. The effect: at
    each seed, every position takes the candidate with the lowest *median* log validation metric over
    all of that candidate's *other* seeds with an outcome (leave-one-seed-out; a worst outcome ranks
    last and moves the median no further than a bad finished run would), then the seed's difference
    of that choice as the tests score it (``bounds.paired_diffs_by_seed``), averaged over seeds. The
    mark: the every-choice bounds at one-sided 2.5% each (``bounds.every_choice_bound``), the 95%
    confidence interval of the tuned effect that the tests decide on (the interval that decided is
    the same construction at the tests' own levels), so it excludes 0 only as often as its level
    allows; a t-interval of the chosen differences would not (the choices of neighbouring seeds share
    most of their seeds, so their differences are not independent). It describes; the verdict is the
    every-choice test's."""
    shown = t_interval([d for _, d in chosen])
    a = (1.0 - LEVEL) / 2
    low = every_choice_bound(diffs_of, tested, n_choices, a, upper=False)
    high = every_choice_bound(diffs_of, tested, n_choices, a, upper=True)
    return Interval(shown.effect, low, high, shown.n, shown.sd, shown.note)


def shown_diffs(chosen: list) -> tuple:
    """The per-seed differences behind the effect shown, ``((seed, difference), ...)``: those of
    ``chosen_diffs`` at the seeds where the chosen cells have a value (one candidate per position: the
    plain paired differences)."""
    return tuple((s, d) for s, d in chosen if math.isfinite(d))


def _median_other(t: pd.Series, v: pd.Series, s) -> float:
    """The median log validation metric of a candidate over its seeds other than ``s`` (a worst
    outcome at +inf ranks last), or of its test metric where no validation was logged (older runs);
    inf without any."""
    def usable(x: pd.Series) -> np.ndarray:
        x = x.drop(s, errors="ignore").to_numpy(dtype=float)
        return x[~np.isnan(x)]
    other = usable(v)
    if not len(other):
        other = usable(t)
    return float(np.median(other)) if len(other) else math.inf


def chosen_diffs(logs: list, by_seed: dict[tuple, dict]) -> list[tuple[int, float]]:
    """Per seed, the difference (from ``by_seed``: choice -> seed -> difference, as the tests score
    it) of the choice each of whose positions takes the candidate with the lowest median validation
    metric over its other seeds (``logs``: per position, per candidate, its per-seed test and
    validation log metrics); NaN where that choice lacks the seed."""
    seeds = sorted(set.union(*(set(t.index) for pos in logs for t, _ in pos)))
    diffs = []
    for s in seeds:
        combo = tuple(min(range(len(pos)), key=lambda j: _median_other(*pos[j], s)) for pos in logs)
        diffs.append((int(s), float(by_seed.get(combo, {}).get(s, math.nan))))
    return diffs


def confirmation_of(cands: list, logs: list, selection: list[int]) -> UnionChoice:
    """Each position's chosen candidate on the ``selection`` seeds and the union it is judged over
    (``confirmation.choose``), from the candidates' learning rates and per-seed (test, validation) logs."""
    rates = [[float(c.get("lr", math.nan)) for c in cs] for cs in cands]
    scored = [[selection_score(v, t, selection) for t, v in pos] for pos in logs]
    return choose(rates, [[s for s, _ in pos] for pos in scored], [[d for _, d in pos] for pos in scored], selection)


def union_evidence(diffs_of: dict, chosen: list, coefs, tol: float, side: str, margin: float,
                   conf: UnionChoice) -> tuple[Evidence, Interval]:
    """The evidence of a comparison judged on fresh seeds by the union rule (``conf``), and the
    interval shown: the effect of the chosen rates' paired differences on those seeds, its 95% mark
    the union bounds at one-sided 2.5% each (so the effect always lies inside it)."""
    evidence = comparison_evidence(diffs_of, coefs, (1,) * len(coefs), tol, side, margin, conf=conf)
    shown_iv = t_interval([d for _, d in chosen])
    a = (1.0 - LEVEL) / 2
    low = every_choice_bound(diffs_of, coefs, (), a, upper=False, conf=conf)
    high = every_choice_bound(diffs_of, coefs, (), a, upper=True, conf=conf)
    return evidence, Interval(shown_iv.effect, low, high, shown_iv.n, shown_iv.sd, shown_iv.note)


#: Why a comparison's effect shown can lie outside its own interval, by how its cells were chosen
#: (``outside_reason``): the effect and the interval are about different choices of rates.
OUTSIDE_WHY = {
    "every choice": ("one choice of rates shown (each seed's, made on the other seeds' validation), the interval "
                     "over every choice tested (each end at the choice that decides its side)"),
    "union": ("the chosen rates shown, each end of the interval at the choice of the union of chosen rates that "
              "its side requires"),
    "": "the effect and the interval read different choices of the compared cells",
}


def effect_outside(effect: float, ends: dict, how: str = "") -> str:
    """'' where ``effect`` lies inside each interval of ``ends`` (its name -> (low, high), on the
    effect's scale; an end that is not finite, open or missing, bounds nothing), else on which side of
    which it lies and why (``OUTSIDE_WHY[how]``), e.g. ``effect below the interval that decided: one
    choice of rates shown (...)``."""
    if effect is None or not math.isfinite(effect):
        return ""
    out = [f"{'below' if effect < low else 'above'} the {name}" for name, (low, high) in ends.items()
           if (math.isfinite(low) and effect < low) or (math.isfinite(high) and effect > high)]
    return f"effect {' and '.join(out)}: {OUTSIDE_WHY.get(how, OUTSIDE_WHY[''])}" if out else ""


def outside_reason(ch, decided: bool = True, descriptive: bool = True) -> str:
    """Why a comparison's (``pairing.Check``) effect shown lies outside its interval that decided
    (``decided``) or its descriptive 95% interval (``descriptive``), '' where it lies inside both. It
    can only where the effect and the interval read different choices: a tuned comparison with every
    choice tested (``_shown_interval``: the effect at each seed's validation choice, each end at the
    choice that decides its side) or, rarely, one judged by the union rule."""
    ends = {}
    if decided and ch.bounds is not None:
        ends["interval that decided"] = (ch.bounds.low, ch.bounds.high)
    if descriptive and ch.iv.finite:
        ends["95% interval"] = (ch.iv.low, ch.iv.high)
    how = "union" if ch.confirmation is not None else "every choice" if max(ch.n_choices or (1,)) > 1 else ""
    return effect_outside(ch.iv.effect, ends, how)
