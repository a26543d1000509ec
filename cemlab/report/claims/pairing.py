"""How one comparison of a claim is made: the cells it pairs over seeds (``pick_cell``: every usable
candidate of a position), the per-seed log differences, the evidence of every choice and the interval
shown (``compare``), and the ``Check`` that carries them; the claim's data (``ClaimData``). The
method: ``docs/verdicts.md``; how a claim's comparisons make its verdict: ``cemlab.report.claims.verdicts``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.paper import SESOI
from cemlab.report.stats.significance import LEVEL, NOT_ENOUGH, Interval, t_interval
from cemlab.report.stats.decision import ALPHA, Evidence, comparison_evidence, decide
from cemlab.report.stats.bounds import (Bounds, beyond_of, decided_how, deciding_choice, decision_bounds,
                                        paired_diffs_by_seed, test_points)
from cemlab.report.stats.confirmation import UnionChoice
from cemlab.report.inputs.table import selection_key
from cemlab.report.claims.shown_effect import (  # noqa: F401 (chosen_diffs, shown_diffs: re-exported)
    chosen_diffs, confirmation_of, evidence_and_interval, shown_diffs, union_evidence)
from cemlab.report.stats.bracketing import position_edges, untuned_sides
from cemlab.report.stats.divergence import UNUSABLE, outcome_note, outcomes, usable_cells
from cemlab.report.stats.percent import percent


def pct(x: float) -> str:
    """A log-scale effect shown as a relative change, exp(x) - 1, in percent."""
    return percent(x, log=True)


def num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "n/a"


def log2_ratio(x: float) -> str:
    return f"{x:+.2f} (log2 of the lr ratio)" if math.isfinite(x) else "n/a"


def shown(x: float, fmt: Callable = pct) -> float:
    """The value a CSV file gives for a log-scale effect: the relative change exp(x) - 1 (the
    learning-rate claim's log2 ratio stays as it is)."""
    return math.expm1(x) if fmt is pct and math.isfinite(x) else x


@dataclass
class Check:
    """One comparison: where (``label``), the tolerance and the side of it the claim states
    (``below``: effect < tol; ``above``: effect > tol; ``within``: |effect| < tol; ``tol`` and
    ``margin`` on the effect's own scale), its ``evidence`` (one-sided p-values, every choice
    tested; None: planned but without runs), its verdict (set by the claim's decision,
    ``decision.decide``), the interval that decided it (``bounds``, at the levels its tests were held
    to; ``settle``), the descriptive 95% interval (``iv``, log scale: the effect shown, its n and
    sd), its numbers, the ``condition`` it belongs to and its regime."""

    label: str
    text: str
    iv: Interval
    tol: float = 0.0
    side: str = "below"
    condition: str = ""
    regime: dict = field(default_factory=dict)
    verdict: str = ""
    fmt: Callable[[float], str] = pct
    margin: float = math.log1p(SESOI)
    cells: dict = field(default_factory=dict)
    #: The table's ``cell`` ids of every cell this comparison read (its candidates included).
    cell_ids: tuple = ()
    evidence: Evidence | None = None
    #: How the cells shown were chosen where a position had several candidates.
    choice: str = ""
    #: Candidates per position (1 everywhere: nothing chosen).
    n_choices: tuple = ()
    #: Candidates with a diverged seed (counted at the metric's chance value) or a failed one (no
    #: value: that seed does not pair), with their counts.
    diverged: str = ""
    #: The one-sided levels the comparison's supported / contradicted / negligible test was held to.
    alpha_claim: float = ALPHA / 2
    alpha_against: float = ALPHA / 2
    alpha_negligible: float = ALPHA / 2
    #: The per-seed differences of every choice as tested (choice -> differences), the coefficients
    #: they were tested with (``every_choice_p``) and whether the test was an exact sign test.
    diffs_of: dict = field(default_factory=dict, repr=False)
    test_coefs: tuple = ()
    discrete: bool = False
    #: The interval that decided (``bounds.Bounds``; None: a sign test, or no runs).
    bounds: Bounds | None = None
    #: What decided, in words, where the interval does not say it all (sign test, TOST, Holm step).
    how: str = ""
    #: The per-seed differences behind the effect shown, ``((seed, difference), ...)`` (each
    #: position's choice on the other seeds' validation): what the ladder's trend reads.
    seed_diffs: tuple = ()
    #: Per position, '' where its cell's learning-rate optimum is bracketed, else what a page says
    #: of the cell at an edge (``bracketing.edge_text``); empty where nothing was tuned.
    edges: tuple = ()
    #: The sides no test could decide because a cell that could erase them is not bracketed
    #: (``untuned_sides``): 'supported', 'contradicted', 'negligible'.
    edge_blocks: tuple = ()
    #: A tuned comparison judged on fresh seeds (``confirmation.UnionChoice``: each position's
    #: chosen rate and the union it is tested over); None: every choice tested on every seed.
    confirmation: UnionChoice | None = None

    def __post_init__(self):
        if not self.verdict:
            self.verdict = decide([self.evidence])[0] if self.evidence is not None else NOT_ENOUGH
        self.settle(self.alpha_claim, self.alpha_against, self.alpha_negligible)

    def settle(self, alpha_claim: float, alpha_against: float, alpha_negligible: float = ALPHA / 2,
               holm: str = "") -> "Check":
        """Record the one-sided levels its tests were held to and the interval that decided at them
        (``bounds.decision_bounds``); ``holm``: the side ('supported' or 'contradicted') held to a Holm step."""
        self.alpha_claim, self.alpha_against, self.alpha_negligible = alpha_claim, alpha_against, alpha_negligible
        self.bounds = (decision_bounds(self.diffs_of, self.test_coefs, self.n_choices or (), self.side, alpha_claim,
                                       alpha_against, self.verdict, alpha_negligible, self.discrete,
                                       self.confirmation) if self.diffs_of else None)
        if self.bounds is not None and self.edge_blocks:
            self.bounds = voided_ends(self.bounds, self.side, self.edge_blocks)
        self.how = decided_how(self.evidence, self.side, alpha_claim, alpha_against, self.iv.n, self.discrete, holm)
        return self

    @property
    def power_sd(self) -> float:
        """The sd of the paired log differences a power calculation should use: those of the choice
        that decides the claim's side (``bounds.deciding_choice``), else of the effect shown."""
        if self.diffs_of and not self.discrete and self.side != "within":
            combo = deciding_choice(self.diffs_of, self.test_coefs, self.n_choices or (), self.alpha_claim,
                                    upper=self.side == "below", conf=self.confirmation)
            d = np.asarray(self.diffs_of.get(combo, []), dtype=float) if combo is not None else np.array([])
            d = d[np.isfinite(d)]
            if len(d) >= 2:
                return float(d.std(ddof=1))
        return self.iv.sd

    @property
    def level(self) -> float:
        """The coverage of the interval that decided (1 - its two ends' one-sided levels); NaN without one."""
        return self.bounds.level if self.bounds is not None else math.nan

    @property
    def test(self) -> str:
        """What kind of test judged it: a difference (against 0, with a smallest effect of interest),
        a threshold (non-inferiority against ``tol``) or an equivalence (TOST within +-``tol``)."""
        if self.side == "within":
            return "equivalence (TOST)"
        return "difference" if self.tol == 0 else "threshold"

    def interval_text(self) -> str:
        """The interval that decided, with its level, e.g. ``97.5% interval that decided [-5.1%, -0.2%]``;
        for a sign test what decided instead; the note where there is no interval."""
        b = self.bounds
        if b is not None and (b.finite or self.edge_blocks):
            end = (lambda x: self.fmt(x) if math.isfinite(x) else "open")   # a side voided by the edge rule
            return f"{b.label} interval that decided [{end(b.low)}, {end(b.high)}]"
        if self.discrete:
            return self.how
        return self.iv.note or "no interval"

    @property
    def bracketed(self) -> str:
        """'yes' where every tuned cell of the comparison has a bracketed optimum; '' where nothing
        was tuned; else the cells at an edge."""
        if not self.edges:
            return ""
        return "; ".join(e for e in self.edges if e) or "yes"

    def edge_note(self) -> str:
        """Why a side could not be decided: the cells at an edge that could erase it, e.g. ``not
        decisive (supported, negligible): llama 86m: best at its lowest rate 0.002 of 0.002, 0.004``."""
        if not self.edge_blocks:
            return ""
        return f"not decisive ({', '.join(self.edge_blocks)}): {self.bracketed}"

    def describe(self) -> str:
        iv = self.iv
        second = f"; {LEVEL:.0%} interval [{self.fmt(iv.low)}, {self.fmt(iv.high)}]" if iv.finite else ""
        edge = f"; {self.edge_note()}" if self.edge_blocks else ""
        return (f"{self.text}: effect {self.fmt(iv.effect)}, {self.interval_text()}{second}, n={iv.n}{edge} "
                f"[{self.verdict}]")


def voided_ends(b: Bounds, side: str, blocks: tuple) -> Bounds:
    """The interval that decided with each end of a side the edge rule voided (``untuned_sides``) open
    (-inf or +inf): that side's test was not allowed to decide, so its end bounds nothing, and no
    interval beside a voided verdict excludes the tolerance on that side. For ``below`` the upper end
    belongs to 'supported' and the lower to 'contradicted'; ``above`` the mirror; ``within`` and a
    voided 'negligible' open both."""
    low, high = b.low, b.high
    both = side == "within" or "negligible" in blocks and b.how.startswith("negligible")
    claim_high = side != "above"
    if both or "supported" in blocks:
        low, high = (low, math.inf) if claim_high else (-math.inf, high)
    if both or "contradicted" in blocks:
        low, high = (-math.inf, high) if claim_high else (low, math.inf)
    return replace(b, low=low, high=high, how=b.how + " (a side voided by the edge rule left open)")


def check_of_diffs(label: str, text: str, diffs, tol: float = 0.0, side: str = "below", condition: str = "",
                   regime: dict | None = None, fmt: Callable = pct, margin: float = math.log1p(SESOI),
                   discrete: bool = False, cells: dict | None = None, cell_ids: tuple = ()) -> Check:
    """A comparison of one choice from its per-seed differences (already on the effect's scale):
    the t-interval shown and the evidence (``discrete``: an exact sign test, for an effect that takes
    few values, such as an optimum on a grid)."""
    d = np.asarray(diffs, dtype=float)
    iv = t_interval(d)
    ev = comparison_evidence({(): d}, (), (), tol, side, margin, discrete) if iv.n else None
    return Check(label, text, iv, tol, side, condition, regime or {}, fmt=fmt, margin=margin, evidence=ev,
                 cells=cells or {}, cell_ids=cell_ids, choice="sign test (a discrete effect)" if discrete else "",
                 diffs_of={(): d} if iv.n else {}, discrete=discrete)


class Unrun(dict):
    """A planned cell (in the grid) without a usable run: a comparison that needs it is
    ``not enough runs``. Reads as NaN for any value (texts show ``n/a``)."""

    def __init__(self, label: str, note: str, cell_ids: tuple = ()):
        super().__init__()
        self.label, self.note, self.cell_ids = label, note, cell_ids

    def __missing__(self, key):
        return math.nan


class ClaimData:
    """Cells and per-seed values of the sweeps a claim reads, at one scale. ``own``: the sweeps its
    entry names, in its order, which its rule reads by position (``sweep(i)``); with ``sweeps``,
    any other sweep reads as one without runs. ``lr_mode``: ``tuned`` (every learning rate of a cell
    is a candidate) or ``shared`` (every cell at the one rate ``lr``). ``margin``: the claim's
    smallest effect of interest, a relative change kept as log(1 + margin), the scale of the effects
    (``relative_margin=False``: already on the effect's scale, as the learning-rate claim's log2 ratio).
    ``edge_seeds``: the seeds each cell's bracketing is read on (``bracketing.position_edges``).
    ``selection_seeds``: a sweep that chooses each cell's rate on these seeds and confirms on the
    others (``confirmation``): a comparison with candidates is then judged by the union rule on the
    other seeds only (``compare``)."""

    def __init__(self, cells_of: Callable[[str], pd.DataFrame],
                 trials_of: Callable[[str], pd.DataFrame] | None = None,
                 history: Callable[[str, str], list] | None = None, sweeps: list[str] | None = None,
                 margin: float = SESOI, lr_mode: str = "tuned", own: tuple[str, ...] = (),
                 alpha: float = ALPHA, lr: float = math.nan, relative_margin: bool = True,
                 edge_seeds: list[int] | None = None, selection_seeds: list[int] | None = None):
        self._cells_of = cells_of
        self._trials_of = trials_of
        self.history = history
        self.sweeps = sweeps
        self.own = tuple(own)
        self.margin = math.log1p(margin) if relative_margin else margin  # on the scale of the effects
        self.alpha = alpha
        self.lr_mode = lr_mode
        self.lr = lr
        self._by_cell: dict[str, dict[str, pd.DataFrame]] = {}
        self._logs: dict[tuple[str, str], tuple[pd.Series, pd.Series]] = {}
        self.per_rate = False  # set when the rule reads cells by learning rate (``at_best_lr``)
        #: The seeds each cell's bracketing is read on (a seeded sweep: its first look's, the ones its
        #: bracketing look read); None: every seed read (``bracketing.position_edges``).
        self.edge_seeds = edge_seeds
        self.selection_seeds = list(selection_seeds) if selection_seeds else None

    def sweep(self, i: int = 0) -> str:
        """The ``i``-th sweep of the claim's entry (its own sweep first); '' if it names fewer."""
        return self.own[i] if i < len(self.own) else ""

    def _listed(self, sweep: str) -> bool:
        return self.sweeps is None or sweep in self.sweeps

    def cells(self, sweep: str, **where) -> pd.DataFrame:
        df = self._cells_of(sweep) if self._listed(sweep) else self._cells_of(sweep).iloc[:0]
        for k, v in where.items():
            if df.empty:
                break
            df = df[df[k].isin(v) if isinstance(v, (list, tuple, set)) else df[k] == v]
        return df

    def rates(self, sweep: str) -> list[float]:
        cells = self.cells(sweep)
        return sorted(set(cells["lr"].astype(float))) if not cells.empty else []

    def at_best_lr(self, sweep: str, by: list[str] | None = None, **where) -> pd.DataFrame:
        """The cells a comparison may use: in ``tuned`` mode every learning rate of each cell (each a
        candidate, ``pick_cell``); in ``shared`` mode only those at the one rate ``self.lr``."""
        self.per_rate = True  # the rule compares cells at their rates: a shared-rate verdict means something
        df = self.cells(sweep, **where)
        if df.empty or df["lr"].nunique() <= 1 or self.lr_mode != "shared":
            return df
        return df[np.isclose(df["lr"].to_numpy(dtype=float), self.lr)]

    def trials(self, sweep: str) -> pd.DataFrame:
        if self._trials_of is None:
            return pd.DataFrame(columns=["cell", "seed", "value", "run_id", "lr"])
        return self._trials_of(sweep) if self._listed(sweep) else self._trials_of(sweep).iloc[:0]

    def seed_trials(self, row) -> pd.DataFrame:
        """The trials of a cell that have an outcome (one per seed), indexed by seed: its finished runs
        with their values, and its worst outcomes (a divergence, a non-finite or exploded metric) at
        ``WORST`` (``outcomes``)."""
        sweep = str(row["sweep"])
        if sweep not in self._by_cell:  # once per sweep, every cell: the rows with a value, one per seed
            t = outcomes(self.trials(sweep))
            if len(t):
                t = t[~np.isnan(t["value"].to_numpy(dtype=float))].drop_duplicates(["cell", "seed"]).set_index("seed")
            self._by_cell[sweep] = {c: g for c, g in t.groupby("cell", sort=False)} if len(t) else {}
        g = self._by_cell[sweep].get(row["cell"])
        if g is None:
            return pd.DataFrame(columns=["seed", "value", "run_id", "val"]).set_index("seed")
        return g

    def seed_values(self, row) -> pd.Series:
        return self.seed_trials(row)["value"].astype(float)

    def seed_logs(self, row) -> tuple[pd.Series, pd.Series]:
        """log test metric and log validation metric of a cell per seed (``WORST`` for a worst outcome);
        once per cell (a report asks for a cell's logs in every comparison and choice it is in), so
        callers must not change the series."""
        key = (str(row["sweep"]), row["cell"])
        if key not in self._logs:
            t = self.seed_trials(row)
            val = t["val"].astype(float) if "val" in t else pd.Series(math.nan, index=t.index)
            with np.errstate(divide="ignore", invalid="ignore"):
                self._logs[key] = (np.log(t["value"].astype(float)), np.log(val))
        return self._logs[key]

    def aligned(self, rows: list) -> tuple[list[int], list[np.ndarray]]:
        """Seeds at which every cell of ``rows`` has an outcome, and each cell's values at them (inf: a
        worst outcome)."""
        series = [self.seed_values(r) for r in rows]
        seeds = sorted(set.intersection(*(set(s.index) for s in series))) if series else []
        return seeds, [s.reindex(seeds).to_numpy(dtype=float) for s in series]


def regime_of(rows: list) -> dict:
    """Tokens per parameter and optimizer steps of the reference cell (the first), and the corpus
    with the number of passes over its training split (token budget / training tokens)."""
    r = rows[0]
    budget, params = float(r.get("token_budget", math.nan)), float(r.get("params_total", math.nan))
    corpus, have = str(r.get("corpus", "") or ""), float(r.get("train_tokens", math.nan))
    if corpus and math.isfinite(budget) and math.isfinite(have) and have > 0:
        corpus += f" ({budget / have:.2g} epochs)"
    return dict(tokens_per_param=budget / params if params and math.isfinite(params) else math.nan,
                steps=float(r.get("total_steps", math.nan)), corpus=corpus)


def _candidates(row) -> list:
    """The cells a position of a comparison may be: the candidates ``pick_cell`` found, else the row."""
    if not isinstance(row, pd.Series):
        return [row]
    memo = row.attrs.get("candidate_rows")
    if memo is None:
        cands = row.attrs.get("candidates")
        memo = [r for _, r in cands.iterrows()] if cands is not None and len(cands) else [row]
        row.attrs["candidate_rows"] = memo
    return memo


def coefficients(f: Callable, n: int) -> tuple[float, ...]:
    """The coefficients of a comparison's linear function ``f`` of its cells' log metrics."""
    zero = float(f(*([0.0] * n)))
    return tuple(float(f(*[1.0 if j == i else 0.0 for j in range(n)])) - zero for i in range(n))


def compare(data: ClaimData, missing: list[str], label: str, rows: list, f: Callable, text: str, tol: float = 0.0,
            side: str = "below", condition: str = "", fmt: Callable = pct, log_tol: bool = True) -> Check:
    """A paired comparison of the cells ``rows``: per seed ``f(log metric of each cell)``, a linear
    function (e.g. ``rel``: log(b / a)). ``tol`` is a relative change (compared as log(1 + tol)) unless
    ``log_tol`` is False. A row may stand for several candidates (``pick_cell``): every choice is
    tested, and the effect shown takes each choice on the other seeds' validation metric. A row that
    is ``Unrun`` makes the comparison ``not enough runs``."""
    t = math.log1p(tol) if log_tol and fmt is pct else tol
    where = cells_compared([r for r in rows if not isinstance(r, Unrun)] or rows)
    unrun = [r for r in rows if isinstance(r, Unrun)]
    if unrun:
        notes = "; ".join(f"{u.label}: {u.note}" for u in unrun)
        missing.append(f"{label}: {notes}")
        return Check(label, f"{text} ({notes})", Interval(math.nan, math.nan, math.nan, 0), t, side, condition,
                     fmt=fmt, margin=data.margin, cells=where, verdict=NOT_ENOUGH,
                     cell_ids=tuple(i for u in unrun for i in u.cell_ids))
    cands = [_candidates(r) for r in rows]
    coefs = coefficients(f, len(rows))
    logs = [[data.seed_logs(c) for c in cs] for cs in cands]
    beyond, at = beyond_of(t, side, data.margin), test_points(t, side)
    by_seed = paired_diffs_by_seed([[t for t, _ in pos] for pos in logs], coefs, beyond, at)
    diffs_of = _arrays(by_seed)
    n_choices = tuple(len(cs) for cs in cands)
    ids = tuple(str(c.get("cell", "")) for cs in cands for c in cs)
    if not diffs_of:
        missing.append(f"{label}: no seed at which every compared cell has a value")
        return Check(label, text, Interval(math.nan, math.nan, math.nan, 0), t, side, condition, fmt=fmt,
                     margin=data.margin, cells=where, verdict=NOT_ENOUGH, cell_ids=ids)
    conf = None
    if data.selection_seeds and max(n_choices) > 1:   # chosen on the selection seeds, judged on the others
        conf = confirmation_of(cands, logs, data.selection_seeds)
        # the fresh seeds only, a divergence's score (from the finished fresh seeds of its choice) included
        fresh = [[t[~t.index.isin(conf.selection)] for t, _ in pos] for pos in logs]
        by_seed = paired_diffs_by_seed(fresh, coefs, beyond, at)
        diffs_of = {c: d for c, d in _arrays(by_seed).items() if len(d)}
        chosen = sorted(by_seed.get(conf.chosen, {}).items())
        evidence, iv = union_evidence(diffs_of, chosen, coefs, t, side, data.margin, conf)
        blocks: tuple = ()
        choice = conf.describe(n_choices)
    else:
        chosen = chosen_diffs(logs, by_seed)
        evidence, iv = evidence_and_interval(diffs_of, chosen, coefs, n_choices, t, side, data.margin)
        choice = ("every choice tested (" + " x ".join(map(str, n_choices)) +
                  "); effect shown: each choice on the median validation metric of the cell's other seeds"
                  ) if max(n_choices) > 1 else ""
    edges = position_edges(cands, logs, data.edge_seeds or data.selection_seeds) if max(n_choices) > 1 else ()
    if conf is None:
        evidence, blocks = untuned_sides(evidence, coefs, side, edges)
    return Check(label, text, iv, t, side, condition, regime_of(rows), fmt=fmt, margin=data.margin, cells=where,
                 cell_ids=ids, evidence=evidence, choice=choice, n_choices=n_choices, confirmation=conf,
                 seed_diffs=shown_diffs(chosen), edges=tuple(edges), edge_blocks=blocks,
                 diverged="; ".join(str(getattr(r, "attrs", {}).get("diverged", "")) for r in rows
                                    if isinstance(r, pd.Series) and r.attrs.get("diverged")),
                 diffs_of=diffs_of, test_coefs=coefs)


def _arrays(by_seed: dict[tuple, dict]) -> dict[tuple, np.ndarray]:
    return {combo: np.array([d[s] for s in sorted(d)], dtype=float) for combo, d in by_seed.items()}


#: Columns of comparisons.csv that say where a comparison was made (from its cells).
WHERE = ("size", "family", "precond", "T", "eta", "lr")


def cells_compared(rows: list) -> dict:
    """Where a comparison was made: per column of ``WHERE``, the value of its cells (``a vs b`` when
    they differ, the favoured variant's last); a position with several candidates names them all."""
    out = {}
    for col in WHERE:
        vals = ["/".join(dict.fromkeys(str(c.get(col, "")) for c in _candidates(r))) for r in rows]
        uniq = list(dict.fromkeys(vals))
        out[col] = uniq[0] if len(uniq) == 1 else " vs ".join(uniq)
    out["compared"] = " vs ".join(str(r.get("variant", "")) for r in rows)
    return out


def rel(a, b):
    """The log ratio of b over a, per seed (arguments: log metrics): log(b / a)."""
    return b - a


def pick_cell(df: pd.DataFrame, missing: list[str], label: str, **where):
    """The cells of ``df`` matching ``where`` (a value or a list of values per column) as one
    position of a comparison: the row shown (the lowest validation mean over seeds) carrying every
    match as a candidate (``row.attrs['candidates']``: one per learning rate, or per cell a claim
    may pick from). Every match is a candidate, whatever became of some of its seeds: a diverged seed
    is the worst outcome of its cell (``outcomes``), a failed one does not pair; both are named
    (``row.attrs['diverged']``). So a divergence is an outcome of the cell it happened in, and no
    comparison loses a candidate of one cell but not of the other. None when nothing matches (not
    in the grid); ``Unrun`` when a match has no run with a value at any seed (nothing finished or
    diverged: the planned comparison cannot be made as planned)."""
    d = df
    for k, v in where.items():
        if d.empty:
            break
        d = d[d[k].isin(v) if isinstance(v, (list, tuple, set)) else d[k] == v]
    if d.empty:
        missing.append(f"{label}: not in the grid")
        return None
    marked = np.zeros(len(d), dtype=bool)
    for col in UNUSABLE:
        if col in d:
            marked |= d[col].fillna(0).to_numpy(dtype=float) > 0
    usable = usable_cells(d)
    ok = d[usable]
    diverged = "; ".join(outcome_note(r) for _, r in d[marked].iterrows())
    if not usable.all():
        empty = d[~usable]
        what = "; ".join(f"{r.get('variant', '')} lr={float(r['lr']):.3g}: {r.get('note', '') or 'no finished run'}"
                         for _, r in empty.iterrows()) if len(d) > 1 else \
            (diverged or "; ".join(n for n in d.get("note", pd.Series(dtype=str)) if n) or "no finished run")
        note = what if len(d) == 1 else f"no run with a value at a planned candidate ({what})"
        missing.append(f"{label}: {note}")
        return Unrun(label, note, tuple(str(c) for c in d["cell"]))
    key = ok[selection_key(ok)].to_numpy(dtype=float)
    row = ok.iloc[int(np.nanargmin(key))] if np.isfinite(key).any() else ok.iloc[0]
    row = row.copy()
    row.attrs["candidates"] = ok
    row.attrs["diverged"] = diverged
    return row


def sizes_of(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df.sort_values("order")["size"])) if not df.empty else []


def etas_of(df: pd.DataFrame) -> list[str]:
    """The step-size settings present (column ``eta``), in grid order."""
    if df.empty or "eta" not in df:
        return [""]
    return list(dict.fromkeys(str(e) for e in df.sort_values("order")["eta"])) or [""]


def eta_condition(eta: str) -> str:
    return f"eta={eta}" if eta else ""
