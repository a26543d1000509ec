"""The rule of each claim: from the cells and per-seed values of its sweeps (``ClaimData``) to the
comparisons (``Check``) that decide its verdict, and the cells it found missing.

Each claim's entry in ``cemlab.paper`` names its rule here (a ``rule_*`` function of
``ClaimData``); the tolerances the rules apply are defined there, next to the rule texts that
quote them (``SMALL_COST``, ``NEGLIGIBLE``, ``MATCH_TOL``, ``CLOSE_TOL``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from cemlab.paper import CLOSE_TOL, MATCH_TOL, NEGLIGIBLE, SMALL_COST
from cemlab.report.akima import akima_optimum
from cemlab.report.paper_figures import reuse_setting
from cemlab.report.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, t_interval
from cemlab.report.table import best_lr
from cemlab.report.verdicts import (Check, ClaimData, compare, eta_condition, etas_of, log2_ratio, num, pct,
                                    pick_cell, regime_of, rel, sizes_of)
from cemlab.tracking import schema



def _size_pairs(cells: pd.DataFrame, missing: list[str], a: tuple[str, dict], b: tuple[str, dict]):
    """(size, cell a, cell b) for every size of ``cells`` at which both cells have a finished run.
    ``a`` and ``b``: the cell's label in ``missing`` (``{size}`` is filled in) and the columns that
    pick it (``pick_cell``)."""
    for size in sizes_of(cells):
        ra = pick_cell(cells, missing, a[0].format(size=size), size=size, **a[1])
        rb = pick_cell(cells, missing, b[0].format(size=size), size=size, **b[1])
        if ra is not None and rb is not None:
            yield size, ra, rb


def _attn_pairs(data: ClaimData, missing: list[str]) -> dict[str, tuple]:
    cells = data.at_best_lr("attention_replacement", ["family", "variant", "size"])
    return {size: (llama, cem) for size, llama, cem in _size_pairs(
        cells, missing, ("attention_replacement {size} llama", dict(family="llama")),
        ("attention_replacement {size} cem-attn", dict(family="cem-attn")))}


def rule_attn_small_cost(data: ClaimData):
    missing: list[str] = []
    checks = [compare(data, missing, size, [l, c], rel,
                      f"{size}: Llama {num(l['mean'])}, CEM attention {num(c['mean'])}", SMALL_COST, "below")
              for size, (l, c) in _attn_pairs(data, missing).items()]
    return checks, missing


def _mlp_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("mlp_replacement", ["family", "variant", "size", "param_matched"])


def rule_mlp_loses_more(data: ClaimData):
    missing: list[str] = []
    attn = _attn_pairs(data, missing)
    cells = _mlp_cells(data)
    checks = []
    pairs = _size_pairs(cells, missing, ("mlp_replacement {size} llama", dict(family="llama")),
                        ("mlp_replacement {size} cem-mlp", dict(family="cem-mlp", param_matched=False)))
    for size, llama, cem in pairs:
        if size not in attn:
            missing.append(f"{size}: no attention comparison")
            continue
        la, ca = attn[size]
        checks.append(compare(
            data, missing, size, [llama, cem, la, ca], lambda lm, m, l2, a: (m / lm - 1) - (a / l2 - 1),
            f"{size}: CEM MLP {pct(cem['mean'] / llama['mean'] - 1)} vs CEM attention "
            f"{pct(ca['mean'] / la['mean'] - 1)} over Llama (effect: the difference)", 0.0, "above"))
    return checks, missing


def rule_param_matching_recovers(data: ClaimData):
    missing: list[str] = []
    cells = _mlp_cells(data)
    pairs = _size_pairs(cells, missing, ("{size} cem-mlp dim-matched", dict(family="cem-mlp", param_matched=False)),
                        ("{size} cem-mlp param-matched", dict(family="cem-mlp", param_matched=True)))
    checks = [compare(data, missing, size, [dim, par], rel,
                      f"{size}: dim-matched {num(dim['mean'])}, param-matched {num(par['mean'])}")
              for size, dim, par in pairs]
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
        t1 = pick_cell(g, missing, f"{label} T=1", T=1)
        for eta in etas_of(g[g["T"] == 2]):
            c = eta_condition(eta)
            t2 = pick_cell(g[g["T"] == 2], missing, f"{label} T=2 {c}", **({"eta": eta} if eta else {}))
            if t1 is not None and t2 is not None:
                checks.append(compare(data, missing, f"{label} {c}".strip(), [t1, t2], rel,
                                      f"{label} {c}: T=1 {num(t1['mean'])}, T=2 {num(t2['mean'])}", condition=c))
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
            a = pick_cell(g, missing, f"{group} {size} T={T} {lo}", precond=lo)
            b = pick_cell(g, missing, f"{group} {size} T={T} {hi}", precond=hi)
            if a is not None and b is not None:
                out.append((f"{group} {size} T={T} {lo}->{hi}", a, b))
        return out

    def gain(n: int):
        # per seed: mean over the pairs of (a - b) / a; values come as a0, b0, a1, b1, ...
        return lambda *v: np.mean([(v[2 * i] - v[2 * i + 1]) / v[2 * i] for i in range(n)], axis=0)

    checks = []
    p1 = pairs(1, "")
    for eta in etas_of(cem[cem["T"] == 2]):
        p2 = pairs(2, eta)
        if not p1 or not p2:
            continue
        c = eta_condition(eta)
        r1 = [x for _, a, b in p1 for x in (a, b)]
        r2 = [x for _, a, b in p2 for x in (a, b)]
        names1, names2 = ", ".join(n for n, _, _ in p1), ", ".join(n for n, _, _ in p2)
        for check in (
            compare(data, missing, "T=1", r1, gain(len(p1)), f"mean gain at T=1 ({names1}; little effect: within "
                    f"+-{NEGLIGIBLE:.0%})", NEGLIGIBLE, "within", c),
            compare(data, missing, f"T=2 {c}".strip(), r2, gain(len(p2)),
                    f"mean gain at T=2 {c} ({names2}; clear: above {NEGLIGIBLE:.0%})", NEGLIGIBLE, "above", c),
            compare(data, missing, f"T=2 - T=1 {c}".strip(), r2 + r1,
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
    for size in sizes_of(cells):
        llama = pick_cell(cells, missing, f"{size} llama", size=size, family="llama")
        t2 = cells[(cells["size"] == size) & (cells["family"] == "cem-attn") & (cells["T"] == 2)]
        for eta in etas_of(t2):
            c = eta_condition(eta)
            cem = pick_cell(t2, missing, f"{size} cem-attn T=2 {c}".strip(), **({"eta": eta} if eta else {}))
            if llama is not None and cem is not None:
                checks.append(compare(data, missing, f"{size} {c}".strip(), [llama, cem], rel,
                                      f"{size} {c}: Llama {num(llama['mean'])}, best CEM attention T=2 "
                                      f"({cem['precond']}) {num(cem['mean'])}", condition=c))
    return checks, missing


def _seed_optima(data: ClaimData, missing: list[str]) -> dict[str, dict[str, dict]]:
    """Akima optimum of each seed's learning-rate curve, per size and family (llama / cem)."""
    cells = data.cells("lr_sweep")
    trials = data.trials("lr_sweep")
    out: dict[str, dict[str, dict]] = {}
    for size in sizes_of(cells):
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


def _optimum_checks(data: ClaimData, f: Callable, text: Callable, tol: float, side: str, fmt=pct):
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
        ol = [fam["llama"][s][0] for s in seeds]
        oc = [fam["cem"][s][0] for s in seeds]
        iv = t_interval([f(a, b) for a, b in zip(ol, oc)])
        ref = fam["llama"][seeds[0]][3]
        check = Check(size, text(size, ol, oc), iv, tol, side, "", regime_of([ref]), fmt=fmt)
        found.append((size, fam, check, seeds, ol, oc))
    return found, missing


def _optima_text(size: str, ol: list, oc: list) -> str:
    edge = "" if all(o.bracketed for o in ol + oc) else " (an optimum is at the grid's edge)"
    return (f"{size}: Akima optima per seed: Llama {', '.join(num(o.value) for o in ol)}, "
            f"CEM {', '.join(num(o.value) for o in oc)}{edge}")


def rule_full_cem_matches_llama(data: ClaimData):
    found, missing = _optimum_checks(data, lambda a, b: b.value / a.value - 1, _optima_text, MATCH_TOL, "below")
    return [check for _, _, check, *_ in found], missing


def _optimal_lr_text(size: str, ol: list, oc: list) -> str:
    def f(o):
        return f"{o.lr:.3g}{'' if o.bracketed else ' (edge)'}"
    return f"{size}: optimal lr per seed Llama {', '.join(map(f, ol))}; CEM {', '.join(map(f, oc))}"


def rule_full_cem_higher_lr(data: ClaimData):
    """CEM's optimal lr is higher than Llama's: per seed, log2(lr_CEM / lr_Llama) > 0. An optimum at
    the top (bottom) edge of the grid means the true optimum is at or above (below) it: a verdict
    stands only if every edge pushes the same way as the verdict, otherwise it is inconclusive."""
    found, missing = _optimum_checks(data, lambda a, b: math.log2(b.lr / a.lr), _optimal_lr_text, 0.0, "above",
                                     log2_ratio)
    checks = []
    for size, fam, check, seeds, ol, oc in found:
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
    pairs = _size_pairs(cells, missing, ("{size} llama", dict(family="llama")), ("{size} cem", dict(family="cem")))
    checks = [compare(data, missing, size, [llama, cem], rel,
                      f"{size}: Llama {num(llama['mean'])}, full CEM {num(cem['mean'])}", MATCH_TOL)
              for size, llama, cem in pairs]
    return checks, missing


def _kq(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr("kq_diagonal", ["family", "variant", "size", "kq_diagonal"])


def rule_kq_matters(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    checks = []
    for size in sizes_of(cells):
        none = pick_cell(cells, missing, f"{size} no diagonal", size=size, kq_diagonal="none")
        diag = [r for r in (pick_cell(cells, missing, f"{size} shared", size=size, kq_diagonal="shared"),
                            pick_cell(cells, missing, f"{size} per-head", size=size, kq_diagonal="per_head"))
                if r is not None]
        if none is not None and diag:
            best = min(diag, key=lambda r: r["mean"])
            checks.append(compare(data, missing, size, [best, none], rel,
                                  f"{size}: none {num(none['mean'])}, best diagonal ({best['kq_diagonal']}) "
                                  f"{num(best['mean'])}", NEGLIGIBLE, "above"))
    return checks, missing


def rule_shared_close(data: ClaimData):
    missing: list[str] = []
    cells = _kq(data)
    pairs = _size_pairs(cells, missing, ("{size} shared", dict(kq_diagonal="shared")),
                        ("{size} per-head", dict(kq_diagonal="per_head")))
    checks = [compare(data, missing, size, [per_head, shared], rel,
                      f"{size}: shared {num(shared['mean'])}, per-head {num(per_head['mean'])}", CLOSE_TOL)
              for size, shared, per_head in pairs]
    return checks, missing


def _reuse_rule(sweep: str, attention: bool):
    """Per size and eta: plain reuse gains at most NEGLIGIBLE from T=1 to T=2 (gain = relative drop
    of perplexity, per seed), each CEM setting gains more than 0 and more than plain reuse."""
    def rule(data: ClaimData):
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
                                 f"{size}: plain reuse T=1 {num(r1['mean'])}, T=2 {num(r2['mean'])} (gain)",
                                 NEGLIGIBLE, "below", cond)
                    if ch is not None:
                        checks.append(ch)
                for setting, g in cem.groupby("setting", sort=False):
                    t1 = pick_cell(g, missing, f"{size} {setting} T=1", T=1)
                    g2 = g[g["T"] == 2]
                    t2 = pick_cell(g2[g2["eta"] == eta] if eta else g2, missing, f"{size} {setting} T=2 {cond}".strip())
                    if t1 is None or t2 is None:
                        continue
                    found = [compare(data, missing, f"{size} {setting} {cond}".strip(), [t1, t2], drop,
                                     f"{size} {setting} {cond}: T=1 {num(t1['mean'])}, T=2 {num(t2['mean'])} (gain)",
                                     0.0, "above", cond)]
                    if r1 is not None and r2 is not None:
                        found.append(compare(data, missing, f"{size} {setting} vs reuse {cond}".strip(),
                                             [t1, t2, r1, r2], lambda a, b, ra, rb: drop(a, b) - drop(ra, rb),
                                             f"{size} {setting} {cond}: gain minus plain reuse's gain", 0.0,
                                             "above", cond))
                    checks += [ch for ch in found if ch is not None]
        return checks, missing
    return rule


rule_reuse_vs_recursion_mlp = _reuse_rule("reuse_vs_recursion_mlp", attention=False)
rule_reuse_vs_recursion_attention = _reuse_rule("reuse_vs_recursion_attention", attention=True)


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
            a = pick_cell(by_t[1], missing, f"{kernel} T=1")
            b = pick_cell(by_t[2], missing, f"{kernel} T=2")
            if a is not None and b is not None:
                checks.append(compare(data, missing, kernel, [a, b], rel,
                                      f"{kernel}: RMSE T=1 {num(a['mean'])}, T=2 {num(b['mean'])}"))
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
        rows = {T: pick_cell(by_t[T], missing, f"{kernel} T={T}") for T in Ts}
        for a, b in zip(Ts, Ts[1:]):
            if rows[a] is not None and rows[b] is not None:
                ch = compare(data, missing, f"{kernel} T={a}->{b}", [rows[a], rows[b]], rel,
                             f"{kernel} T={a}->{b}: {num(rows[a]['mean'])} -> {num(rows[b]['mean'])}", 0.0, "above")
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
        checks.append(Check(label, f"{label}: test ppl at T'={T} {num(a.mean())}, at T'={2 * T} {num(b.mean())}",
                            t_interval(b / a - 1), 0.0, "below", eta_condition(eta), regime_of([row])))
    return checks, missing
