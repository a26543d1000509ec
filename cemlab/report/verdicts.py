"""How a claim's rule turns runs into a verdict, and the claims.csv table of verdicts.

Every comparison is made per seed (``cemlab.report.stats``): the effect is the mean over seeds of a
paired difference, usually the relative change of the main metric (test perplexity; test RMSE for
the GP study) ``value_B(seed) / value_A(seed) - 1``, with a 95% t-interval over the seeds. A
verdict is one of

- ``supported``: every comparison's interval lies wholly on the claim's side of its tolerance;
- ``contradicted``: at least one comparison's interval lies wholly on the other side;
- ``inconclusive``: otherwise, in particular an interval that straddles the tolerance, or a
  comparison with one seed only (its numbers are shown, it never decides);
- ``not enough runs``: no comparison could be made (cells missing, diverged or failed).

Where a sweep has several learning rates, each model enters at its best learning rate of the grid
(by the seed mean), except for the learning-rate claims, which use the Akima-interpolated optimum of
each seed's curve (``cemlab.report.akima``). Every verdict lists the numbers behind it, the cells
that were missing, and its regime: the scale, the corpus, tokens per parameter, optimizer steps and
seeds behind it (next to the paper's regime, ``cemlab.paper.PAPER_REGIME``). A verdict at ``tiny``
or ``smoke`` scale says what those runs show, not what the paper's 100M-parameter runs show.

The recursion claims are judged separately for each step-size setting ``eta`` of the sweep (one
verdict row per value, column ``condition``), because the T=1 -> T=2 comparison depends on it: at
eta = 1 two steps move the state about twice as far as one, at eta = 1/T the same distance.
``claims.csv`` gives, per row, the comparison that decides the verdict (the least favourable one
for a claim made at every size); ``numbers`` lists them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.paper import PAPER_REGIME, SESOI
from cemlab.report.stats import LEVEL, METHOD, Interval, bonferroni_level, combine, judge, t_interval
from cemlab.report.table import best_lr, selection_key


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if math.isfinite(x) else "n/a"


def num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "n/a"


def log2_ratio(x: float) -> str:
    return f"{x:+.2f} (log2 of the lr ratio)" if math.isfinite(x) else "n/a"


@dataclass
class Check:
    """One comparison: where (``label``), its paired interval over seeds, the tolerance and the side
    of it the claim states (``below``: effect < tol; ``above``: effect > tol; ``within``: |effect| <
    tol), its verdict, its numbers, the step-size ``condition`` it belongs to and its regime."""

    label: str
    text: str
    iv: Interval
    tol: float = 0.0
    side: str = "below"
    condition: str = ""
    regime: dict = field(default_factory=dict)
    verdict: str = ""
    fmt: Callable[[float], str] = pct
    margin: float = SESOI
    level: float = LEVEL
    cells: dict = field(default_factory=dict)
    #: The table's ``cell`` ids of every cell this comparison read (its candidates included).
    cell_ids: tuple = ()

    def __post_init__(self):
        if not self.verdict:
            self.verdict = judge(self.iv, self.tol, self.side, self.margin)

    @property
    def test(self) -> str:
        """What kind of test judged it: a difference (against 0, with a smallest effect of interest),
        a threshold (non-inferiority against ``tol``) or an equivalence (TOST within +-``tol``)."""
        if self.side == "within":
            return "equivalence (TOST)"
        return "difference" if self.tol == 0 else "threshold"

    def describe(self) -> str:
        iv = self.iv
        ci = f"{self.level:.1%} CI [{self.fmt(iv.low)}, {self.fmt(iv.high)}]" if iv.finite else "no interval"
        return f"{self.text}: effect {self.fmt(iv.effect)}, {ci}, n={iv.n} [{self.verdict}]"


@dataclass
class Verdict:
    """A claim with its verdict (one per step-size ``condition`` for the recursion claims)."""

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
    shared_lr: float = math.nan
    checks: list = field(default_factory=list)
    size_flips: str = ""

    @property
    def verdict_changes(self) -> bool:
        """The verdict at each cell's own (validation-chosen) learning rate differs from the one at a
        single shared learning rate."""
        return bool(self.verdict_shared_lr) and self.verdict_shared_lr != self.verdict


class ClaimData:
    """Cells and per-seed values of the sweeps a claim reads, at one scale. ``own``: the sweeps its
    entry names, in its order, which its rule reads by position (``sweep(i)``); with ``sweeps``,
    any other sweep reads as one without runs."""

    def __init__(self, cells_of: Callable[[str], pd.DataFrame],
                 trials_of: Callable[[str], pd.DataFrame] | None = None,
                 history: Callable[[str, str], list] | None = None, sweeps: list[str] | None = None,
                 margin: float = SESOI, k: int = 1, lr_mode: str = "tuned", own: tuple[str, ...] = (),
                 alpha: float = 1 - LEVEL):
        self._cells_of = cells_of
        self._trials_of = trials_of
        self.history = history
        self.sweeps = sweeps
        self.own = tuple(own)
        self.margin = margin
        self.k = k  # comparisons in the claim's family (Bonferroni)
        self.alpha = alpha  # the family's two-sided error rate
        self.lr_mode = lr_mode  # "tuned": each cell at its own best lr; "shared": one lr for all
        self.shared_lr: dict[str, float] = {}
        self._by_cell: dict[str, dict[str, pd.DataFrame]] = {}

    def level(self, equivalence: bool = False) -> float:
        return bonferroni_level(self.k, 1 - self.alpha, equivalence)

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

    def at_best_lr(self, sweep: str, by: list[str], **where) -> pd.DataFrame:
        """Cells at their own validation-best learning rate (``lr_mode='tuned'``), or all at the one
        learning rate whose validation mean, averaged over the cells, is lowest (``'shared'``)."""
        df = self.cells(sweep, **where)
        if df.empty or df["lr"].nunique() <= 1:
            return df
        if self.lr_mode == "shared":
            lr = shared_lr(self.cells(sweep))
            self.shared_lr[sweep] = lr
            return df[np.isclose(df["lr"].to_numpy(dtype=float), lr)]
        return best_lr(df, by)

    def trials(self, sweep: str) -> pd.DataFrame:
        if self._trials_of is None:
            return pd.DataFrame(columns=["cell", "seed", "value", "run_id", "lr"])
        return self._trials_of(sweep) if self._listed(sweep) else self._trials_of(sweep).iloc[:0]

    def seed_trials(self, row) -> pd.DataFrame:
        """The finished trials of a cell (one per seed), indexed by seed."""
        sweep = str(row["sweep"])
        if sweep not in self._by_cell:
            t = self.trials(sweep)
            self._by_cell[sweep] = {c: g for c, g in t.groupby("cell", sort=False)} if len(t) else {}
        g = self._by_cell[sweep].get(row["cell"])
        if g is None:
            return pd.DataFrame(columns=["seed", "value", "run_id"]).set_index("seed")
        g = g[np.isfinite(g["value"].to_numpy(dtype=float))]
        return g.drop_duplicates("seed").set_index("seed")

    def seed_values(self, row) -> pd.Series:
        return self.seed_trials(row)["value"].astype(float)

    def aligned(self, rows: list) -> tuple[list[int], list[np.ndarray]]:
        """Seeds at which every cell of ``rows`` finished, and each cell's values at them."""
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


def compare(data: ClaimData, missing: list[str], label: str, rows: list, f: Callable, text: str, tol: float = 0.0,
            side: str = "below", condition: str = "", fmt: Callable = pct) -> Check | None:
    """A paired comparison of the cells ``rows``: ``f(values of each cell at a seed)`` per seed."""
    seeds, vals = data.aligned(rows)
    if not seeds:
        missing.append(f"{label}: no seed at which every compared cell finished")
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        diffs = np.asarray(f(*vals), dtype=float)
    level = data.level(side == "within")
    return Check(label, text, t_interval(diffs, level), tol, side, condition, regime_of(rows), fmt=fmt,
                 margin=data.margin, level=level, cells=cells_compared(rows),
                 cell_ids=tuple(str(r.get("cell", "")) for r in rows))


#: Columns of comparisons.csv that say where a comparison was made (from its cells).
WHERE = ("size", "family", "precond", "T", "eta", "lr")


def cells_compared(rows: list) -> dict:
    """Where a comparison was made: per column of ``WHERE``, the value of its cells (``a vs b`` when
    they differ, the favoured variant's last)."""
    out = {}
    for col in WHERE:
        vals = [str(r.get(col, "")) for r in rows]
        uniq = list(dict.fromkeys(vals))
        out[col] = uniq[0] if len(uniq) == 1 else " vs ".join(uniq)
    out["compared"] = " vs ".join(str(r.get("variant", "")) for r in rows)
    return out


def rel(a, b):
    """Relative change of b over a, per seed."""
    return b / a - 1


def pick_cell(df: pd.DataFrame, missing: list[str], label: str, **where):
    """The cell of ``df`` matching ``where`` (the lowest seed mean if several match, e.g. one per
    learning rate); None, and a note in ``missing``, when none has a finished run."""
    d = df
    for k, v in where.items():
        if d.empty:
            break
        d = d[d[k] == v]
    if d.empty:
        missing.append(f"{label}: not in the grid")
        return None
    vals = d["mean"].to_numpy(dtype=float)
    if not np.isfinite(vals).any():
        note = "; ".join(n for n in d["note"] if n) or "no finished run"
        missing.append(f"{label}: {note}")
        return None
    d = d[np.isfinite(vals)]
    key = d[selection_key(d)].to_numpy(dtype=float)
    return d.iloc[int(np.nanargmin(key))] if np.isfinite(key).any() else d.iloc[0]


def shared_lr(cells: pd.DataFrame) -> float:
    """The one learning rate of the grid for every cell: the lowest validation mean (test mean for
    runs without one, ``selection_key``) averaged over the cells that finished at every rate."""
    done = cells[np.isfinite(cells["mean"].to_numpy(dtype=float))]
    if done.empty:
        return float(cells["lr"].iloc[0])
    key = selection_key(done)
    wide = done.pivot_table(index=[c for c in ("family", "variant", "size") if c in done], columns="lr",
                            values=key, aggfunc="mean")
    full = wide.dropna()
    means = (full if len(full) else wide).mean(axis=0)
    return float(means.idxmin())


def sizes_of(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df.sort_values("order")["size"])) if not df.empty else []


def etas_of(df: pd.DataFrame) -> list[str]:
    """The step-size settings present (column ``eta``), in grid order."""
    if df.empty or "eta" not in df:
        return [""]
    return list(dict.fromkeys(str(e) for e in df.sort_values("order")["eta"])) or [""]


def eta_condition(eta: str) -> str:
    return f"eta={eta}" if eta else ""


def _primary(checks: list[Check], primary: str) -> Check:
    """The claim's primary comparison: the first whose label contains ``primary`` (the entry's
    headline contrast), else the first."""
    return next((c for c in checks if primary and primary in c.label), checks[0])


def size_flips(checks: list[Check]) -> str:
    """Comparisons made at several sizes whose sign flips: one size's interval wholly below 0 and
    another's wholly above; each named with its effect per size, in size order (the trend against
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
        below = any(c.iv.finite and c.iv.high < 0 for c in g)
        above = any(c.iv.finite and c.iv.low > 0 for c in g)
        if below and above:
            out.append(f"{key}: " + ", ".join(f"{c.cells['size']} {c.fmt(c.iv.effect)}" for c in g))
    return "; ".join(out)


def _judged(c, data_of: Callable[..., ClaimData]) -> tuple[list[Check], list[str]]:
    """The claim's comparisons, each at the Bonferroni level of its condition's family: a first
    pass counts them, a second judges at 1 - alpha/k (the rules are cheap, pure pandas)."""
    checks, _ = c.evaluate(data_of(k=1))
    counts: dict[str, int] = {}
    for ch in checks:
        if ch is not None:
            counts[ch.condition] = counts.get(ch.condition, 0) + 1
    k = max(counts.values(), default=1)
    checks, missing = c.evaluate(data_of(k=k))
    return [ch for ch in checks if ch is not None], list(dict.fromkeys(missing))


def evaluate(claims: list, cells_of: Callable[[str], pd.DataFrame], scale: str,
             trials_of: Callable[[str], pd.DataFrame] | None = None,
             history: Callable[[str, str], list] | None = None,
             sweeps: dict[str, list[str]] | None = None, alpha: float = 1 - LEVEL) -> list[Verdict]:
    """Verdicts of ``claims`` (``cemlab.report.claims.Claim``) from the cells (and per-seed trials)
    of their sweeps at ``scale``: one per claim, or one per step-size condition for the claims
    judged per eta. A claim reads the sweeps its entry names (``Claim.sweeps``) and no other;
    ``sweeps`` (claim id -> sweeps) narrows that to the sweeps given for it.

    Each verdict is made twice where a sweep has several learning rates: with every cell at its
    own validation-chosen rate (``verdict``, tuned) and with all at one shared rate
    (``verdict_shared_lr``). ``alpha``: the error rate each claim's decision is held to (the
    sequential seeding of a sweep judges each planned look at a share of it)."""
    out = []
    for c in claims:
        own = tuple(getattr(c, "sweeps", ()))
        mine_sweeps = (list(own) or None) if sweeps is None else sweeps.get(c.id, [])
        by_mode = {}
        for mode in ("tuned", "shared"):
            def data_of(k, mode=mode):
                d = ClaimData(cells_of, trials_of, history, mine_sweeps, c.margin, k, mode, own, alpha)
                by_mode[mode + "_data"] = d
                return d
            by_mode[mode] = _judged(c, data_of)
        checks, missing = by_mode["tuned"]
        shared_checks = by_mode["shared"][0]
        shared_lrs = by_mode["shared_data"].shared_lr
        conditions = list(dict.fromkeys(ch.condition for ch in checks)) or [""]
        for cond in conditions:
            mine = [ch for ch in checks if ch.condition == cond]
            verdict = combine([ch.verdict for ch in mine], c.combine)
            v = Verdict(c.id, c.paper, c.claim, c.rule, mine_sweeps or [], verdict,
                        "; ".join(ch.describe() for ch in mine), scale, missing, cond, paper_regime=c.paper_regime,
                        margin=c.margin, primary=c.primary, n_comparisons=len(mine), checks=mine)
            if shared_lrs:
                v.verdict_shared_lr = combine([ch.verdict for ch in shared_checks if ch.condition == cond], c.combine)
                v.shared_lr = float(next(iter(shared_lrs.values())))
            else:
                v.verdict_shared_lr = verdict
            v.size_flips = size_flips(mine)
            if mine:
                d = _primary(mine, c.primary)
                v.effect, v.ci_low, v.ci_high, v.n_seeds = d.iv.effect, d.iv.low, d.iv.high, d.iv.n
                v.tokens_per_param = d.regime.get("tokens_per_param", math.nan)
                v.steps = d.regime.get("steps", math.nan)
                corpora = dict.fromkeys(ch.regime.get("corpus", "") for ch in mine)
                v.corpus = ", ".join(x for x in corpora if x)
            out.append(v)
    return out


#: claims.csv columns (scripts read these names).
CLAIM_COLUMNS = ["id", "paper", "claim", "condition", "verdict", "effect", "ci_low", "ci_high", "n_seeds", "scale",
                 "corpus", "tokens_per_param", "steps", "paper_regime", "method", "numbers", "missing", "rule",
                 "sweeps", "verdict_shared_lr", "shared_lr", "verdict_changes", "margin", "n_comparisons",
                 "primary", "size_flips"]


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([dict(id=v.id, paper=v.paper, claim=v.claim, condition=v.condition, verdict=v.verdict,
                              effect=v.effect, ci_low=v.ci_low, ci_high=v.ci_high, n_seeds=v.n_seeds, scale=v.scale,
                              corpus=v.corpus, tokens_per_param=v.tokens_per_param, steps=v.steps,
                              paper_regime=v.paper_regime, method=v.method, numbers=v.numbers,
                              missing="; ".join(v.missing), rule=v.rule, sweeps=" ".join(v.sweeps),
                              verdict_shared_lr=v.verdict_shared_lr, shared_lr=v.shared_lr,
                              verdict_changes=v.verdict_changes, margin=v.margin, n_comparisons=v.n_comparisons,
                              primary=_primary(v.checks, v.primary).label if v.checks else "",
                              size_flips=v.size_flips)
                         for v in verdicts], columns=CLAIM_COLUMNS)


def integers(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Count columns as integers in a CSV (``160``, not ``160.0``; empty where unknown)."""
    df = df.copy()
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    return df


#: comparisons.csv columns: one row per comparison behind every claim.
COMPARISON_COLUMNS = ["id", "condition", "comparison", *WHERE, "compared", "test", "side", "threshold", "margin",
                      "effect", "ci_low", "ci_high", "level", "n", "verdict", "primary", "text"]


def comparison_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """Every comparison behind every verdict (tuned), with its Bonferroni-adjusted interval."""
    rows = []
    for v in verdicts:
        prim = _primary(v.checks, v.primary) if v.checks else None
        for ch in v.checks:
            where = {k: ch.cells.get(k, "") for k in (*WHERE, "compared")}
            rows.append(dict(id=v.id, condition=v.condition, comparison=ch.label, **where, test=ch.test,
                             side=ch.side, threshold=ch.tol, margin=ch.margin, effect=ch.iv.effect,
                             ci_low=ch.iv.low, ci_high=ch.iv.high, level=ch.level, n=ch.iv.n, verdict=ch.verdict,
                             primary=ch is prim, text=ch.text))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
