"""The rule of each claim: from the cells and per-seed values of its sweeps (``ClaimData``) to the
comparisons (``Check``) that decide its verdict, and the cells it found missing.

Each claim's entry in ``cemlab.paper`` names its rule here (a ``rule_*`` function of
``ClaimData``) and the sweeps it reads, which the rule takes from ``ClaimData.sweep(i)`` (its own
sweep first) rather than by name; the tolerances the rules apply are defined there, next to the rule texts that
quote them (``SMALL_COST``, ``NEGLIGIBLE``, ``MATCH_TOL``, ``CLOSE_TOL``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.paper import CLOSE_TOL, MATCH_TOL, NEGLIGIBLE, SMALL_COST
from cemlab.report.stats.akima import akima_optimum, chosen_on_validation, read_at
from cemlab.report.inputs.table import reuse_setting
from cemlab.report.claims.recursion_rules import eta_value
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from cemlab.report.stats.decision import Evidence
from cemlab.report.stats.divergence import at_chance
from cemlab.report.claims.verdicts import Check, ClaimData, check_of_diffs, compare, eta_condition, etas_of, log2_ratio, \
    num, pct, pick_cell, regime_of, rel, sizes_of


def _size_pairs(cells: pd.DataFrame, missing: list[str], a: tuple[str, dict], b: tuple[str, dict]):
    """(size, cell a, cell b) for every size of ``cells`` at which both cells have a finished run.
    ``a`` and ``b``: the cell's label in ``missing`` (``{size}`` is filled in) and the columns that
    pick it (``pick_cell``)."""
    for size in sizes_of(cells):
        ra = pick_cell(cells, missing, a[0].format(size=size), size=size, **a[1])
        rb = pick_cell(cells, missing, b[0].format(size=size), size=size, **b[1])
        if ra is not None and rb is not None:
            yield size, ra, rb


def _attn_pairs(data: ClaimData, missing: list[str], sweep: str) -> dict[str, tuple]:
    """Llama and CEM attention cells per size of the attention-replacement sweep ``sweep``."""
    cells = data.at_best_lr(sweep, ["family", "variant", "size"])
    return {size: (llama, cem) for size, llama, cem in _size_pairs(
        cells, missing, (sweep + " {size} llama", dict(family="llama")),
        (sweep + " {size} cem-attn", dict(family="cem-attn")))}


def rule_attn_small_cost(data: ClaimData):
    missing: list[str] = []
    checks = [compare(data, missing, size, [l, c], rel,
                      f"{size}: Llama {num(l['mean'])}, CEM attention {num(c['mean'])}", SMALL_COST, "below")
              for size, (l, c) in _attn_pairs(data, missing, data.sweep(0)).items()]
    return checks, missing


def _mlp_cells(data: ClaimData) -> pd.DataFrame:
    """The MLP-replacement cells: the claim's own sweep."""
    return data.at_best_lr(data.sweep(0), ["family", "variant", "size", "param_matched"])


def rule_mlp_loses_more(data: ClaimData):
    """The MLP sweep (the entry's first) against the attention sweep (its second)."""
    missing: list[str] = []
    attn = _attn_pairs(data, missing, data.sweep(1))
    cells = _mlp_cells(data)
    checks = []
    mlp = data.sweep(0)
    pairs = _size_pairs(cells, missing, (mlp + " {size} llama", dict(family="llama")),
                        (mlp + " {size} cem-mlp", dict(family="cem-mlp", param_matched=False)))
    for size, llama, cem in pairs:
        if size not in attn:
            missing.append(f"{size}: no attention comparison")
            continue
        la, ca = attn[size]
        checks.append(compare(
            data, missing, size, [llama, cem, la, ca], lambda lm, m, l2, a: (a - l2) - (m - lm),
            f"{size}: CEM attention {pct(_log_ratio(ca, la))} vs CEM MLP {pct(_log_ratio(cem, llama))} over Llama "
            f"(effect: attention's log ratio minus the MLP's)", 0.0, "below"))
    return checks, missing


def _log_ratio(b, a) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.log(float(b["mean"]) / float(a["mean"])))


def rule_param_matching_recovers(data: ClaimData):
    missing: list[str] = []
    cells = _mlp_cells(data)
    pairs = _size_pairs(cells, missing, ("{size} cem-mlp dim-matched", dict(family="cem-mlp", param_matched=False)),
                        ("{size} cem-mlp param-matched", dict(family="cem-mlp", param_matched=True)))
    checks = [compare(data, missing, size, [dim, par], rel,
                      f"{size}: dim-matched {num(dim['mean'])}, param-matched {num(par['mean'])}")
              for size, dim, par in pairs]
    return checks, missing


def _seed_optima(data: ClaimData, missing: list[str]) -> dict[str, dict[str, dict]]:
    """Per size and family (llama / cem), per seed: the Akima optimum of the seed's own validation
    curve (its optimal rate, ``own``) and the seed's test curve read at the rate chosen on the
    *other* seeds' mean validation curve (``value``: chosen without the seed it judges). A diverged
    run is a point of its seed's curve at the metric's chance value (``divergence.at_chance``; a non-finite or exploded result likewise), in either
    family alike: a rate where CEM diverges is no optimum of CEM's."""
    sweep = data.sweep(0)
    cells = data.cells(sweep)
    trials = at_chance(data.trials(sweep))   # a diverged run is a point of its curve, at the chance value
    out: dict[str, dict[str, dict]] = {}
    for size in sizes_of(cells):
        for family in ("llama", "cem"):
            g = cells[(cells["size"] == size) & (cells["family"] == family)]
            if g.empty:
                missing.append(f"{sweep} {size} {family}: not in the grid")
                continue
            t = trials[trials["cell"].isin(set(g["cell"]))] if len(trials) else trials
            if len(t):
                t = t.assign(val=t["val"] if "val" in t else math.nan)
                t = t[np.isfinite(t["value"].to_numpy(dtype=float))]
            per_seed = {}
            for seed, s in t.groupby("seed", sort=True) if len(t) else []:
                own = chosen_on_validation(s["lr"], s["val"], s["value"])
                rest = t[t["seed"] != seed]
                key = "val" if np.isfinite(rest["val"].to_numpy(dtype=float)).any() else "value"
                other = akima_optimum(rest["lr"], rest[key]) if len(rest) else own
                value = read_at(s["lr"], s["value"], other.lr)
                if own.n_points:
                    per_seed[int(seed)] = dict(own=own, value=value, lo=float(g["lr"].min()), hi=float(g["lr"].max()),
                                               row=g.iloc[0])
            if not per_seed:
                missing.append(f"{sweep} {size} {family}: no finished run")
                continue
            out.setdefault(size, {})[family] = per_seed
    return out


def _optimum_checks(data: ClaimData, f: Callable, text: Callable, tol: float, side: str, fmt=pct,
                    discrete: bool = False):
    """Per size with both families' per-seed optima (``_seed_optima``): the comparison of
    ``f(llama optimum, cem optimum)`` over the seeds where both have one, described by
    ``text(size, llama optima, cem optima)``, as (size, family optima, Check, seeds, llama optima,
    cem optima); and what was missing."""
    missing: list[str] = []
    found = []
    for size, fam in _seed_optima(data, missing).items():
        if len(fam) < 2:
            continue
        seeds = sorted(set(fam["llama"]) & set(fam["cem"]))
        if not seeds:
            missing.append(f"{size}: no seed with both optima")
            continue
        ol = [fam["llama"][s] for s in seeds]
        oc = [fam["cem"][s] for s in seeds]
        diffs = [f(a, b) for a, b in zip(ol, oc)]
        t = math.log1p(tol) if fmt is pct else tol
        check = check_of_diffs(size, text(size, ol, oc), diffs, t, side, "", regime_of([ol[0]["row"]]), fmt,
                               data.margin, discrete)
        found.append((size, fam, check, seeds, ol, oc))
    return found, missing


def _optima_text(size: str, ol: list, oc: list) -> str:
    edge = "" if all(o["own"].bracketed for o in ol + oc) else " (an optimum is at the grid's edge)"
    return (f"{size}: test perplexity at the rate chosen on the other seeds' validation (Akima), per seed: Llama "
            f"{', '.join(num(o['value']) for o in ol)}, CEM {', '.join(num(o['value']) for o in oc)}{edge}")


def rule_full_cem_matches_llama(data: ClaimData):
    found, missing = _optimum_checks(data, lambda a, b: math.log(b["value"] / a["value"]), _optima_text, MATCH_TOL,
                                     "below")
    return [check for _, _, check, *_ in found], missing


def _optimal_lr_text(size: str, ol: list, oc: list) -> str:
    def f(o):
        return f"{o['own'].lr:.3g}{'' if o['own'].bracketed else ' (edge)'}"
    return f"{size}: optimal lr per seed Llama {', '.join(map(f, ol))}; CEM {', '.join(map(f, oc))}"


def rule_full_cem_higher_lr(data: ClaimData):
    """CEM's optimal lr is higher than Llama's: per seed, log2(lr_CEM / lr_Llama) > 0, judged by an
    exact sign test (optima on a grid take few values; equal optima are ties). An optimum at the
    top (bottom) edge of the grid means the true optimum is at or above (below) it: a verdict stands
    only if every edge pushes the same way as the verdict, otherwise it is inconclusive."""
    found, missing = _optimum_checks(data, lambda a, b: math.log2(b["own"].lr / a["own"].lr), _optimal_lr_text,
                                     0.0, "above", log2_ratio, discrete=True)
    checks = []
    for size, fam, check, seeds, ol, oc in found:
        lo, hi = ol[0]["lo"], ol[0]["hi"]

        def push(o, cem: bool) -> int:  # +1: the true value favours "higher", -1: "lower", 0: none
            if o.bracketed:
                return 0
            up = math.isclose(o.lr, hi, rel_tol=1e-9)
            down = math.isclose(o.lr, lo, rel_tol=1e-9)
            return (1 if up else -1 if down else 0) * (1 if cem else -1)
        pushes = {push(o["own"], False) for o in ol} | {push(o["own"], True) for o in oc}
        if (check.verdict == SUPPORTED and -1 in pushes) or (check.verdict == CONTRADICTED and 1 in pushes):
            check.evidence = Evidence()  # no test decides it
            check.verdict = INCONCLUSIVE
            check.text += " (an optimum at the grid's edge leaves it open)"
        checks.append(check)
    return checks, missing


def rule_256m(data: ClaimData):
    missing: list[str] = []
    cells = data.at_best_lr(data.sweep(0), ["family", "variant", "size"])
    pairs = _size_pairs(cells, missing, ("{size} llama", dict(family="llama")), ("{size} cem", dict(family="cem")))
    checks = [compare(data, missing, size, [llama, cem], rel,
                      f"{size}: Llama {num(llama['mean'])}, full CEM {num(cem['mean'])}", MATCH_TOL)
              for size, llama, cem in pairs]
    return checks, missing


def _kq(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr(data.sweep(0), ["family", "variant", "size", "kq_diagonal"])


def rule_kq_matters(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    pairs = _size_pairs(cells, missing, ("{size} no diagonal", dict(kq_diagonal="none")),
                        ("{size} diagonal", dict(kq_diagonal=["shared", "per_head"])))
    checks = [compare(data, missing, size, [none, best], rel,
                      f"{size}: none {num(none['mean'])}, best diagonal (every diagonal variant tested; "
                      f"shown: {best.get('kq_diagonal', '')}) {num(best['mean'])}", -NEGLIGIBLE, "below")
              for size, none, best in pairs]
    return checks, missing


def rule_shared_close(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    pairs = _size_pairs(cells, missing, ("{size} shared", dict(kq_diagonal="shared")),
                        ("{size} per-head", dict(kq_diagonal="per_head")))
    checks = [compare(data, missing, size, [per_head, shared], rel,
                      f"{size}: shared {num(shared['mean'])}, per-head {num(per_head['mean'])}", CLOSE_TOL, "within")
              for size, shared, per_head in pairs]
    return checks, missing


def _reuse_rule(attention: bool):
    """Per size and eta, relative change T=2 vs T=1 per seed: plain reuse's above -NEGLIGIBLE (it
    gains little or hurts), each CEM setting's below 0 and below plain reuse's. The CEM T=1 cell is
    the one at the T=2 cell's per-step eta where it was run, else at eta=1."""
    def rule(data: ClaimData):
        missing: list[str] = []
        cells = data.at_best_lr(data.sweep(0))
        if cells.empty:
            return [], missing
        cells = cells.copy()
        cells["setting"] = [reuse_setting(r, attention) for _, r in cells.iterrows()]
        checks = []
        drop = rel
        for size in sizes_of(cells):
            c = cells[cells["size"] == size]
            reuse = c[c["setting"] == "plain reuse"]
            r1 = pick_cell(reuse, missing, f"{size} plain reuse T=1", T=1)
            r2 = pick_cell(reuse, missing, f"{size} plain reuse T=2", T=2)
            cem = c[c["setting"] != "plain reuse"]
            for eta in etas_of(cem[cem["T"] == 2]):
                cond = eta_condition(eta)
                if r1 is not None and r2 is not None:
                    ch = compare(data, missing, f"{size} plain reuse", [r1, r2], drop,
                                 f"{size}: plain reuse T=1 {num(r1['mean'])}, T=2 {num(r2['mean'])}",
                                 -NEGLIGIBLE, "above", cond)
                    if ch is not None:
                        checks.append(ch)
                for setting, g in cem.groupby("setting", sort=False):
                    g1 = g[g["T"] == 1]
                    same = [e for e in g1["eta"] if math.isclose(eta_value(str(e), 1), eta_value(eta, 2))]
                    t1 = pick_cell(g1[g1["eta"] == (same[0] if same else g1["eta"].iloc[0] if len(g1) else "")],
                                   missing, f"{size} {setting} T=1")
                    g2 = g[g["T"] == 2]
                    t2 = pick_cell(g2[g2["eta"] == eta] if eta else g2, missing, f"{size} {setting} T=2 {cond}".strip())
                    if t1 is None or t2 is None:
                        continue
                    found = [compare(data, missing, f"{size} {setting} {cond}".strip(), [t1, t2], drop,
                                     f"{size} {setting} {cond}: T=1 {num(t1['mean'])}, T=2 {num(t2['mean'])}",
                                     0.0, "below", cond)]
                    if r1 is not None and r2 is not None:
                        found.append(compare(data, missing, f"{size} {setting} vs reuse {cond}".strip(),
                                             [t1, t2, r1, r2], lambda a, b, ra, rb: (b - a) - (rb - ra),
                                             f"{size} {setting} {cond}: change minus plain reuse's change", 0.0,
                                             "below", cond))
                    checks += found
        return checks, missing
    return rule


rule_reuse_vs_recursion_mlp = _reuse_rule(attention=False)
rule_reuse_vs_recursion_attention = _reuse_rule(attention=True)


def _gp_cells(data: ClaimData) -> dict[str, dict[int, object]]:
    cells = data.cells(data.sweep(0))
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
            a = pick_cell(by_t[1], missing, f"{kernel} T=1")
            b = pick_cell(by_t[2], missing, f"{kernel} T=2")
            if a is not None and b is not None:
                checks.append(compare(data, missing, kernel, [a, b], rel,
                                      f"{kernel}: RMSE T=1 {num(a['mean'])}, T=2 {num(b['mean'])}"))
    return checks, missing


def rule_gp_not_monotonic(data: ClaimData):
    """Every step T -> next larger T of every kernel with at least three T values is a comparison
    (effect: the smaller T's RMSE relative to the larger T's); the entry's combine rule "any" makes the
    verdict: supported when one rise is supported, contradicted when every step is contradicted."""
    missing: list[str] = []
    pairs: list[Check] = []
    for kernel, by_t in _gp_cells(data).items():
        Ts = sorted(by_t)
        if len(Ts) < 3:
            continue
        rows = {T: pick_cell(by_t[T], missing, f"{kernel} T={T}") for T in Ts}
        for a, b in zip(Ts, Ts[1:]):
            if rows[a] is not None and rows[b] is not None:
                ch = compare(data, missing, f"{kernel} T={a}->{b}", [rows[b], rows[a]], rel,
                             f"{kernel} T={a}->{b}: {num(rows[a]['mean'])} -> {num(rows[b]['mean'])} (effect: T={a} "
                             f"relative to T={b})", 0.0, "below")
                if ch is not None:
                    pairs.append(ch)
    return pairs, missing
