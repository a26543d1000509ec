"""The paper's claims, each with an explicit rule that turns runs into a verdict.

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
seeds behind it (next to the paper's regime, ``PAPER_REGIME``). A verdict at ``tiny`` or ``smoke``
scale says what those runs show, not what the paper's 100M-parameter runs show.

The recursion claims are judged separately for each step-size setting ``eta`` of the sweep (one
verdict row per value, column ``condition``), because the T=1 -> T=2 comparison depends on it: at
eta = 1 two steps move the state about twice as far as one, at eta = 1/T the same distance.
``claims.csv`` gives, per row, the comparison that decides the verdict (the least favourable one
for a claim made at every size); ``numbers`` lists them all.

Tolerances (relative to the reference perplexity), chosen to match the paper's wording:
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.report.akima import akima_optimum
from cemlab.report.stats import (CONTRADICTED, INCONCLUSIVE, METHOD, NOT_ENOUGH, SUPPORTED, Interval, combine,
                                 judge, t_interval)
from cemlab.report.table import best_lr

__all__ = ["SUPPORTED", "CONTRADICTED", "INCONCLUSIVE", "NOT_ENOUGH", "CLAIMS", "evaluate", "verdict_frame"]

#: "Only a small effect on test perplexity" (sec. 4.1): CEM attention at most 5% above Llama.
SMALL_COST = 0.05
#: "Little or no effect/gain": a relative change of at most 1% counts as none.
NEGLIGIBLE = 0.01
#: "Matches or beats": at most 1% above the reference.
MATCH_TOL = 0.01
#: "Close to": within 2% of the reference.
CLOSE_TOL = 0.02

#: The regime of the paper's language-model runs (sec. 4, Table 1-2), shown next to every verdict.
PAPER_REGIME = "86M-162M params, Chinchilla tokens of the matched Llama (20/param), SlimPajama; seeds not stated"
#: The GP study's regime (Table 3).
PAPER_REGIME_GP = "GP regression as in Table 3 (8192 training points); seeds not stated"

__doc__ += f"""
- ``SMALL_COST = {SMALL_COST}``: "small effect" (CEM attention at T=1 vs Llama);
- ``NEGLIGIBLE = {NEGLIGIBLE}``: "little or no" effect or gain;
- ``MATCH_TOL = {MATCH_TOL}``: "matches or beats";
- ``CLOSE_TOL = {CLOSE_TOL}``: "close to".
"""


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if math.isfinite(x) else "n/a"


def _v(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "n/a"


def _log2(x: float) -> str:
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
    fmt: Callable[[float], str] = _pct

    def __post_init__(self):
        if not self.verdict:
            self.verdict = _judge(self.iv, self.tol, self.side)

    def describe(self) -> str:
        iv = self.iv
        ci = f"95% CI [{self.fmt(iv.low)}, {self.fmt(iv.high)}]" if iv.finite else "no interval"
        return f"{self.text}: effect {self.fmt(iv.effect)}, {ci}, n={iv.n} [{self.verdict}]"

    def badness(self) -> float:
        """How close (or beyond) the interval is to the wrong side of the tolerance; the largest
        one decides which comparison a claims.csv row shows."""
        iv = self.iv
        if not iv.finite:
            return math.inf
        if self.side == "below":
            return iv.high - self.tol
        if self.side == "above":
            return self.tol - iv.low
        return max(iv.high - self.tol, -self.tol - iv.low)


def _judge(iv: Interval, tol: float, side: str) -> str:
    if side != "within":
        return judge(iv, tol, side)
    # |effect| < tol: supported inside (-tol, tol), contradicted wholly outside it
    below, above = judge(iv, tol, "below"), judge(iv, -tol, "above")
    if below == SUPPORTED and above == SUPPORTED:
        return SUPPORTED
    if CONTRADICTED in (below, above):
        return CONTRADICTED
    return below if below in (NOT_ENOUGH,) else INCONCLUSIVE


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


@dataclass
class Claim:
    id: str
    paper: str
    claim: str
    rule: str
    sweeps: list[str]
    evaluate: Callable  # (ClaimData) -> (list[Check], list[str] missing)
    paper_regime: str = PAPER_REGIME


class ClaimData:
    """Cells and per-seed values of the sweeps a claim reads, at one scale."""

    def __init__(self, cells_of: Callable[[str], pd.DataFrame],
                 trials_of: Callable[[str], pd.DataFrame] | None = None,
                 history: Callable[[str, str], list] | None = None):
        self._cells_of = cells_of
        self._trials_of = trials_of
        self.history = history
        self._by_cell: dict[str, dict[str, pd.DataFrame]] = {}

    def cells(self, sweep: str, **where) -> pd.DataFrame:
        df = self._cells_of(sweep)
        for k, v in where.items():
            if df.empty:
                break
            df = df[df[k].isin(v) if isinstance(v, (list, tuple, set)) else df[k] == v]
        return df

    def at_best_lr(self, sweep: str, by: list[str], **where) -> pd.DataFrame:
        df = self.cells(sweep, **where)
        if df.empty or df["lr"].nunique() <= 1:
            return df
        return best_lr(df, by)

    def trials(self, sweep: str) -> pd.DataFrame:
        if self._trials_of is None:
            return pd.DataFrame(columns=["cell", "seed", "value", "run_id", "lr"])
        return self._trials_of(sweep)

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


def _regime(rows: list) -> dict:
    """Tokens per parameter and optimizer steps of the reference cell (the first), and the corpus
    with the number of passes over its training split (token budget / training tokens)."""
    r = rows[0]
    budget, params = float(r.get("token_budget", math.nan)), float(r.get("params_total", math.nan))
    corpus, have = str(r.get("corpus", "") or ""), float(r.get("train_tokens", math.nan))
    if corpus and math.isfinite(budget) and math.isfinite(have) and have > 0:
        corpus += f" ({budget / have:.2g} epochs)"
    return dict(tokens_per_param=budget / params if params and math.isfinite(params) else math.nan,
                steps=float(r.get("total_steps", math.nan)), corpus=corpus)


def _compare(data: ClaimData, missing: list[str], label: str, rows: list, f: Callable, text: str, tol: float = 0.0,
             side: str = "below", condition: str = "", fmt: Callable = _pct) -> Check | None:
    """A paired comparison of the cells ``rows``: ``f(values of each cell at a seed)`` per seed."""
    seeds, vals = data.aligned(rows)
    if not seeds:
        missing.append(f"{label}: no seed at which every compared cell finished")
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        diffs = np.asarray(f(*vals), dtype=float)
    return Check(label, text, t_interval(diffs), tol, side, condition, _regime(rows), fmt=fmt)


def _rel(a, b):
    """Relative change of b over a, per seed."""
    return b / a - 1


def _cell(df: pd.DataFrame, missing: list[str], label: str, **where):
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
    return d.iloc[int(np.nanargmin(vals))]


def _sizes(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df.sort_values("order")["size"])) if not df.empty else []


def _etas(df: pd.DataFrame) -> list[str]:
    """The step-size settings present (column ``eta``), in grid order."""
    if df.empty or "eta" not in df:
        return [""]
    return list(dict.fromkeys(str(e) for e in df.sort_values("order")["eta"])) or [""]


def _cond(eta: str) -> str:
    return f"eta={eta}" if eta else ""


# ----------------------------------------------------------------------------------------------
# rules
# ----------------------------------------------------------------------------------------------

def _attn_pairs(data: ClaimData, missing: list[str]) -> dict[str, tuple]:
    cells = data.at_best_lr("attention_replacement", ["family", "variant", "size"])
    out = {}
    for size in _sizes(cells):
        llama = _cell(cells, missing, f"attention_replacement {size} llama", size=size, family="llama")
        cem = _cell(cells, missing, f"attention_replacement {size} cem-attn", size=size, family="cem-attn")
        if llama is not None and cem is not None:
            out[size] = (llama, cem)
    return out


def rule_attn_small_cost(data: ClaimData):
    missing: list[str] = []
    checks = [_compare(data, missing, size, [l, c], _rel,
                       f"{size}: Llama {_v(l['mean'])}, CEM attention {_v(c['mean'])}", SMALL_COST, "below")
              for size, (l, c) in _attn_pairs(data, missing).items()]
    return checks, missing


def _mlp_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("mlp_replacement", ["family", "variant", "size", "param_matched"])


def rule_mlp_loses_more(data: ClaimData):
    missing: list[str] = []
    attn = _attn_pairs(data, missing)
    cells = _mlp_cells(data)
    checks = []
    for size in _sizes(cells):
        llama = _cell(cells, missing, f"mlp_replacement {size} llama", size=size, family="llama")
        cem = _cell(cells, missing, f"mlp_replacement {size} cem-mlp", size=size, family="cem-mlp",
                    param_matched=False)
        if llama is None or cem is None:
            continue
        if size not in attn:
            missing.append(f"{size}: no attention comparison")
            continue
        la, ca = attn[size]
        checks.append(_compare(
            data, missing, size, [llama, cem, la, ca], lambda lm, m, l2, a: (m / lm - 1) - (a / l2 - 1),
            f"{size}: CEM MLP {_pct(cem['mean'] / llama['mean'] - 1)} vs CEM attention "
            f"{_pct(ca['mean'] / la['mean'] - 1)} over Llama (effect: the difference)", 0.0, "above"))
    return checks, missing


def rule_param_matching_recovers(data: ClaimData):
    missing: list[str] = []
    cells = _mlp_cells(data)
    checks = []
    for size in _sizes(cells):
        dim = _cell(cells, missing, f"{size} cem-mlp dim-matched", size=size, family="cem-mlp", param_matched=False)
        par = _cell(cells, missing, f"{size} cem-mlp param-matched", size=size, family="cem-mlp", param_matched=True)
        if dim is not None and par is not None:
            checks.append(_compare(data, missing, size, [dim, par], _rel,
                                   f"{size}: dim-matched {_v(dim['mean'])}, param-matched {_v(par['mean'])}"))
    return checks, missing


def _recursion_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("recursion_ablation", ["family", "variant", "size", "T", "precond", "eta"])


def _cem(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[cells["family"].isin(["cem-attn", "cem-mlp"])] if not cells.empty else cells


def rule_t2_beats_t1(data: ClaimData):
    """T=1 does not depend on the step-size setting eta=1/T (it is eta=1), so one T=1 cell is the
    reference of the T=2 cell of every eta."""
    missing: list[str] = []
    cem = _cem(_recursion_cells(data))
    checks = []
    if cem.empty:
        return checks, missing
    for (group, size, precond), g in cem.groupby(["family", "size", "precond"], sort=False):
        label = f"{group} {size} {precond}"
        t1 = _cell(g, missing, f"{label} T=1", T=1)
        for eta in _etas(g[g["T"] == 2]):
            t2 = _cell(g[g["T"] == 2], missing, f"{label} T=2 {_cond(eta)}", **({"eta": eta} if eta else {}))
            if t1 is not None and t2 is not None:
                checks.append(_compare(data, missing, f"{label} {_cond(eta)}".strip(), [t1, t2], _rel,
                                       f"{label} {_cond(eta)}: T=1 {_v(t1['mean'])}, T=2 {_v(t2['mean'])}",
                                       condition=_cond(eta)))
    return checks, missing


PRECOND_ORDER = ["none", "diag", "dplr"]


def rule_precond_t2_not_t1(data: ClaimData):
    """Effect of a preconditioner = relative gain of the richest one present (dplr > diag > none)
    over the simplest one present, per (sublayer, size, T), averaged over sublayers and sizes per
    seed. Supported when the mean effect at T=1 is within +-NEGLIGIBLE, at T=2 above NEGLIGIBLE,
    and the T=2 effect above the T=1 effect (three comparisons, per eta of the T=2 cells)."""
    missing: list[str] = []
    cem = _cem(_recursion_cells(data))
    if cem.empty:
        return [], missing

    def pairs(T: int, eta: str) -> list[tuple]:
        out = []
        sel = cem[cem["T"] == T]
        if eta:
            sel = sel[sel["eta"] == eta]
        for (group, size), g in sel.groupby(["family", "size"], sort=False):
            present = [p for p in PRECOND_ORDER if p in set(g["precond"])]
            if len(present) < 2:
                continue
            lo, hi = present[0], present[-1]
            a = _cell(g, missing, f"{group} {size} T={T} {lo}", precond=lo)
            b = _cell(g, missing, f"{group} {size} T={T} {hi}", precond=hi)
            if a is not None and b is not None:
                out.append((f"{group} {size} T={T} {lo}->{hi}", a, b))
        return out

    def gain(n: int):
        # per seed: mean over the pairs of (a - b) / a; values come as a0, b0, a1, b1, ...
        return lambda *v: np.mean([(v[2 * i] - v[2 * i + 1]) / v[2 * i] for i in range(n)], axis=0)

    checks = []
    p1 = pairs(1, "")
    for eta in _etas(cem[cem["T"] == 2]):
        p2 = pairs(2, eta)
        if not p1 or not p2:
            continue
        c = _cond(eta)
        r1 = [x for _, a, b in p1 for x in (a, b)]
        r2 = [x for _, a, b in p2 for x in (a, b)]
        names1, names2 = ", ".join(n for n, _, _ in p1), ", ".join(n for n, _, _ in p2)
        for check in (
            _compare(data, missing, "T=1", r1, gain(len(p1)), f"mean gain at T=1 ({names1}; little effect: within "
                     f"+-{NEGLIGIBLE:.0%})", NEGLIGIBLE, "within", c),
            _compare(data, missing, f"T=2 {c}".strip(), r2, gain(len(p2)),
                     f"mean gain at T=2 {c} ({names2}; clear: above {NEGLIGIBLE:.0%})", NEGLIGIBLE, "above", c),
            _compare(data, missing, f"T=2 - T=1 {c}".strip(), r2 + r1,
                     lambda *v: gain(len(p2))(*v[:2 * len(p2)]) - gain(len(p1))(*v[2 * len(p2):]),
                     f"gain at T=2 {c} minus gain at T=1", 0.0, "above", c),
        ):
            if check is not None:
                checks.append(check)
    return checks, missing


def rule_cem_attn_t2_beats_llama(data: ClaimData):
    missing: list[str] = []
    cells = _recursion_cells(data)
    checks = []
    for size in _sizes(cells):
        llama = _cell(cells, missing, f"{size} llama", size=size, family="llama")
        t2 = cells[(cells["size"] == size) & (cells["family"] == "cem-attn") & (cells["T"] == 2)]
        for eta in _etas(t2):
            c = _cond(eta)
            cem = _cell(t2, missing, f"{size} cem-attn T=2 {c}".strip(), **({"eta": eta} if eta else {}))
            if llama is not None and cem is not None:
                checks.append(_compare(data, missing, f"{size} {c}".strip(), [llama, cem], _rel,
                                       f"{size} {c}: Llama {_v(llama['mean'])}, best CEM attention T=2 "
                                       f"({cem['precond']}) {_v(cem['mean'])}", condition=c))
    return checks, missing


def _seed_optima(data: ClaimData, missing: list[str]) -> dict[str, dict[str, dict]]:
    """Akima optimum of each seed's learning-rate curve, per size and family (llama / cem)."""
    cells = data.cells("lr_sweep")
    trials = data.trials("lr_sweep")
    out: dict[str, dict[str, dict]] = {}
    for size in _sizes(cells):
        for family in ("llama", "cem"):
            g = cells[(cells["size"] == size) & (cells["family"] == family)]
            if g.empty:
                missing.append(f"lr_sweep {size} {family}: not in the grid")
                continue
            t = trials[trials["cell"].isin(set(g["cell"]))] if len(trials) else trials
            per_seed = {}
            for seed, s in t.groupby("seed", sort=True) if len(t) else []:
                opt = akima_optimum(s["lr"].to_numpy(dtype=float), s["value"].to_numpy(dtype=float))
                if opt.n_points:
                    per_seed[int(seed)] = (opt, float(g["lr"].min()), float(g["lr"].max()), g.iloc[0])
            if not per_seed:
                missing.append(f"lr_sweep {size} {family}: no finished run")
                continue
            out.setdefault(size, {})[family] = per_seed
    return out


def _optimum_check(size: str, fam: dict, f: Callable, text: Callable, tol: float, side: str, fmt=_pct):
    seeds = sorted(set(fam["llama"]) & set(fam["cem"]))
    if not seeds:
        return None
    ol = [fam["llama"][s][0] for s in seeds]
    oc = [fam["cem"][s][0] for s in seeds]
    iv = t_interval([f(a, b) for a, b in zip(ol, oc)])
    ref = fam["llama"][seeds[0]][3]
    return Check(size, text(ol, oc), iv, tol, side, "", _regime([ref]), fmt=fmt), seeds, ol, oc


def rule_full_cem_matches_llama(data: ClaimData):
    missing: list[str] = []
    checks = []
    for size, fam in _seed_optima(data, missing).items():
        if len(fam) < 2:
            continue

        def text(ol, oc):
            edge = "" if all(o.bracketed for o in ol + oc) else " (an optimum is at the grid's edge)"
            return (f"{size}: Akima optima per seed: Llama {', '.join(_v(o.value) for o in ol)}, "
                    f"CEM {', '.join(_v(o.value) for o in oc)}{edge}")
        got = _optimum_check(size, fam, lambda a, b: b.value / a.value - 1, text, MATCH_TOL, "below")
        if got is None:
            missing.append(f"{size}: no seed with both optima")
            continue
        checks.append(got[0])
    return checks, missing


def rule_full_cem_higher_lr(data: ClaimData):
    """CEM's optimal lr is higher than Llama's: per seed, log2(lr_CEM / lr_Llama) > 0. An optimum at
    the top (bottom) edge of the grid means the true optimum is at or above (below) it: a verdict
    stands only if every edge pushes the same way as the verdict, otherwise it is inconclusive."""
    missing: list[str] = []
    checks = []
    for size, fam in _seed_optima(data, missing).items():
        if len(fam) < 2:
            continue

        def text(ol, oc):
            def f(o):
                return f"{o.lr:.3g}{'' if o.bracketed else ' (edge)'}"
            return f"{size}: optimal lr per seed Llama {', '.join(map(f, ol))}; CEM {', '.join(map(f, oc))}"
        got = _optimum_check(size, fam, lambda a, b: math.log2(b.lr / a.lr), text, 0.0, "above", _log2)
        if got is None:
            missing.append(f"{size}: no seed with both optima")
            continue
        check, seeds, ol, oc = got
        lo, hi = fam["llama"][seeds[0]][1], fam["llama"][seeds[0]][2]

        def push(o, cem: bool) -> int:  # +1: the true value favours "higher", -1: "lower", 0: none
            if o.bracketed:
                return 0
            up = math.isclose(o.lr, hi, rel_tol=1e-9)
            down = math.isclose(o.lr, lo, rel_tol=1e-9)
            return (1 if up else -1 if down else 0) * (1 if cem else -1)
        pushes = {push(o, False) for o in ol} | {push(o, True) for o in oc}
        if (check.verdict == SUPPORTED and -1 in pushes) or (check.verdict == CONTRADICTED and 1 in pushes):
            check.verdict = INCONCLUSIVE
            check.text += " (an optimum at the grid's edge leaves it open)"
        checks.append(check)
    return checks, missing


def rule_256m(data: ClaimData):
    missing: list[str] = []
    cells = data.at_best_lr("scale_256m", ["family", "variant", "size"])
    checks = []
    for size in _sizes(cells):
        llama = _cell(cells, missing, f"{size} llama", size=size, family="llama")
        cem = _cell(cells, missing, f"{size} cem", size=size, family="cem")
        if llama is not None and cem is not None:
            checks.append(_compare(data, missing, size, [llama, cem], _rel,
                                   f"{size}: Llama {_v(llama['mean'])}, full CEM {_v(cem['mean'])}", MATCH_TOL))
    return checks, missing


def _kq(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("kq_diagonal", ["family", "variant", "size", "kq_diagonal"])


def rule_kq_matters(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    checks = []
    for size in _sizes(cells):
        none = _cell(cells, missing, f"{size} no diagonal", size=size, kq_diagonal="none")
        diag = [r for r in (_cell(cells, missing, f"{size} shared", size=size, kq_diagonal="shared"),
                            _cell(cells, missing, f"{size} per-head", size=size, kq_diagonal="per_head"))
                if r is not None]
        if none is not None and diag:
            best = min(diag, key=lambda r: r["mean"])
            checks.append(_compare(data, missing, size, [best, none], _rel,
                                   f"{size}: none {_v(none['mean'])}, best diagonal ({best['kq_diagonal']}) "
                                   f"{_v(best['mean'])}", NEGLIGIBLE, "above"))
    return checks, missing


def rule_shared_close(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    checks = []
    for size in _sizes(cells):
        shared = _cell(cells, missing, f"{size} shared", size=size, kq_diagonal="shared")
        per_head = _cell(cells, missing, f"{size} per-head", size=size, kq_diagonal="per_head")
        if shared is not None and per_head is not None:
            checks.append(_compare(data, missing, size, [per_head, shared], _rel,
                                   f"{size}: shared {_v(shared['mean'])}, per-head {_v(per_head['mean'])}",
                                   CLOSE_TOL))
    return checks, missing


def _rule_reuse(sweep: str, attention: bool):
    """Per size and eta: plain reuse gains at most NEGLIGIBLE from T=1 to T=2 (gain = relative drop
    of perplexity, per seed), each CEM setting gains more than 0 and more than plain reuse."""
    def rule(data: ClaimData):
        from cemlab.report.figures import reuse_setting

        missing: list[str] = []
        cells = data.cells(sweep)
        if cells.empty:
            return [], missing
        cells = cells.copy()
        cells["setting"] = [reuse_setting(r, attention) for _, r in cells.iterrows()]
        if cells["lr"].nunique() > 1:
            cells = best_lr(cells, ["setting", "size", "T", "eta"])
        checks = []

        def drop(a, b):
            return (a - b) / a
        for size in _sizes(cells):
            c = cells[cells["size"] == size]
            reuse = c[c["setting"] == "plain reuse"]
            r1 = _cell(reuse, missing, f"{size} plain reuse T=1", T=1)
            r2 = _cell(reuse, missing, f"{size} plain reuse T=2", T=2)
            cem = c[c["setting"] != "plain reuse"]
            for eta in _etas(cem[cem["T"] == 2]):
                cond = _cond(eta)
                if r1 is not None and r2 is not None:
                    ch = _compare(data, missing, f"{size} plain reuse", [r1, r2], drop,
                                  f"{size}: plain reuse T=1 {_v(r1['mean'])}, T=2 {_v(r2['mean'])} (gain)",
                                  NEGLIGIBLE, "below", cond)
                    if ch is not None:
                        checks.append(ch)
                for setting, g in cem.groupby("setting", sort=False):
                    t1 = _cell(g, missing, f"{size} {setting} T=1", T=1)
                    g2 = g[g["T"] == 2]
                    t2 = _cell(g2[g2["eta"] == eta] if eta else g2, missing, f"{size} {setting} T=2 {cond}".strip())
                    if t1 is None or t2 is None:
                        continue
                    found = [_compare(data, missing, f"{size} {setting} {cond}".strip(), [t1, t2], drop,
                                      f"{size} {setting} {cond}: T=1 {_v(t1['mean'])}, T=2 {_v(t2['mean'])} (gain)",
                                      0.0, "above", cond)]
                    if r1 is not None and r2 is not None:
                        found.append(_compare(data, missing, f"{size} {setting} vs reuse {cond}".strip(),
                                              [t1, t2, r1, r2], lambda a, b, ra, rb: drop(a, b) - drop(ra, rb),
                                              f"{size} {setting} {cond}: gain minus plain reuse's gain", 0.0,
                                              "above", cond))
                    checks += [ch for ch in found if ch is not None]
        return checks, missing
    return rule


def _gp_cells(data: ClaimData) -> dict[str, dict[int, object]]:
    cells = data.cells("gp_recursion")
    out: dict[str, dict[int, object]] = {}
    if cells.empty:
        return out
    for kernel, g in cells.groupby("kernel", sort=False):
        out[kernel] = {int(T): g[g["T"] == T] for T in sorted(g["T"].unique())}
    return out


def rule_gp_t2_beats_t1(data: ClaimData):
    missing: list[str] = []
    checks = []
    for kernel, by_t in _gp_cells(data).items():
        if 1 in by_t and 2 in by_t:
            a = _cell(by_t[1], missing, f"{kernel} T=1")
            b = _cell(by_t[2], missing, f"{kernel} T=2")
            if a is not None and b is not None:
                checks.append(_compare(data, missing, kernel, [a, b], _rel,
                                       f"{kernel}: RMSE T=1 {_v(a['mean'])}, T=2 {_v(b['mean'])}"))
    return checks, missing


def rule_gp_not_monotonic(data: ClaimData):
    """Supported when, for at least one kernel, the RMSE rises from some T to the next larger T
    (that pair's interval wholly above 0); contradicted when every step of every kernel falls (every
    interval wholly below 0; at least three T values each); inconclusive otherwise."""
    missing: list[str] = []
    pairs: list[Check] = []
    for kernel, by_t in _gp_cells(data).items():
        Ts = sorted(by_t)
        if len(Ts) < 3:
            continue
        rows = {T: _cell(by_t[T], missing, f"{kernel} T={T}") for T in Ts}
        for a, b in zip(Ts, Ts[1:]):
            if rows[a] is not None and rows[b] is not None:
                ch = _compare(data, missing, f"{kernel} T={a}->{b}", [rows[a], rows[b]], _rel,
                              f"{kernel} T={a}->{b}: {_v(rows[a]['mean'])} -> {_v(rows[b]['mean'])}", 0.0, "above")
                if ch is not None:
                    pairs.append(ch)
    if not pairs:
        return [], missing
    if any(p.verdict == SUPPORTED for p in pairs):
        verdict = SUPPORTED
    elif all(p.verdict == CONTRADICTED for p in pairs):
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    key = max(pairs, key=lambda p: p.iv.effect if math.isfinite(p.iv.effect) else -math.inf)
    summary = Check("all kernels", "largest rise " + key.text + " | " + "; ".join(p.describe() for p in pairs),
                    key.iv, 0.0, "above", "", key.regime, verdict)
    return [summary], missing


def rule_test_time_recursion(data: ClaimData):
    """Beyond the paper (its sec. 5.2 leaves test-time scaling to future work): a CEM model trained
    with T=2 evaluated with 2T steps has lower test perplexity than at its training T (per seed,
    the relative change of test/ppl_at_steps between T'=2T and T'=T; per sublayer, size,
    preconditioner and eta)."""
    from cemlab.tracking import schema

    missing: list[str] = []
    checks = []
    if data.history is None:
        return checks, missing
    cem = _cem(data.cells("recursion_ablation"))
    if cem.empty:
        return checks, missing
    for _, row in cem[cem["T"] == 2].iterrows():
        T = int(row["T"])
        eta = str(row.get("eta", "") or "")
        label = f"{row['variant']} {row['size']}" + (f" lr={row['lr']:g}" if data.cells("recursion_ablation")[
            "lr"].nunique() > 1 else "")
        at, more = {}, {}
        for seed, t in data.seed_trials(row).iterrows():
            curve = dict(data.history(t["run_id"], schema.TEST_PPL_AT_STEPS)) if t["run_id"] else {}
            if T in curve and 2 * T in curve:
                at[seed], more[seed] = curve[T], curve[2 * T]
        if not at:
            missing.append(f"{label}: no test-time curve up to T'={2 * T}")
            continue
        seeds = sorted(at)
        a, b = np.array([at[s] for s in seeds]), np.array([more[s] for s in seeds])
        checks.append(Check(label, f"{label}: test ppl at T'={T} {_v(a.mean())}, at T'={2 * T} {_v(b.mean())}",
                            t_interval(b / a - 1), 0.0, "below", _cond(eta), _regime([row])))
    return checks, missing


# ----------------------------------------------------------------------------------------------
# the claims of the paper, in paper order, and one beyond it
# ----------------------------------------------------------------------------------------------

CLAIMS: list[Claim] = [
    Claim("attn-small-cost", "Fig. 2a, sec. 4.1",
          "Replacing attention by CEM attention (T=1, about half the attention parameters) costs little perplexity.",
          f"At every size, CEM attention's perplexity is at most {SMALL_COST:.0%} above Llama's (paired over seeds).",
          ["attention_replacement"], rule_attn_small_cost),
    Claim("mlp-loses-more", "Fig. 2b, sec. 4.1",
          "CEM MLPs lose more perplexity than CEM attention.",
          "At every size, the relative perplexity increase of the dimension-matched CEM MLP over Llama is larger "
          "than that of CEM attention.", ["mlp_replacement", "attention_replacement"], rule_mlp_loses_more),
    Claim("param-matching-recovers", "Fig. 2b, sec. 4.1",
          "Parameter matching (hidden width x1.5) recovers some of the CEM MLP's loss.",
          "At every size, the parameter-matched CEM MLP has lower perplexity than the dimension-matched one.",
          ["mlp_replacement"], rule_param_matching_recovers),
    Claim("t2-beats-t1", "Fig. 2c/2d, sec. 4.2",
          "Recursion T=2 beats T=1 (CEM attention and CEM MLP).",
          "For every sublayer, size and preconditioner, perplexity at T=2 is lower than at T=1; judged per step "
          "size eta of the T=2 cells.", ["recursion_ablation"], rule_t2_beats_t1),
    Claim("precond-t2-not-t1", "Fig. 2c/2d, sec. 4.2",
          "Preconditioners have little effect at T=1 but help at T=2.",
          f"Gain of the richest preconditioner over the simplest (dplr over diag, or over none), averaged over "
          f"sublayers and sizes per seed: within +-{NEGLIGIBLE:.0%} at T=1, above {NEGLIGIBLE:.0%} and above the "
          f"T=1 gain at T=2; per eta.", ["recursion_ablation"], rule_precond_t2_not_t1),
    Claim("cem-attn-t2-beats-llama", "Fig. 2c, sec. 4.2",
          "CEM attention with T=2 (and a preconditioner) beats Llama attention.",
          "At every size, the best CEM attention at T=2 has lower perplexity than Llama; per eta.",
          ["recursion_ablation"], rule_cem_attn_t2_beats_llama),
    Claim("full-cem-matches-llama", "Fig. 3a, sec. 4.3",
          "A full CEM Transformer (T=2, dplr) matches or beats Llama at the optimal learning rate.",
          f"At every size, CEM's Akima-interpolated optimal perplexity is at most {MATCH_TOL:.0%} above Llama's "
          f"(optima per seed, paired).", ["lr_sweep"], rule_full_cem_matches_llama),
    Claim("full-cem-higher-lr", "Fig. 3a, sec. 4.3",
          "Full CEM Transformers prefer a higher learning rate than Llama.",
          "At every size, CEM's optimal learning rate is higher than Llama's (log2 ratio of the per-seed optima > 0; "
          "an optimum at the grid's edge stands for 'at or beyond the edge').", ["lr_sweep"], rule_full_cem_higher_lr),
    Claim("full-cem-256m", "appendix (256M)",
          "At 256M parameters, full CEM still matches or beats Llama.",
          f"At every size of the sweep, full CEM's perplexity is at most {MATCH_TOL:.0%} above Llama's.",
          ["scale_256m"], rule_256m),
    Claim("kq-diagonal-matters", "Fig. 3b, sec. 4.4",
          "A diagonal term in A_k is essential for good performance.",
          f"At every size, CEM attention without a diagonal is more than {NEGLIGIBLE:.0%} worse than the best "
          f"diagonal variant.", ["kq_diagonal"], rule_kq_matters),
    Claim("shared-close-to-per-head", "Fig. 3b, sec. 4.4",
          "A diagonal shared across heads is close to per-head diagonals.",
          f"At every size, the shared diagonal's perplexity is at most {CLOSE_TOL:.0%} above the per-head one's.",
          ["kq_diagonal"], rule_shared_close),
    Claim("reuse-vs-recursion-mlp", "Fig. 3c, sec. 4.4",
          "Plain reuse of the MLP block gains little from T=1 to T=2, while CEM MLP recursion gains.",
          f"At every size, plain reuse gains at most {NEGLIGIBLE:.0%} and each CEM MLP setting gains more than "
          f"0 and more than plain reuse; per eta.", ["reuse_vs_recursion_mlp"],
          _rule_reuse("reuse_vs_recursion_mlp", attention=False)),
    Claim("reuse-vs-recursion-attention", "Fig. 4, appendix D",
          "Plain reuse of the attention block gains little (or hurts), while CEM attention recursion gains.",
          f"At every size, plain reuse gains at most {NEGLIGIBLE:.0%} and CEM attention gains more than 0 and "
          f"more than plain reuse; per eta.", ["reuse_vs_recursion_attention"],
          _rule_reuse("reuse_vs_recursion_attention", attention=True)),
    Claim("gp-t2-beats-t1", "Table 3 (GP study)",
          "In the GP study, T=2 beats T=1.",
          "For every kernel, the test RMSE at T=2 is lower than at T=1.",
          ["gp_recursion"], rule_gp_t2_beats_t1, PAPER_REGIME_GP),
    Claim("gp-not-monotonic", "Table 3 (GP study)",
          "In the GP study, gains from more recursion steps are not monotonic.",
          "For at least one kernel, the test RMSE rises from one T to the next larger T.",
          ["gp_recursion"], rule_gp_not_monotonic, PAPER_REGIME_GP),
    Claim("test-time-recursion", "beyond the paper (sec. 5.2: future work)",
          "A CEM model trained with T=2 improves when given more recursion steps at test time.",
          "For every T=2-trained CEM cell, test perplexity evaluated with 2T steps is lower than with the T steps it "
          "was trained with (test/ppl_at_steps, paired over seeds); per eta.",
          ["recursion_ablation"], rule_test_time_recursion, "not in the paper"),
]


def claims_for(sweep: str | None) -> list[Claim]:
    """The claims a sweep's report shows (all of them for ``None``)."""
    return [c for c in CLAIMS if sweep is None or sweep in c.sweeps]


def _decisive(checks: list[Check], verdict: str) -> Check:
    """The comparison a claims.csv row shows: among those with the row's verdict (any, if none
    has it), the least favourable one."""
    pool = [c for c in checks if c.verdict == verdict] or checks
    return max(pool, key=lambda c: (c.badness(), -c.iv.n))


def evaluate(claims: list[Claim], cells_of: Callable[[str], pd.DataFrame], scale: str,
             trials_of: Callable[[str], pd.DataFrame] | None = None,
             history: Callable[[str, str], list] | None = None) -> list[Verdict]:
    """Verdicts of ``claims`` from the cells (and per-seed trials) of their sweeps at ``scale``: one
    per claim, or one per step-size condition for the claims judged per eta."""
    data = ClaimData(cells_of, trials_of, history)
    out = []
    for c in claims:
        checks, missing = c.evaluate(data)
        checks = [ch for ch in checks if ch is not None]
        missing = list(dict.fromkeys(missing))
        conditions = list(dict.fromkeys(ch.condition for ch in checks)) or [""]
        for cond in conditions:
            mine = [ch for ch in checks if ch.condition == cond]
            verdict = combine([ch.verdict for ch in mine])
            v = Verdict(c.id, c.paper, c.claim, c.rule, c.sweeps, verdict,
                        "; ".join(ch.describe() for ch in mine), scale, missing, cond, paper_regime=c.paper_regime)
            if mine:
                d = _decisive(mine, verdict)
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
                 "sweeps"]


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([dict(id=v.id, paper=v.paper, claim=v.claim, condition=v.condition, verdict=v.verdict,
                              effect=v.effect, ci_low=v.ci_low, ci_high=v.ci_high, n_seeds=v.n_seeds, scale=v.scale,
                              corpus=v.corpus, tokens_per_param=v.tokens_per_param, steps=v.steps,
                              paper_regime=v.paper_regime, method=v.method, numbers=v.numbers,
                              missing="; ".join(v.missing), rule=v.rule, sweeps=" ".join(v.sweeps))
                         for v in verdicts], columns=CLAIM_COLUMNS)
