"""The interval that decided a comparison (``decision_bounds``: each end the one-sided bound of the
test that decides on that side), the paired differences per seed with the worst outcomes scored
(``paired_diffs_by_seed``), and one comparison judged on its own (``judge``, ``deciding_interval``).
The method: ``cemlab.report.stats`` and ``docs/verdicts.md``."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from cemlab.report.stats.significance import CONTRADICTED, NEGLIGIBLE, NOT_ENOUGH
from cemlab.report.stats.decision import ALPHA, Evidence, comparison_evidence, decide, holm
from cemlab.report.stats.confirmation import UnionChoice
from cemlab.report.stats.percent import level_percent


# ----------------------------------------------------------------------------------------------
# The interval that decided, and one comparison judged on its own
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bounds:
    """The interval that decided a comparison, on the effect's (log) scale: each end is the
    one-sided confidence bound of the test that decides on that side, at the one-sided level that
    test was held to (``alpha_low``, ``alpha_high``: the look's level, Holm's step and the
    every-choice factor included). NaN where no bound exists (one seed, zero spread, no choice
    with data). Its coverage is ``level`` = 1 - alpha_low - alpha_high."""

    low: float
    high: float
    alpha_low: float
    alpha_high: float
    #: What the ends are: ``t`` (paired t bounds), ``tost`` (an equivalence test's), ``negligible``
    #: (the TOST at +-margin of a difference claim), each with ``every choice`` where choices were tested.
    how: str = "t"

    @property
    def level(self) -> float:
        return 1.0 - self.alpha_low - self.alpha_high

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) or math.isfinite(self.high)

    @property
    def label(self) -> str:
        """E.g. ``97.5%`` (both ends one-sided 98.75% bounds), or ``98.13% (lower end 99.38%, upper
        98.75%, one-sided)`` where the two ends were held to different levels (a Holm step); each level
        as ``percent.level_percent`` writes it (the exact ones: ``alpha_low``, ``alpha_high``)."""
        lv = level_percent(self.level)
        if math.isclose(self.alpha_low, self.alpha_high, rel_tol=1e-9):
            return lv
        return (f"{lv} (lower end {level_percent(1 - self.alpha_low)}, upper {level_percent(1 - self.alpha_high)}, "
                f"one-sided)")


def t_bound(diffs, alpha: float, upper: bool) -> float:
    """The one-sided (1 - ``alpha``) confidence bound of the mean of ``diffs`` (non-finite dropped):
    upper (``upper``) or lower. It is dual to ``t_pvalues``: the upper bound is at most ``tol``
    exactly when the p-value of 'below tol' is at most ``alpha``. NaN with fewer than two finite
    differences or zero spread (where ``t_pvalues`` gives NaN)."""
    from scipy.special import stdtrit

    d = np.asarray(diffs, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n < 2 or not 0 < alpha < 1:
        return math.nan
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if not sd > 1e-12 * max(1.0, abs(mean)):
        return math.nan
    half = float(stdtrit(n - 1, 1.0 - alpha)) * sd / math.sqrt(n)
    return mean + half if upper else mean - half


def _choice_bound(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float,
                  upper: bool, conf: UnionChoice | None = None) -> tuple[float, tuple | None]:
    """``every_choice_bound`` and the choice whose bound it is."""
    if conf is not None:   # the upper end decides 'below', the lower 'above' (every_choice_p)
        diffs_of = conf.restrict(diffs_of, coefs, "below" if upper else "above", np.array([]))
        n_choices = (1,) * len(coefs)
    sign = 1 if upper else -1
    free = [i for i, c in enumerate(coefs) if c * sign > 0]
    m = int(np.prod([n_choices[i] for i in free])) if free else 1
    worst: dict[tuple, tuple[float, tuple]] = {}
    for combo, d in diffs_of.items():
        b = t_bound(d, alpha / m, upper)
        b = sign * b if math.isfinite(b) else math.inf   # on the 'upper' orientation: larger is worse
        key = tuple(combo[i] for i in free)
        if key not in worst or b > worst[key][0]:
            worst[key] = (b, combo)
    if not worst:
        return math.nan, None
    best, combo = min(worst.values(), key=lambda bc: bc[0])
    return (sign * best if math.isfinite(best) else math.nan), combo


def every_choice_bound(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float, upper: bool,
                       conf: UnionChoice | None = None) -> float:
    """The bound dual to ``every_choice_p``: an upper (``upper``) or lower confidence bound at
    one-sided ``alpha`` of the tuned effect sum_i c_i min_j mu_ij. For the upper bound the
    positions with c_i > 0 may be chosen (as for 'below'): the smallest, over their choices, of the
    largest upper bound at ``alpha / m`` over the other positions' choices (``m``: the number of
    choices that may be picked); the lower bound mirrors it. A choice without a bound counts as no
    bound. 'below tol' is decided at ``alpha`` exactly when this upper bound is at most ``tol``.
    ``conf``: on fresh seeds, over the choices ``UnionChoice.required`` names."""
    return _choice_bound(diffs_of, coefs, n_choices, alpha, upper, conf)[0]


def deciding_choice(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, alpha: float, upper: bool,
                    conf: UnionChoice | None = None) -> tuple | None:
    """The choice whose bound is ``every_choice_bound``'s (the picked positions' best choice, at the
    others' worst); None without one."""
    return _choice_bound(diffs_of, coefs, n_choices, alpha, upper, conf)[1]


def decision_bounds(diffs_of: dict[tuple, np.ndarray], coefs, n_choices, side: str, alpha_claim: float,
                    alpha_against: float, verdict: str = "", alpha_negligible: float | None = None,
                    discrete: bool = False, conf: UnionChoice | None = None) -> Bounds | None:
    """The interval that decided a comparison (``Bounds``) from the per-seed differences of every
    choice, at the one-sided levels its tests were held to: ``alpha_claim`` for the claim's side
    (supported), ``alpha_against`` for the other (contradicted).

    - side ``below``: the upper end at ``alpha_claim`` (supported iff it is at most tol), the lower
      end at ``alpha_against`` (contradicted iff it is at least tol); ``above`` the mirror;
    - a ``negligible`` verdict: both ends at ``alpha_negligible`` (inside +-margin: the TOST that
      decided it);
    - ``within`` (equivalence, TOST): both ends at ``alpha_claim`` (supported iff inside +-tol); a
      contradicted one both ends at ``alpha_against / 2`` (Bonferroni over the two outside tests:
      contradicted iff the interval lies wholly outside +-tol).

    None for an exact sign test (``discrete``): its decision is no t interval (the row says what
    decided, ``decided_how``). ``conf``: a comparison judged on fresh seeds, each end over the choices
    its direction requires (``confirmation.UnionChoice``)."""
    if discrete:
        return None
    choice = (" over the union of chosen rates" if conf is not None else
              " over every choice" if max(n_choices, default=1) > 1 else "")

    def end(a: float, upper: bool) -> float:
        return every_choice_bound(diffs_of, coefs, n_choices, a, upper, conf)

    def both(a: float, how: str) -> Bounds:
        return Bounds(end(a, False), end(a, True), a, a, how + choice)

    if verdict == NEGLIGIBLE and alpha_negligible is not None:
        return both(alpha_negligible, "negligible")
    if side == "within":
        return both(alpha_against / 2, "tost") if verdict == CONTRADICTED else both(alpha_claim, "tost")
    a_low, a_high = (alpha_against, alpha_claim) if side == "below" else (alpha_claim, alpha_against)
    return Bounds(end(a_low, False), end(a_high, True), a_low, a_high, "t" + choice)


def decided_how(evidence: "Evidence | None", side: str, alpha_claim: float, alpha_against: float, n: int,
                discrete: bool = False, holm: str = "") -> str:
    """What decided a comparison, in words, where its interval alone does not say it all: an exact
    sign test (with the smallest p-value its seeds can give, 0.5^n: at 3 seeds 0.125, which no
    level below it can reach), an equivalence's contradiction, a Holm step (``holm``: which side
    was held to Holm's step level)."""
    parts = []
    if discrete:
        smallest = 0.5 ** n if n else 1.0
        parts.append(f"exact sign test on {n} seeds (its smallest one-sided p is 0.5^{n} = {smallest:.3g})")
        if evidence is not None:
            parts.append(f"p supported {evidence.p_claim:.3g} against {alpha_claim:.3g}, p contradicted "
                         f"{evidence.p_against:.3g} against {alpha_against:.3g}")
        if smallest > max(alpha_claim, alpha_against):
            parts.append(f"it cannot be decided at {n} seeds")
    elif side == "within":
        parts.append(f"TOST: supported when the interval at one-sided {alpha_claim:.3g} lies inside +-tol; "
                     f"contradicted when the interval at one-sided {alpha_against / 2:.3g} lies outside it")
    if holm:
        level = alpha_against if holm == CONTRADICTED else alpha_claim
        parts.append(f"'{holm}' held to Holm's step level {level:.3g}")
    return "; ".join(parts)


def smallest_p(n: int, discrete: bool) -> float:
    """The smallest one-sided p-value a comparison over ``n`` seeds can reach: 0 for a t-test
    with two seeds or more, 0.5^n for an exact sign test, 1 with fewer than two seeds (t)."""
    if discrete:
        return 0.5 ** n if n else 1.0
    return 0.0 if n >= 2 else 1.0


#: The log metric of a worst outcome (a divergence, or a result whose metric is not finite or no better
#: than chance: ``divergence.outcomes``): worse than every run that finished, whatever its value.
WORST = math.inf


def paired_diffs_by_seed(logs, coefs, beyond: tuple[float, float] = (0.0, 0.0),
                         at: tuple[float, float] = (0.0, 0.0)) -> dict[tuple, dict]:
    """The per-seed differences of every choice of a comparison, by seed: ``logs[i][j]`` is the per-seed
    log metric of candidate ``j`` of position ``i`` (a mapping seed -> value, e.g. a ``pandas.Series``
    indexed by seed; NaN is no value, ``WORST`` a worst outcome). Each choice (one candidate per
    position) pairs over the seeds at which all of its cells have a value: sum_i c_i log metric_i.

    **A worst outcome never weakens the test against its cell.** At a seed where a worst outcome lies
    on one side only (a position with c_i > 0: the difference is pushed up; only c_i < 0: down), the
    difference is the value that makes the one-sided t-test against that side strongest, given the
    choice's seeds where every cell finished (``_strongest``: with e = d - ``at[1]`` over those seeds,
    ``at[1]`` + sum(e^2) / sum(e), the maximiser of the t statistic over the value of every such seed
    at once; ``at``: the points the tests against a loss below and above are made at, the claim's
    tolerance). So turning a finished run into a divergence can never make its cell look better to
    that test, whatever the run would have scored. Where the finished seeds lean the other way (the
    statistic then has no maximum) or none finished, it takes the worst finished run of the choice's
    cells at its paired seeds in its cell's place (W). Either way it counts at least as a loss of that
    side beyond the claim's tolerance and margin (``beyond``: at least ``beyond[1]``, or at most
    ``beyond[0]``), so a divergence never reads as a tie, a negligible difference or a win of its own
    cell. A seed where both sides are worst outcomes is a tie (difference 0), as is every seed of a
    choice where no cell finished. Under identical cells the scores mirror each other, so the paired
    law stays symmetric about 0 (docs/verdicts.md, "A divergence is the worst outcome")."""
    lo, hi = beyond
    cells = [[_outcome_items(x) for x in pos] for pos in logs]
    out: dict[tuple, dict] = {}
    for combo in itertools.product(*(range(len(pos)) for pos in cells)):
        chosen = [cells[i][j] for i, j in enumerate(combo)]
        seeds = sorted(set.intersection(*(set(c) for c in chosen))) if chosen else []
        if not seeds:
            continue
        finite = [c[s] for c in chosen for s in seeds if math.isfinite(c[s])]
        w = max(finite) if finite else math.nan
        done = [float(sum(k * c[s] for k, c in zip(coefs, chosen))) for s in seeds
                if all(math.isfinite(c[s]) for c in chosen)]
        up_at, down_at = _strongest(done, at[1], 1.0), _strongest(done, at[0], -1.0)
        by_seed: dict = {}
        for s in seeds:
            vals = [c[s] for c in chosen]
            up = any(k > 0 and not math.isfinite(v) for k, v in zip(coefs, vals))
            down = any(k < 0 and not math.isfinite(v) for k, v in zip(coefs, vals))
            if not math.isfinite(w) or (up and down):
                by_seed[s] = 0.0   # both sides worst outcomes, or nothing finished: a tie
                continue
            d = float(sum(k * (v if math.isfinite(v) else w) for k, v in zip(coefs, vals)))
            if up:
                by_seed[s] = max(up_at if math.isfinite(up_at) else d, hi)
            elif down:
                by_seed[s] = min(down_at if math.isfinite(down_at) else d, lo)
            else:
                by_seed[s] = d
        out[combo] = {s: by_seed[s] for s in seeds}
    return out


def _strongest(diffs: list[float], at: float, sign: float) -> float:
    """The value of a seed's difference that makes the one-sided t-test of ``diffs`` plus that seed
    (any number of such seeds, all at this value) strongest toward ``sign`` (+1: above ``at``, -1:
    below): with e = sign (d - at), the t statistic grows with sum(e) / sqrt(sum(e^2)), which the
    added seeds maximise at e = sum(e^2) / sum(e) (Cauchy-Schwarz). NaN where sum(e) <= 0 (no
    maximum: the statistic only creeps toward its limit as the value grows)."""
    e = [sign * (d - at) for d in diffs]
    total = sum(e)
    if not total > 0:
        return math.nan
    return at + sign * sum(x * x for x in e) / total


def paired_diffs(logs, coefs, beyond: tuple[float, float] = (0.0, 0.0),
                 at: tuple[float, float] = (0.0, 0.0)) -> dict[tuple, np.ndarray]:
    """``paired_diffs_by_seed`` as arrays in seed order: what the tests read (``comparison_evidence``)."""
    return {combo: np.array([d[s] for s in sorted(d)], dtype=float)
            for combo, d in paired_diffs_by_seed(logs, coefs, beyond, at).items()}


def test_points(tol: float, side: str) -> tuple[float, float]:
    """The points the tests against a loss below and above are made at (``paired_diffs_by_seed``'s
    ``at``): the claim's tolerance, -tol and +tol for an equivalence (``within``)."""
    return (-tol, tol) if side == "within" else (tol, tol)


def beyond_of(tol: float, side: str, margin: float = 0.0) -> tuple[float, float]:
    """Where a worst outcome's difference must lie beyond, below and above (``paired_diffs_by_seed``):
    0, the claim's tolerance (+-tol for an equivalence) and the smallest effect of interest (+-margin)."""
    edges = [0.0, tol, margin, -margin] + ([-tol] if side == "within" else [])
    return min(edges), max(edges)


def _outcome_items(x) -> dict:
    """A mapping seed -> log value (``dict`` or ``pandas.Series``) with its values: finite ones and
    worst outcomes (``WORST``); NaN (no value) and -inf dropped."""
    items = x.items() if hasattr(x, "items") else dict(x).items()
    out = {}
    for k, v in items:
        v = float(v)
        if math.isfinite(v) or v == WORST:
            out[k] = v
    return out


@dataclass(frozen=True)
class Judgement:
    """One comparison judged on its own: its verdict word, its evidence (one-sided p-values, every
    choice tested) and the interval that decided (``Bounds``; None for a sign test), with the
    seeds it read (``n``: the most of any choice)."""

    verdict: str
    evidence: Evidence | None
    bounds: Bounds | None
    n: int


def judge(diffs_of: dict[tuple, np.ndarray], coefs=(), n_choices=(), tol: float = 0.0, side: str = "below",
          margin: float = 0.0, alpha: float = ALPHA, discrete: bool = False) -> Judgement:
    """One comparison on its own at the two-sided level ``alpha`` (each one-sided test at
    ``alpha / 2``: supported, contradicted, negligible), from the per-seed differences of every
    choice (``diffs_of``, e.g. ``paired_diffs``; a comparison without choices: ``{(): diffs}`` with
    empty ``coefs`` and ``n_choices``), and the interval that decided it. A comparison that is one
    of a claim's k goes through ``decide`` with the others instead (Holm may then lower its
    contradiction level)."""
    n = max((int(np.isfinite(np.asarray(d, dtype=float)).sum()) for d in diffs_of.values()), default=0)
    if not diffs_of:
        return Judgement(NOT_ENOUGH, None, None, 0)
    ev = comparison_evidence(diffs_of, coefs, n_choices, tol, side, margin, discrete)
    word = decide([ev], "all", alpha)[0]
    a = alpha / 2
    return Judgement(word, ev, decision_bounds(diffs_of, coefs, n_choices, side, a, a, word, a, discrete), n)


def judge_logs(logs, coefs, tol: float = 0.0, side: str = "below", margin: float = 0.0, alpha: float = ALPHA,
               discrete: bool = False) -> Judgement:
    """``judge`` from the compared cells' per-seed log metrics (``paired_diffs``): ``logs[i]`` the
    candidates of position ``i`` (one mapping seed -> log metric each), ``coefs`` the linear
    combination (e.g. (-1, 1): log(b / a))."""
    return judge(paired_diffs(logs, coefs), tuple(coefs), tuple(len(p) for p in logs), tol, side, margin, alpha,
                 discrete)


def deciding_interval(diffs_of: dict[tuple, np.ndarray], coefs=(), n_choices=(), side: str = "below",
                      alpha: float = ALPHA, verdict: str = "") -> Bounds | None:
    """The interval at the level that decides a comparison judged on its own at two-sided
    ``alpha`` (both ends at one-sided ``alpha / 2``, the every-choice factor included): the
    interval ``judge`` reports, for a caller that wants the interval without the test."""
    a = alpha / 2
    return decision_bounds(diffs_of, coefs, n_choices, side, a, a, verdict, a)
