"""The paper's claims, each with an explicit rule that turns runs into a verdict.

A verdict is one of

- ``supported``: every comparison the rule makes agrees with the claim (at least one was made);
- ``contradicted``: at least one comparison disagrees;
- ``not enough runs``: no comparison could be made (cells missing, diverged or failed).

Comparisons use seed means of the main metric (test perplexity; test RMSE for the GP study). Where
a sweep has several learning rates, each model enters at its best learning rate of the grid, except
for the learning-rate claims, which use the Akima-interpolated optima (``cemlab.report.akima``).
Every verdict lists the numbers behind it and the cells that were missing, and the scale its runs
were made at: a verdict at ``tiny`` or ``smoke`` scale says what those runs show, not what the
paper's 100M-parameter runs show.

Tolerances (relative to the reference perplexity), chosen to match the paper's wording:
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.report.akima import akima_optimum
from cemlab.report.table import best_lr

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
NOT_ENOUGH = "not enough runs"

#: "Only a small effect on test perplexity" (sec. 4.1): CEM attention at most 5% above Llama.
SMALL_COST = 0.05
#: "Little or no effect/gain": a relative change of at most 1% counts as none.
NEGLIGIBLE = 0.01
#: "Matches or beats": at most 1% above the reference.
MATCH_TOL = 0.01
#: "Close to": within 2% of the reference.
CLOSE_TOL = 0.02

__doc__ += f"""
- ``SMALL_COST = {SMALL_COST}``: "small effect" (CEM attention at T=1 vs Llama);
- ``NEGLIGIBLE = {NEGLIGIBLE}``: "little or no" effect or gain;
- ``MATCH_TOL = {MATCH_TOL}``: "matches or beats";
- ``CLOSE_TOL = {CLOSE_TOL}``: "close to".
"""


@dataclass
class Check:
    """One comparison: where (label), whether it agrees with the claim, and its numbers."""

    label: str
    ok: bool
    text: str


@dataclass
class Verdict:
    """A claim with its verdict."""

    id: str
    paper: str
    claim: str
    rule: str
    sweeps: list[str]
    verdict: str
    numbers: str
    scale: str
    missing: list[str] = field(default_factory=list)


@dataclass
class Claim:
    id: str
    paper: str
    claim: str
    rule: str
    sweeps: list[str]
    evaluate: Callable  # (ClaimData) -> (list[Check], list[str] missing)


def _verdict_of(checks: list[Check]) -> str:
    if not checks:
        return NOT_ENOUGH
    return SUPPORTED if all(c.ok for c in checks) else CONTRADICTED


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if math.isfinite(x) else "n/a"


def _v(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "n/a"


class ClaimData:
    """Cells of the sweeps a claim reads, at one scale, and the bookkeeping of what was missing."""

    def __init__(self, cells_of: Callable[[str], pd.DataFrame]):
        self._cells_of = cells_of

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


def _value(df: pd.DataFrame, missing: list[str], label: str, **where) -> float:
    """The seed mean of the cell of ``df`` matching ``where`` (the lowest if several match, e.g. one
    per learning rate); NaN, and a note in ``missing``, when none has a finished run."""
    d = df
    for k, v in where.items():
        d = d[d[k] == v]
    if d.empty:
        missing.append(f"{label}: not in the grid")
        return math.nan
    vals = d["mean"].to_numpy(dtype=float)
    if not np.isfinite(vals).any():
        note = "; ".join(n for n in d["note"] if n) or "no finished run"
        missing.append(f"{label}: {note}")
        return math.nan
    return float(np.nanmin(vals))


def _sizes(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df.sort_values("order")["size"])) if not df.empty else []


# ----------------------------------------------------------------------------------------------
# rules
# ----------------------------------------------------------------------------------------------

def _attn_gaps(data: ClaimData, missing: list[str]) -> dict[str, tuple[float, float, float]]:
    cells = data.at_best_lr("attention_replacement", ["family", "variant", "size"])
    out = {}
    for size in _sizes(cells):
        llama = _value(cells, missing, f"attention_replacement {size} llama", size=size, family="llama")
        cem = _value(cells, missing, f"attention_replacement {size} cem-attn", size=size, family="cem-attn")
        if math.isfinite(llama) and math.isfinite(cem):
            out[size] = (llama, cem, cem / llama - 1)
    return out


def rule_attn_small_cost(data: ClaimData):
    missing: list[str] = []
    checks = [Check(size, rel <= SMALL_COST, f"{size}: Llama {_v(l)}, CEM attention {_v(c)} ({_pct(rel)})")
              for size, (l, c, rel) in _attn_gaps(data, missing).items()]
    return checks, missing


def _mlp_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("mlp_replacement", ["family", "variant", "size", "param_matched"])


def rule_mlp_loses_more(data: ClaimData):
    missing: list[str] = []
    attn = _attn_gaps(data, missing)
    cells = _mlp_cells(data)
    checks = []
    for size in _sizes(cells):
        llama = _value(cells, missing, f"mlp_replacement {size} llama", size=size, family="llama")
        cem = _value(cells, missing, f"mlp_replacement {size} cem-mlp", size=size, family="cem-mlp",
                     param_matched=False)
        if not (math.isfinite(llama) and math.isfinite(cem)):
            continue
        if size not in attn:
            missing.append(f"{size}: no attention comparison")
            continue
        rel_mlp, rel_attn = cem / llama - 1, attn[size][2]
        checks.append(Check(size, rel_mlp > rel_attn,
                            f"{size}: CEM MLP {_pct(rel_mlp)} vs CEM attention {_pct(rel_attn)} over Llama"))
    return checks, missing


def rule_param_matching_recovers(data: ClaimData):
    missing: list[str] = []
    cells = _mlp_cells(data)
    checks = []
    for size in _sizes(cells):
        dim = _value(cells, missing, f"{size} cem-mlp dim-matched", size=size, family="cem-mlp", param_matched=False)
        par = _value(cells, missing, f"{size} cem-mlp param-matched", size=size, family="cem-mlp", param_matched=True)
        if math.isfinite(dim) and math.isfinite(par):
            checks.append(Check(size, par < dim, f"{size}: dim-matched {_v(dim)}, param-matched {_v(par)} "
                                                 f"({_pct(par / dim - 1)})"))
    return checks, missing


def _recursion_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("recursion_ablation", ["family", "variant", "size", "T", "precond"])


def rule_t2_beats_t1(data: ClaimData):
    missing: list[str] = []
    cells = _recursion_cells(data)
    cem = cells[cells["family"].isin(["cem-attn", "cem-mlp"])] if not cells.empty else cells
    checks = []
    if cem.empty:
        return checks, missing
    for (group, size, precond), _ in cem.groupby(["family", "size", "precond"], sort=False):
        label = f"{group} {size} {precond}"
        t1 = _value(cem, missing, f"{label} T=1", family=group, size=size, precond=precond, T=1)
        t2 = _value(cem, missing, f"{label} T=2", family=group, size=size, precond=precond, T=2)
        if math.isfinite(t1) and math.isfinite(t2):
            checks.append(Check(label, t2 < t1, f"{label}: T=1 {_v(t1)}, T=2 {_v(t2)} ({_pct(t2 / t1 - 1)})"))
    return checks, missing


PRECOND_ORDER = ["none", "diag", "dplr"]


def rule_precond_t2_not_t1(data: ClaimData):
    """Effect of a preconditioner = relative gain of the richest one present (dplr > diag > none)
    over the simplest one present, per (sublayer, size, T); averaged over sublayers and sizes.
    Supported when the mean effect at T=1 is within +-NEGLIGIBLE and at T=2 above NEGLIGIBLE (and
    above the T=1 effect)."""
    missing: list[str] = []
    cells = _recursion_cells(data)
    cem = cells[cells["family"].isin(["cem-attn", "cem-mlp"])] if not cells.empty else cells
    effects: dict[int, list[float]] = {1: [], 2: []}
    texts = []
    if cem.empty:
        return [], missing
    for (group, size, T), g in cem.groupby(["family", "size", "T"], sort=False):
        if int(T) not in effects:
            continue
        present = [p for p in PRECOND_ORDER if p in set(g["precond"])]
        if len(present) < 2:
            continue
        lo, hi = present[0], present[-1]
        a = _value(g, missing, f"{group} {size} T={T} {lo}", precond=lo)
        b = _value(g, missing, f"{group} {size} T={T} {hi}", precond=hi)
        if math.isfinite(a) and math.isfinite(b):
            effects[int(T)].append((a - b) / a)
            texts.append(f"{group} {size} T={T}: {lo} {_v(a)}, {hi} {_v(b)} (gain {_pct((a - b) / a)})")
    if not effects[1] or not effects[2]:
        return [], missing
    e1, e2 = float(np.mean(effects[1])), float(np.mean(effects[2]))
    checks = [
        Check("T=1", abs(e1) <= NEGLIGIBLE, f"mean gain at T=1: {_pct(e1)} (little effect: within +-{NEGLIGIBLE:.0%})"),
        Check("T=2", e2 > NEGLIGIBLE and e2 > e1, f"mean gain at T=2: {_pct(e2)} (clear: above {NEGLIGIBLE:.0%} "
                                                   f"and above T=1)"),
    ]
    checks[0].text += "; " + "; ".join(texts)
    return checks, missing


def rule_cem_attn_t2_beats_llama(data: ClaimData):
    missing: list[str] = []
    cells = _recursion_cells(data)
    checks = []
    for size in _sizes(cells):
        llama = _value(cells, missing, f"{size} llama", size=size, family="llama")
        t2 = cells[(cells["size"] == size) & (cells["family"] == "cem-attn") & (cells["T"] == 2)]
        cem = _value(t2, missing, f"{size} cem-attn T=2", size=size)
        if math.isfinite(llama) and math.isfinite(cem):
            pre = t2.loc[t2["mean"].idxmin(), "precond"]
            checks.append(Check(size, cem < llama, f"{size}: Llama {_v(llama)}, best CEM attention T=2 ({pre}) "
                                                   f"{_v(cem)} ({_pct(cem / llama - 1)})"))
    return checks, missing


def _optima(data: ClaimData, missing: list[str]) -> dict[str, dict[str, object]]:
    """Akima optimum per size and model family (llama / cem) of the lr sweep."""
    cells = data.cells("lr_sweep")
    out: dict[str, dict[str, object]] = {}
    for size in _sizes(cells):
        for family in ("llama", "cem"):
            g = cells[(cells["size"] == size) & (cells["family"] == family)]
            if g.empty:
                missing.append(f"lr_sweep {size} {family}: not in the grid")
                continue
            opt = akima_optimum(g["lr"].to_numpy(dtype=float), g["mean"].to_numpy(dtype=float))
            if opt.n_points == 0:
                missing.append(f"lr_sweep {size} {family}: no finished run")
                continue
            out.setdefault(size, {})[family] = (opt, float(g["lr"].min()), float(g["lr"].max()))
    return out


def rule_full_cem_matches_llama(data: ClaimData):
    missing: list[str] = []
    checks = []
    for size, fam in _optima(data, missing).items():
        if len(fam) < 2:
            continue
        (ol, _, _), (oc, _, _) = fam["llama"], fam["cem"]
        flag = "" if (ol.bracketed and oc.bracketed) else " (an optimum is at the grid's edge)"
        checks.append(Check(size, oc.value <= ol.value * (1 + MATCH_TOL),
                            f"{size}: Llama {_v(ol.value)} at lr {ol.lr:.3g}, CEM {_v(oc.value)} at lr {oc.lr:.3g} "
                            f"({_pct(oc.value / ol.value - 1)}){flag}"))
    return checks, missing


def _lr_interval(opt, lo: float, hi: float) -> tuple[float, float]:
    """Where the true optimum lies: the estimate if bracketed, else beyond the grid's edge."""
    if opt.bracketed:
        return opt.lr, opt.lr
    if math.isclose(opt.lr, hi, rel_tol=1e-9):
        return opt.lr, math.inf
    if math.isclose(opt.lr, lo, rel_tol=1e-9):
        return 0.0, opt.lr
    return opt.lr, opt.lr


def rule_full_cem_higher_lr(data: ClaimData):
    """CEM's optimal lr is higher than Llama's. An optimum at the top (bottom) edge of the grid
    means the true optimum is at or above (below) it; a size counts only when the intervals decide."""
    missing: list[str] = []
    checks = []
    for size, fam in _optima(data, missing).items():
        if len(fam) < 2:
            continue
        (ol, llo, lhi), (oc, clo, chi) = fam["llama"], fam["cem"]
        l_lo, l_hi = _lr_interval(ol, llo, lhi)
        c_lo, c_hi = _lr_interval(oc, clo, chi)
        text = (f"{size}: optimal lr Llama {ol.lr:.3g}{'' if ol.bracketed else ' (edge)'}, "
                f"CEM {oc.lr:.3g}{'' if oc.bracketed else ' (edge)'}")
        if c_lo > l_hi:
            checks.append(Check(size, True, text))
        elif c_hi <= l_lo:
            checks.append(Check(size, False, text))
        else:
            missing.append(text + ": undecided (optimum outside the grid)")
    return checks, missing


def rule_256m(data: ClaimData):
    missing: list[str] = []
    cells = data.at_best_lr("scale_256m", ["family", "variant", "size"])
    checks = []
    for size in _sizes(cells):
        llama = _value(cells, missing, f"{size} llama", size=size, family="llama")
        cem = _value(cells, missing, f"{size} cem", size=size, family="cem")
        if math.isfinite(llama) and math.isfinite(cem):
            checks.append(Check(size, cem <= llama * (1 + MATCH_TOL),
                                f"{size}: Llama {_v(llama)}, full CEM {_v(cem)} ({_pct(cem / llama - 1)})"))
    return checks, missing


def _kq(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("kq_diagonal", ["family", "variant", "size", "kq_diagonal"])


def rule_kq_matters(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    checks = []
    for size in _sizes(cells):
        none = _value(cells, missing, f"{size} no diagonal", size=size, kq_diagonal="none")
        shared = _value(cells, missing, f"{size} shared", size=size, kq_diagonal="shared")
        per_head = _value(cells, missing, f"{size} per-head", size=size, kq_diagonal="per_head")
        best = np.nanmin([shared, per_head]) if math.isfinite(shared) or math.isfinite(per_head) else math.nan
        if math.isfinite(none) and math.isfinite(best):
            checks.append(Check(size, none > best * (1 + NEGLIGIBLE),
                                f"{size}: none {_v(none)}, best diagonal {_v(best)} ({_pct(none / best - 1)})"))
    return checks, missing


def rule_shared_close(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    checks = []
    for size in _sizes(cells):
        shared = _value(cells, missing, f"{size} shared", size=size, kq_diagonal="shared")
        per_head = _value(cells, missing, f"{size} per-head", size=size, kq_diagonal="per_head")
        if math.isfinite(shared) and math.isfinite(per_head):
            checks.append(Check(size, shared <= per_head * (1 + CLOSE_TOL),
                                f"{size}: shared {_v(shared)}, per-head {_v(per_head)} ({_pct(shared / per_head - 1)})"))
    return checks, missing


def _rule_reuse(sweep: str, attention: bool):
    def rule(data: ClaimData):
        from cemlab.report.figures import recursion_gains

        missing: list[str] = []
        cells = data.cells(sweep)
        if cells.empty:
            return [], missing
        gains = recursion_gains(cells, attention)
        checks = []
        for size, g in gains.groupby("size", sort=False):
            by = {r["setting"]: r for _, r in g.iterrows()}
            for s, r in by.items():
                for t in (1, 2):
                    if not math.isfinite(r[f"T{t}_mean"]):
                        missing.append(f"{size} {s} T={t}: {r[f'T{t}_note'] or 'no finished run'}")
            reuse = by.get("plain reuse")
            cem = {s: r for s, r in by.items() if s != "plain reuse" and math.isfinite(r["rel_gain"])}
            if reuse is None or not math.isfinite(reuse["rel_gain"]) or not cem:
                continue
            ok = reuse["rel_gain"] <= NEGLIGIBLE and all(r["rel_gain"] > max(0.0, reuse["rel_gain"])
                                                         for r in cem.values())
            text = f"{size}: gain T=1->2 plain reuse {_pct(reuse['rel_gain'])}, " + ", ".join(
                f"{s} {_pct(r['rel_gain'])}" for s, r in cem.items())
            checks.append(Check(size, ok, text))
        return checks, missing
    return rule


def _gp_by_kernel(data: ClaimData, missing: list[str]) -> dict[str, list[tuple[int, float]]]:
    cells = data.cells("gp_recursion")
    out: dict[str, list[tuple[int, float]]] = {}
    if cells.empty:
        return out
    for kernel, g in cells.groupby("kernel", sort=False):
        pts = []
        for T in sorted(g["T"].unique()):
            v = _value(g, missing, f"{kernel} T={T}", T=T)
            if math.isfinite(v):
                pts.append((int(T), v))
        out[kernel] = pts
    return out


def rule_gp_t2_beats_t1(data: ClaimData):
    missing: list[str] = []
    checks = []
    for kernel, pts in _gp_by_kernel(data, missing).items():
        d = dict(pts)
        if 1 in d and 2 in d:
            checks.append(Check(kernel, d[2] < d[1], f"{kernel}: RMSE T=1 {_v(d[1])}, T=2 {_v(d[2])}"))
    return checks, missing


def rule_gp_not_monotonic(data: ClaimData):
    """Supported when, for at least one kernel, some larger T has a higher RMSE than the T before it;
    contradicted when every kernel's RMSE falls strictly with T (at least three T values each)."""
    missing: list[str] = []
    series = {k: p for k, p in _gp_by_kernel(data, missing).items() if len(p) >= 3}
    if not series:
        return [], missing
    texts, any_bump = [], False
    for kernel, pts in series.items():
        bumps = [f"T={a}->{b}" for (a, va), (b, vb) in zip(pts, pts[1:]) if vb >= va]
        any_bump |= bool(bumps)
        best = min(pts, key=lambda p: p[1])[0]
        texts.append(f"{kernel}: " + ", ".join(f"T={t} {_v(v)}" for t, v in pts) +
                     f"; best T={best}" + (f"; worse at {' '.join(bumps)}" if bumps else "; falls monotonically"))
    return [Check("all kernels", any_bump, " | ".join(texts))], missing


# ----------------------------------------------------------------------------------------------
# the claims of the paper (issue 5), in paper order
# ----------------------------------------------------------------------------------------------

CLAIMS: list[Claim] = [
    Claim("attn-small-cost", "Fig. 2a, sec. 4.1",
          "Replacing attention by CEM attention (T=1, about half the attention parameters) costs little perplexity.",
          f"At every size, CEM attention's perplexity is at most {SMALL_COST:.0%} above Llama's.",
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
          "For every sublayer, size and preconditioner, perplexity at T=2 is lower than at T=1.",
          ["recursion_ablation"], rule_t2_beats_t1),
    Claim("precond-t2-not-t1", "Fig. 2c/2d, sec. 4.2",
          "Preconditioners have little effect at T=1 but help at T=2.",
          f"Gain of the richest preconditioner over the simplest (dplr over diag, or over none), averaged over "
          f"sublayers and sizes: within +-{NEGLIGIBLE:.0%} at T=1, above {NEGLIGIBLE:.0%} and above the T=1 gain "
          f"at T=2.", ["recursion_ablation"], rule_precond_t2_not_t1),
    Claim("cem-attn-t2-beats-llama", "Fig. 2c, sec. 4.2",
          "CEM attention with T=2 (and a preconditioner) beats Llama attention.",
          "At every size, the best CEM attention at T=2 has lower perplexity than Llama.",
          ["recursion_ablation"], rule_cem_attn_t2_beats_llama),
    Claim("full-cem-matches-llama", "Fig. 3a, sec. 4.3",
          "A full CEM Transformer (T=2, dplr) matches or beats Llama at the optimal learning rate.",
          f"At every size, CEM's Akima-interpolated optimal perplexity is at most {MATCH_TOL:.0%} above Llama's.",
          ["lr_sweep"], rule_full_cem_matches_llama),
    Claim("full-cem-higher-lr", "Fig. 3a, sec. 4.3",
          "Full CEM Transformers prefer a higher learning rate than Llama.",
          "At every size where the optima decide it, CEM's optimal learning rate is higher than Llama's (an optimum "
          "at the grid's edge stands for 'at or beyond the edge').", ["lr_sweep"], rule_full_cem_higher_lr),
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
          f"plain reuse (and more than 0).", ["reuse_vs_recursion_mlp"],
          _rule_reuse("reuse_vs_recursion_mlp", attention=False)),
    Claim("reuse-vs-recursion-attention", "Fig. 4, appendix D",
          "Plain reuse of the attention block gains little (or hurts), while CEM attention recursion gains.",
          f"At every size, plain reuse gains at most {NEGLIGIBLE:.0%} and CEM attention gains more than plain "
          f"reuse (and more than 0).", ["reuse_vs_recursion_attention"],
          _rule_reuse("reuse_vs_recursion_attention", attention=True)),
    Claim("gp-t2-beats-t1", "Table 3 (GP study)",
          "In the GP study, T=2 beats T=1.",
          "For every kernel, the mean test RMSE at T=2 is lower than at T=1.",
          ["gp_recursion"], rule_gp_t2_beats_t1),
    Claim("gp-not-monotonic", "Table 3 (GP study)",
          "In the GP study, gains from more recursion steps are not monotonic.",
          "For at least one kernel, the mean test RMSE rises (or stays) from one T to the next larger T.",
          ["gp_recursion"], rule_gp_not_monotonic),
]


def claims_for(sweep: str | None) -> list[Claim]:
    """The claims a sweep's report shows (all of them for ``None``)."""
    return [c for c in CLAIMS if sweep is None or sweep in c.sweeps]


def evaluate(claims: list[Claim], cells_of: Callable[[str], pd.DataFrame], scale: str) -> list[Verdict]:
    """Verdicts of ``claims`` from the cells of their sweeps at ``scale``."""
    data = ClaimData(cells_of)
    out = []
    for c in claims:
        checks, missing = c.evaluate(data)
        numbers = "; ".join(ch.text + ("" if ch.ok else " [disagrees]") for ch in checks)
        out.append(Verdict(c.id, c.paper, c.claim, c.rule, c.sweeps, _verdict_of(checks), numbers, scale,
                           list(dict.fromkeys(missing))))
    return out


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([dict(id=v.id, paper=v.paper, claim=v.claim, verdict=v.verdict, scale=v.scale,
                              numbers=v.numbers, missing="; ".join(v.missing), rule=v.rule,
                              sweeps=" ".join(v.sweeps)) for v in verdicts],
                        columns=["id", "paper", "claim", "verdict", "scale", "numbers", "missing", "rule", "sweeps"])
