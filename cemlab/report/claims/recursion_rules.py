"""The rules of the recursion claims (their entry's sweep: ``recursion_ablation``): recursion T crossed
with the step size eta.

A T=2 cell is compared with T=1 in two ways, each a condition of its own:

- *same per-step eta*: T=2 at eta=e against T=1 at eta=e (one more step of the same size);
- *same total step*: T=2 at eta=1/2 (or ``1/T``) against T=1 at eta=1 (the same total step T*eta = 1:
  the state moves about as far, in two steps instead of one).

The old single contrast "T=2 at eta=1/T vs T=1" changed the step count and the step size at once;
with T=1 run at eta=1/2 too, the two effects are told apart. ``rule_small_step_t1`` (beyond the
paper) asks whether the smaller step alone, at T=1, beats eta=1 and Llama.

Effects follow the report's one sign convention (``cemlab.paper.SIGN_CONVENTION``): the relative
change of the favoured variant against its reference, negative = the favoured variant is better.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cemlab.models.preconditioners import PRECONDITIONERS
from cemlab.paper import NEGLIGIBLE
from cemlab.report.claims.shown_effect import chosen_diffs, evidence_and_interval, shown_diffs
from cemlab.report.stats.bounds import WORST, beyond_of, paired_diffs_by_seed
from cemlab.report.stats.confirmation import seeds_text, selection_score
from cemlab.report.stats.significance import t_interval
from cemlab.report.claims.verdicts import Check, ClaimData, compare, etas_of, num, pick_cell, regime_of, rel, sizes_of
from cemlab.tracking import schema


def eta_value(eta: str, T: int) -> float:
    """The numeric per-step size of an eta label at T steps (``1/T`` -> 1/T; NaN for ``learned``)."""
    if eta in ("", None):
        return 1.0
    if eta == "1/T":
        return 1.0 / T
    try:
        return float(eta)
    except ValueError:
        return math.nan


def _recursion_cells(data: ClaimData) -> pd.DataFrame:
    return data.at_best_lr(data.sweep(0), ["family", "variant", "size", "T", "precond", "eta"])


def _cem(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[cells["family"].isin(["cem-attn", "cem-mlp"])] if not cells.empty else cells


def _at_eta(g: pd.DataFrame, T: int, step: float) -> pd.DataFrame:
    """The cells of ``g`` at ``T`` whose per-step size is ``step``."""
    sel = g[g["T"] == T]
    if sel.empty:
        return sel
    keep = [math.isclose(eta_value(str(e), T), step) for e in sel["eta"]]
    return sel[keep]


def t1_steps(g: pd.DataFrame) -> list[float]:
    return sorted({eta_value(str(e), 1) for e in g[g["T"] == 1]["eta"]} - {math.nan}, reverse=True)


def same_step(step: float) -> str:
    return f"same per-step eta={step:g}"


SAME_TOTAL = "same total step T*eta=1"


def t2_contrasts(g: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(condition, T=1 per-step eta, T=2 per-step eta) of the contrasts the cells of ``g`` allow."""
    t1 = t1_steps(g)
    t2 = sorted({eta_value(str(e), 2) for e in g[g["T"] == 2]["eta"]} - {math.nan}, reverse=True)
    out = [(same_step(s), s, s) for s in t2 if any(math.isclose(s, a) for a in t1)]
    if any(math.isclose(a, 1.0) for a in t1) and any(math.isclose(s, 0.5) for s in t2):
        out.append((SAME_TOTAL, 1.0, 0.5))
    return out


def rule_t2_beats_t1(data: ClaimData):
    """Per sublayer, size and preconditioner: T=2 against T=1 at the same per-step eta, and at the
    same total step (module docstring)."""
    missing: list[str] = []
    cem = _cem(_recursion_cells(data))
    checks = []
    if cem.empty:
        return checks, missing
    for (group, size, precond), g in cem.groupby(["family", "size", "precond"], sort=False):
        label = f"{group} {size} {precond}"
        for cond, s1, s2 in t2_contrasts(g):
            t1 = pick_cell(_at_eta(g, 1, s1), missing, f"{label} T=1 eta={s1:g}")
            t2 = pick_cell(_at_eta(g, 2, s2), missing, f"{label} T=2 eta={s2:g}")
            if t1 is not None and t2 is not None:
                checks.append(compare(data, missing, f"{label} {cond}", [t1, t2], rel,
                                      f"{label} {cond}: T=1 eta={s1:g} {num(t1['mean'])}, T=2 eta={s2:g} "
                                      f"{num(t2['mean'])}", condition=cond))
    return checks, missing


PRECOND_ORDER = PRECONDITIONERS  # registry order, simplest first: none, diag, dplr, then plugins (others: skipped)


def _precond_pairs(cem: pd.DataFrame, missing: list[str], T: int, step: float) -> list[tuple]:
    """(name, simplest, richest) preconditioner cells per (sublayer, size) at ``T`` and per-step ``step``."""
    out = []
    for (group, size), g in cem.groupby(["family", "size"], sort=False):
        sel = _at_eta(g, T, step)
        present = [p for p in PRECOND_ORDER if p in set(sel["precond"])]
        if len(present) < 2:
            continue
        lo, hi = present[0], present[-1]
        a = pick_cell(sel, missing, f"{group} {size} T={T} {lo}", precond=lo)
        b = pick_cell(sel, missing, f"{group} {size} T={T} {hi}", precond=hi)
        if a is not None and b is not None:
            out.append((f"{group} {size} T={T} {lo}->{hi}", a, b))
    return out


def rule_precond_t2_not_t1(data: ClaimData):
    """Effect of a preconditioner = relative change of the richest one present (dplr > diag > none)
    against the simplest one present, per (sublayer, size, T), averaged over sublayers and sizes per
    seed. Supported when the T=1 change is equivalent to 0 within +-NEGLIGIBLE (TOST), the T=2 change
    below -NEGLIGIBLE, and the T=2 change below the T=1 change; per eta of the T=2 cells, T=1 at the
    same per-step eta where it was run (else at eta=1)."""
    missing: list[str] = []
    cem = _cem(_recursion_cells(data))
    if cem.empty:
        return [], missing

    def change(n: int):
        # per seed: mean over the pairs of log(b / a); log metrics come as a0, b0, a1, b1, ...
        return lambda *v: sum(v[2 * i + 1] - v[2 * i] for i in range(n)) / n

    checks = []
    for eta in etas_of(cem[cem["T"] == 2]):
        s2 = eta_value(eta, 2)
        steps1 = t1_steps(cem)
        s1 = next((s for s in steps1 if math.isclose(s, s2)), 1.0)
        p1, p2 = _precond_pairs(cem, missing, 1, s1), _precond_pairs(cem, missing, 2, s2)
        if not p1 or not p2:
            continue
        c = f"eta={eta}"
        r1 = [x for _, a, b in p1 for x in (a, b)]
        r2 = [x for _, a, b in p2 for x in (a, b)]
        names1, names2 = ", ".join(n for n, _, _ in p1), ", ".join(n for n, _, _ in p2)
        n1, n2 = len(p1), len(p2)
        for check in (
            compare(data, missing, f"T=1 eta={s1:g}", r1, change(n1), f"mean change at T=1 eta={s1:g} ({names1}; "
                    f"little effect: equivalent to 0 within +-{NEGLIGIBLE:.0%})", NEGLIGIBLE, "within", c),
            compare(data, missing, f"T=2 {c}", r2, change(n2),
                    f"mean change at T=2 {c} ({names2}; clear: below -{NEGLIGIBLE:.0%})", -NEGLIGIBLE, "below", c),
            compare(data, missing, f"T=2 - T=1 {c}", r2 + r1,
                    lambda *v: change(n2)(*v[:2 * n2]) - change(n1)(*v[2 * n2:]),
                    f"change at T=2 {c} minus change at T=1 eta={s1:g}", 0.0, "below", c),
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
            c = f"eta={eta}" if eta else ""
            cem = pick_cell(t2, missing, f"{size} cem-attn T=2 {c}".strip(), **({"eta": eta} if eta else {}))
            if llama is not None and cem is not None:
                checks.append(compare(data, missing, f"{size} {c}".strip(), [llama, cem], rel,
                                      f"{size} {c}: Llama {num(llama['mean'])}, best CEM attention T=2 "
                                      f"({cem['precond']}, chosen on validation) {num(cem['mean'])}", condition=c))
    return checks, missing


def rule_small_step_t1(data: ClaimData):
    """Beyond the paper: at T=1, eta=1/2 against eta=1 (same cell otherwise), and against Llama; per
    sublayer, size and preconditioner."""
    missing: list[str] = []
    cells = _recursion_cells(data)
    cem = _cem(cells)
    checks = []
    if cem.empty:
        return checks, missing
    for (group, size, precond), g in cem.groupby(["family", "size", "precond"], sort=False):
        label = f"{group} {size} {precond} T=1"
        half = pick_cell(_at_eta(g, 1, 0.5), missing, f"{label} eta=0.5")
        one = pick_cell(_at_eta(g, 1, 1.0), missing, f"{label} eta=1")
        llama = pick_cell(cells, missing, f"{size} llama", size=size, family="llama")
        for ref, name in ((one, "eta=1"), (llama, "Llama")):
            if half is not None and ref is not None:
                checks.append(compare(data, missing, f"{label} eta=0.5 vs {name}", [ref, half], rel,
                                      f"{label}: {name} {num(ref['mean'])}, eta=0.5 {num(half['mean'])}"))
    return checks, missing


def _test_time_curves(data: ClaimData, row, g: pd.DataFrame, T: int) -> list[tuple[pd.Series, ...]]:
    """Per candidate rate of the cell ``row`` with a test-time curve up to T'=2T: its seeds' test
    perplexity at T'=T and at T'=2T and their validation metric (``val``)."""
    out = []
    for _, cand in (row.attrs.get("candidates", g).iterrows() if hasattr(row, "attrs") else []):
        at, more, val = {}, {}, {}
        for seed, t in data.seed_trials(cand).iterrows():
            curve = dict(data.history(t["run_id"], schema.TEST_PPL_AT_STEPS)) if t["run_id"] else {}
            if T in curve and 2 * T in curve:
                at[seed], more[seed] = curve[T], curve[2 * T]
                val[seed] = float(t.get("val", math.nan))
        if at:
            out.append((pd.Series(at), pd.Series(more), pd.Series(val)))
    return out


def _test_time_ratios(at: pd.Series, more: pd.Series, chance: float, margin: float) -> pd.Series:
    """Per seed, log(test perplexity at T'=2T over T'=T), by seed. An evaluation whose perplexity is
    not finite or no better than chance is a worst outcome of its arm (``divergence``), scored as the
    paired tests score any (``bounds.paired_diffs_by_seed``: the worst finished evaluation, and at least
    a loss of that arm beyond the margin); it is never dropped, so a T'=2T that blows up counts
    against the claim at its seed."""
    def logs(x: pd.Series) -> dict:
        v = x.astype(float)
        bad = ~np.isfinite(v.to_numpy()) | (math.isfinite(chance) & (v.to_numpy() >= chance))
        with np.errstate(divide="ignore", invalid="ignore"):
            return {s: WORST if b else float(np.log(y)) for s, y, b in zip(v.index, v.to_numpy(), bad)}

    by_seed = paired_diffs_by_seed([[logs(at)], [logs(more)]], (-1.0, 1.0), beyond_of(0.0, "below", margin))
    d = by_seed.get((0, 0), {})
    return pd.Series(d, dtype=float).sort_index()


def _chosen_on_selection(curves: list, ratios: list, selection: list[int]) -> tuple[list, list]:
    """A sweep with a confirmation stage: the cell's candidate rate with the lowest median validation
    on the ``selection`` seeds (``confirmation.selection_score``, as its tuned comparisons choose it),
    its ratios on the other seeds only."""
    def logs(x: pd.Series) -> dict:
        with np.errstate(divide="ignore", invalid="ignore"):
            return {s: float(np.log(v)) if v > 0 else math.inf for s, v in x.astype(float).items()}

    scores = [selection_score(logs(val), logs(at), selection)[0] for at, _, val in curves]
    ok = [j for j, s in enumerate(scores) if not math.isnan(s)]
    j = min(ok, key=lambda i: scores[i]) if ok else 0
    keep = ratios[j][~ratios[j].index.isin(list(selection))]
    at, more, val = curves[j]
    return [(at.drop(list(selection), errors="ignore"), more.drop(list(selection), errors="ignore"), val)], [keep]


def rule_test_time_recursion(data: ClaimData):
    """Beyond the paper (its sec. 5.2 leaves test-time scaling to future work): a CEM model trained
    with T=2 evaluated with 2T steps has lower test perplexity than at its training T (per seed,
    the log ratio of test/ppl_at_steps at T'=2T over T'=T; per sublayer, size, preconditioner and
    eta). The model is the cell at its tuned rate: the claim must hold at every rate of the cell
    (every choice tested); the effect shown takes the rate on the other seeds' validation. In a sweep
    with a confirmation stage the rate is the one chosen on the selection seeds, judged on the others."""
    missing: list[str] = []
    checks = []
    if data.history is None:
        return checks, missing
    cem = _cem(_recursion_cells(data))
    if cem.empty:
        return checks, missing
    t2 = cem[cem["T"] == 2]
    for (variant, size, eta), g in t2.groupby(["variant", "size", "eta"], sort=False):
        T = 2
        eta = str(eta or "")
        label = f"{variant} {size}"
        row = pick_cell(g, missing, label)
        if row is None:
            continue
        cond = f"eta={eta}" if eta else ""
        curves = _test_time_curves(data, row, g, T)
        if not curves:
            missing.append(f"{label}: no test-time curve up to T'={2 * T}")
            checks.append(Check(label, f"{label}: no test-time curve", t_interval([]), 0.0, "below", cond,
                                margin=data.margin, verdict="not enough runs"))
            continue
        chance = float(row.get("chance", math.nan))
        ratios = [_test_time_ratios(at, more, chance, data.margin) for at, more, _ in curves]
        how = f"every rate tested ({len(curves)})" if len(curves) > 1 else ""
        if data.selection_seeds and len(curves) > 1:   # the rate chosen on the selection seeds, judged on the others
            curves, ratios = _chosen_on_selection(curves, ratios, data.selection_seeds)
            how = (f"the rate with the lowest median validation on seeds {seeds_text(data.selection_seeds)}, judged "
                   f"on the other seeds")
        diffs_of = {(j,): r.to_numpy() for j, r in enumerate(ratios)}
        chosen = chosen_diffs([[(r, val) for r, (_, _, val) in zip(ratios, curves)]],
                              {(j,): dict(r.items()) for j, r in enumerate(ratios)})
        ev, iv = evidence_and_interval(diffs_of, chosen, (1.0,), (len(curves),), 0.0, "below", data.margin,
                                       every_choice=True)
        a = np.concatenate([at.to_numpy(dtype=float) for at, _, _ in curves])
        b = np.concatenate([more.to_numpy(dtype=float) for _, more, _ in curves])
        checks.append(Check(label, f"{label}: test ppl at T'={T} {num(a.mean())}, at T'={2 * T} {num(b.mean())}",
                            iv, 0.0, "below", cond, regime_of([row]), margin=data.margin,
                            evidence=ev, choice=how,
                            n_choices=(len(curves),), cell_ids=tuple(str(c) for c in g["cell"]),
                            diffs_of=diffs_of, test_coefs=(0.0,), seed_diffs=shown_diffs(chosen)))
    return checks, missing
