"""The ladder of a sweep file (rungs of training length) before anything runs, and the ladder's
verdicts on constructed data: the sweep-file section and its refusals, the rungs as scales (one
width, tokens = rung x the matched Llama's parameters, counted here by hand), ``cemlab plan
--ladder``, the trend and the ladder verdict (stable, flip, trend, open), and the trend's error rate
by simulation of the decision code itself."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from cemlab.report.stats.trend import CHANGES, FLIPS, HOLDS, OPEN, ladder_verdict, trend
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import SweepError
from cemlab.tracking import schema
from sweep_support import RECURSION_VARIANTS, local_sweeps

BASE = """\
figure: "test: ladder"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3, 4.0e-3], seed: [0, 1]}
""" + RECURSION_VARIANTS + """\
    axes: {T: [1, 2], eta: [1, 0.5]}
seeding: {max_seeds: {smoke: 3}, batch: 1}
"""


def _sweep(tmp_path, monkeypatch, ladder: str, name: str = "lad"):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, **{name: BASE + ladder})))
    return load_sweep(name)


def _llama_params(d: int, layers: int, d_mlp: int, vocab: int) -> int:
    """Llama's parameters by hand: untied embedding and head, per layer 4 d^2 (q, k, v, o) + 3 d d_mlp
    (SwiGLU) + 2 d (norms), a final norm."""
    return 2 * vocab * d + layers * (4 * d * d + 3 * d * d_mlp + 2 * d) + d


WORKSTATION = """\
ladder:
  scale: workstation
  size: 86m
  rungs: [0.3125, 1.25, 5, 20]
  axes: {eta: [1]}
  set: {train.batch_size: 16, train.micro_batch_size: 16}
  resources: {workers: 1, cpus_per_worker: 1, gpus_per_worker: 0}
  max_seeds: {0.3125: 4}
  exclude: {20: [{T: 2}]}
"""


def test_rungs_are_scales_of_one_width_differing_in_tokens_only(tmp_path, monkeypatch):
    spec = _sweep(tmp_path, monkeypatch, WORKSTATION)
    names = spec.rungs()
    assert list(names.values()) == [0.3125, 1.25, 5, 20]
    assert list(names) == ["workstation-tpp0.3125", "workstation-tpp1.25", "workstation-tpp5", "workstation-tpp20"]
    params = _llama_params(64, 2, 172, 1024)  # scales.yaml: workstation 86m, vocab 1024
    grids = {name: spec.expand(name) for name in names}
    for name, r in names.items():
        trials = grids[name]
        tokens = {t.config.train.tokens for t in trials}
        assert tokens == {"chinchilla" if r == 20 else round(r * params)}
        assert {t.config.model.d_model for t in trials} == {64} and {t.size for t in trials} == {"86m"}
        assert {t.config.train.batch_size for t in trials} == {16} and {t.resources.cpus for t in trials} == {1}
        assert {t.config.tracking.tags[schema.RUNG] for t in trials} == {f"{r:g}"}
        assert {t.config.tracking.tags[schema.SCALE] for t in trials} == {name}
        assert {t.axes["eta"] for t in trials if "eta" in t.axes} == {1}  # ladder.axes
    # everything but the budget is the same config: the hashes differ only through train.tokens
    strip = lambda t: json.dumps({**t.config.model_dump(mode="json", exclude={"tracking"}),   # noqa: E731
                                  "train": {**t.config.train.model_dump(mode="json"), "tokens": 0}}, sort_keys=True)
    first = {t.trial_id: strip(t) for t in grids["workstation-tpp5"]}
    assert all(first[t.trial_id] == strip(t) for t in grids["workstation-tpp0.3125"])
    assert len({t.config_hash for g in grids.values() for t in g}) == sum(len(g) for g in grids.values())
    # the top rung leaves T=2 out; the cheapest plans its own seed budget, the others one look
    assert {t.axes.get("T") for t in grids["workstation-tpp20"]} == {None, 1}
    assert len(grids["workstation-tpp5"]) == 3 * 2 * 2 and len(grids["workstation-tpp20"]) == 2 * 2 * 2
    assert spec.looks("workstation-tpp0.3125", grids["workstation-tpp0.3125"]) == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert spec.looks("workstation-tpp5", grids["workstation-tpp5"]) == [[0, 1]]
    from cemlab.train.plan import make_plan

    assert make_plan(grids["workstation-tpp20"][0].config).budget == 20 * params


@pytest.mark.parametrize("ladder, key, fix", [
    ("rungs: [1, 1]", "rungs", "must increase"),
    ("rungs: [2, 1]", "rungs", "must increase"),
    ("rungs: [0, 1]", "rungs", "above 0"),
    ("rungs: [-1, 1]", "rungs", "above 0"),
    ("rungs: [1]", "rungs", "at least 2"),
    ("rungs: [1, 4]\n  size: 999m", "size", "not a size of scale"),
    ("rungs: [1, 4]\n  max_seeds: {2: 4}", "max_seeds.2", "not a rung"),
    ("rungs: [1, 4]\n  exclude: {4: [{Q: 2}]}", "exclude.4[0].Q", "not an axis"),
    ("rungs: [1, 4]\n  exclude: {4: [{T: 3}]}", "exclude.4[0].T", "not a value"),
    ("rungs: [1, 4]\n  set: {train.tokens: 5}", "train.tokens", "sets this itself"),
    ("rungs: [1, 4]\n  axes: {size: [108m]}", "axes.size", "ladder.size"),
])
def test_a_bad_ladder_is_refused_naming_the_key(tmp_path, monkeypatch, ladder, key, fix):
    text = "ladder:\n  scale: smoke\n  size: 86m\n  " + ladder + "\n"
    if "size: 999m" in ladder:
        text = "ladder:\n  scale: smoke\n  " + ladder.replace("\n  size: 999m", "") + "\n  size: 999m\n"
    with pytest.raises(SweepError) as e:
        _sweep(tmp_path, monkeypatch, text)
    assert "ladder" in str(e.value) and key in str(e.value) and fix in str(e.value), str(e.value)


def test_a_rung_the_ladder_lacks_is_refused_naming_the_rungs(tmp_path, monkeypatch):
    from cemlab.sweeps.ladder_plan import rung_scales_to_run

    spec = _sweep(tmp_path, monkeypatch, "ladder: {scale: smoke, size: 86m, rungs: [0.125, 0.5]}\n")
    assert rung_scales_to_run(spec, "0.5") == ["smoke-tpp0.5"] == rung_scales_to_run(spec, "smoke-tpp0.5")
    with pytest.raises(SweepError, match=r"--rung '3'.*0\.125, 0\.5"):
        rung_scales_to_run(spec, "3")


def test_the_plan_refuses_a_rung_too_short_for_its_warm_up_or_too_long_for_its_corpus(tmp_path, monkeypatch,
                                                                                       runs_dir):
    from cemlab.sweeps.ladder_plan import MAX_EPOCHS, plan_ladder

    short = _sweep(tmp_path, monkeypatch, "ladder: {scale: smoke, size: 86m, rungs: [0.01, 0.5]}\n", "short")
    with pytest.raises(SweepError, match=r"ladder.rungs: 0.01 .* (\d+) optimizer steps.*warm-up"):
        plan_ladder(short, read_store=False, corpus=False)
    long = _sweep(tmp_path, monkeypatch, "ladder: {scale: smoke, size: 86m, rungs: [0.5, 400]}\n", "long")
    notes = []  # what the plan says before it tokenises, and whether the token store had the corpus then
    store = runs_dir / "cache" / "data" / "tokens"
    with pytest.raises(SweepError) as e:
        plan_ladder(long, read_store=False, note=lambda line: notes.append((line, any(store.glob("*/*")))))
    assert notes == [(f"tokenising the corpus once, into {runs_dir / 'cache'}/data, to count the rungs' epochs", False)]
    msg = str(e.value)
    assert "ladder.rungs: 400" in msg and f"at most {MAX_EPOCHS:g}" in msg
    epochs = float(msg.split(" epochs of")[0].split(", ")[-1])
    train_tokens = int(msg.split("corpus's ")[1].split(" ")[0])
    tokens = int(msg.split("asks for ")[1].split(" ")[0])
    assert epochs == pytest.approx(tokens / train_tokens, rel=1e-2) and epochs > MAX_EPOCHS
    ok = plan_ladder(_sweep(tmp_path, monkeypatch, "ladder: {scale: smoke, size: 86m, rungs: [0.125, 0.5]}\n", "ok"),
                     read_store=False, note=lambda line: notes.append((line, True)))
    assert len(notes) == 1  # tokenised once: this plan reads the store
    a, b = ok.rungs
    per_step = b.tokens // b.steps
    assert abs(b.tokens - 4 * a.tokens) <= 4 * per_step and b.steps > a.steps >= 1 / 0.05 / 2
    assert a.epochs == pytest.approx(a.tokens / train_tokens) and b.max_trials >= b.trials == 2 * 2 * 5


def test_a_rungs_plan_is_the_plan_of_its_scale(tmp_path, monkeypatch, runs_dir):
    """``plan_ladder`` composes ``plan_sweep``: each rung's plan is the sweep's plan at the rung's
    scale, its looks' levels, notes, GPU time and paper-scale estimates included, with or without
    the store (none here: every trial todo, the store named); ``--rung`` plans the one rung."""
    from cemlab.sweeps.ladder_plan import plan_ladder
    from cemlab.sweeps.plan import plan_sweep

    spec = _sweep(tmp_path, monkeypatch,
                  "ladder: {scale: smoke, size: 86m, rungs: [0.125, 0.5], max_seeds: {0.125: 3}}\n")
    for read_store in (False, True):
        lp = plan_ladder(spec, read_store=read_store, corpus=False, mfu=0.3)
        assert [r.scale for r in lp.rungs] == list(spec.rungs())
        for r in lp.rungs:
            assert r.plan == plan_sweep(spec, r.scale, mfu=0.3, read_store=read_store)
        cheap = lp.rungs[0].plan
        assert cheap.looks == [[0, 1], [0, 1, 2]] and cheap.alphas == pytest.approx([0.025, 0.025])
        assert cheap.paper_flops > 0 and cheap.mfu == 0.3 and (cheap.store is not None) == read_store
    one = plan_ladder(spec, rung="0.5", read_store=False, corpus=False).rungs
    assert [r.scale for r in one] == ["smoke-tpp0.5"] and one[0].plan == plan_sweep(spec, "smoke-tpp0.5",
                                                                                    read_store=False)


def test_the_ladder_plan_at_80_columns_prints_its_summary_first_and_every_number_whole(tmp_path, monkeypatch):
    """``cemlab plan NAME --ladder`` on an 80-column terminal: the whole ladder's summary, then a row
    per rung and below the seeded rung its most trials, FLOPs and time, every number whole (at
    the widest: every trial done, epochs known)."""
    import io

    from rich.console import Console

    from cemlab.sweeps.cli.plan import _print_ladder, _sci, _si
    from cemlab.sweeps.ladder_plan import plan_ladder
    from cemlab.train.plan import duration

    lp = plan_ladder(_sweep(tmp_path, monkeypatch, WORKSTATION), read_store=False, corpus=False)
    for r in lp.rungs:
        r.train_tokens = 4_096_000
        for row in r.plan.rows:
            row.status = "done"
    buf = io.StringIO()
    _print_ladder(lp, Console(file=buf, width=80, highlight=False, color_system=None))
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "…" not in buf.getvalue()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["rung", "tokens"])
    summary = " ".join(" ".join(lines[:head]).split())
    assert f"Whole ladder: {sum(r.min_trials for r in lp.rungs)}-{sum(r.max_trials for r in lp.rungs)} trials" in summary
    want = []
    for r in lp.rungs:
        want.append([f"{r.rung:g}", _si(r.tokens), str(r.steps), str(r.warmup_steps), f"{r.epochs:.2g}", str(r.cells),
                     str(r.min_trials), _sci(r.min_flops), duration(r.seconds()), f"{r.trials}/{r.trials}"])
        if r.max_trials != r.min_trials:
            want.append(["at", "most", str(r.max_trials), _sci(r.max_flops), duration(r.seconds(most=True))])
    assert [ln.split() for ln in lines[head + 2:]] == want and len(want) == 5


def test_the_ladder_runs_each_rung_at_its_scale_and_resumes_with_its_own_command(tmp_path, monkeypatch, capsys):
    """``cemlab sweep NAME --ladder`` hands the runner each rung's scale, cheapest first, and as the
    command that resumes it the ladder's own command line (no ``--scale``); interrupted at a rung,
    it stops there and prints that command."""
    import shlex

    from cemlab.cli import main
    from cemlab.sweeps import ladder_plan, runner
    from cemlab.sweeps.stages.invocation import SweepResult

    _sweep(tmp_path, monkeypatch, "ladder: {scale: smoke, size: 86m, rungs: [0.125, 0.5, 1]}\n")
    got = []

    def run_sweep(sweep, scale, command="", **_):
        got.append((sweep, scale, command))
        if len(got) == 2:
            raise KeyboardInterrupt
        return SweepResult(sweep, scale, "sqlite:///x.db", "1", "p", False, [], command=command)

    monkeypatch.setattr(runner, "run_sweep", run_sweep)
    monkeypatch.setattr(runner, "wait_ray_stopped", lambda: None)
    monkeypatch.setattr(ladder_plan, "corpus_train_tokens", lambda *_: None)  # the corpus check has its own test
    assert main(["sweep", "lad", "--ladder", "--plain", "--no-report", "--retries", "2"]) == 130
    command = "cemlab sweep lad --retries 2 --no-report --plain --ladder"
    assert got == [("lad", "smoke-tpp0.125", command), ("lad", "smoke-tpp0.5", command)]
    assert f"to resume, run: {command}" in " ".join(capsys.readouterr().err.split())
    assert "--scale" not in shlex.split(command)


def _rung_points(effects, slope_sd=0.0, seeds=3, noise=0.02, offset_sd=0.03, rng=None, noise_by_rung=(1, 1, 1, 1)):
    """Per rung, per seed log differences: a seed offset shared by the rungs, a seed's own slope
    (mean zero), noise per rung (scaled by ``noise_by_rung``)."""
    rng = rng or np.random.default_rng(0)
    offsets = rng.normal(0, offset_sd, seeds)
    slopes = rng.normal(0, slope_sd, seeds)
    x = np.arange(len(effects)) * 2.0
    return {r: {s: float(e + offsets[s] + slopes[s] * (x[i] - x.mean()) + rng.normal(0, noise * noise_by_rung[i]))
                for s in range(seeds)} for i, (r, e) in enumerate(zip(RUNGS, effects))}


RUNGS = [0.3125, 1.25, 5.0, 20.0]
TOKENS = {r: r * 230_208 for r in RUNGS}


def test_the_trend_is_the_mean_per_seed_least_squares_slope_per_doubling():
    pts = {0.3125: {0: 0.30, 1: 0.20, 2: 0.25}, 1.25: {0: 0.22, 1: 0.15, 2: 0.18},
           5.0: {0: 0.10, 1: 0.06, 2: 0.08}, 20.0: {0: 0.02, 1: 0.01, 2: 0.00}}
    tr = trend(pts, TOKENS)
    x = np.log2([TOKENS[r] for r in RUNGS])
    per_seed = [np.polyfit(x, [pts[r][s] for r in RUNGS], 1)[0] for s in range(3)]  # numpy's own fit
    assert tr.slope == pytest.approx(np.mean(per_seed)) and tr.seeds == 3 and tr.rungs == 4
    from scipy import stats

    half = stats.t.ppf(0.975, 2) * np.std(per_seed, ddof=1) / math.sqrt(3)
    assert (tr.low, tr.high) == pytest.approx((np.mean(per_seed) - half, np.mean(per_seed) + half))
    # a seed missing at one rung leaves the trend, not the rung
    pts[20.0].pop(2)
    assert trend(pts, TOKENS).seeds == 2


@pytest.mark.parametrize("verdicts, effects, word, text", [
    (["contradicted"] * 4, [0.3, 0.3, 0.3, 0.3], HOLDS, "holds at every rung (contradicted)"),
    (["supported", "supported", "contradicted", "contradicted"], [-0.2, -0.1, 0.1, 0.2], FLIPS,
     "flips between rung 1.25 and rung 5 (supported -> contradicted)"),
    (["inconclusive", "contradicted", "inconclusive", "inconclusive"], [0.3, 0.2, 0.1, 0.0], CHANGES,
     "changes with training"),
    (["inconclusive", "contradicted", "inconclusive", "inconclusive"], [0.05, 0.05, 0.05, 0.05], OPEN, "open ("),
    (["contradicted", "contradicted", "contradicted", "not enough runs"], [0.3, 0.2, 0.1, 0.0], HOLDS,
     "its effect changes"),
])
def test_the_ladder_verdict_on_constructed_data(verdicts, effects, word, text):
    tr = trend(_rung_points(effects, noise=0.005, offset_sd=0.05), TOKENS)
    w, t = ladder_verdict(list(zip(RUNGS, verdicts)), tr)
    assert w == word and text in t, (w, t, tr)


def _false_trend_rate(reps: int, rng, **kw) -> tuple[float, float]:
    """Share of simulated ladders with no change with training whose trend interval excludes zero,
    on each side."""
    below = above = 0
    for _ in range(reps):
        tr = trend(_rung_points([0.1] * 4, rng=rng, **kw), TOKENS)
        below += tr.high < 0
        above += tr.low > 0
    return below / reps, above / reps


@pytest.mark.parametrize("case", [dict(), dict(noise_by_rung=(3, 2, 1, 0.5)), dict(slope_sd=0.01, noise=0.01),
                                  dict(seeds=8)])
def test_the_false_changes_with_training_rate_is_at_most_its_level(case):
    """Null: the effect does not change with training (seed offsets, per-seed random slopes with
    mean zero, noise per rung, noisier at the short rungs). Each side at most alpha/2 = 2.5% plus
    2.33 Monte-Carlo SE."""
    reps = int(os.environ.get("CEMLAB_CALIBRATION_REPS", 2000))
    below, above = _false_trend_rate(reps, np.random.default_rng(7), **case)
    bound = 0.025 + 2.33 * math.sqrt(0.025 * 0.975 / reps)
    print(f"false 'changes with training' {case}: {below:.4f} below, {above:.4f} above ({reps} ladders)")
    assert below <= bound and above <= bound


def test_a_true_trend_is_found():
    """At a slope of -2% per doubling (1 sd of the per-rung noise), 3 seeds, the trend decides
    most of the time: the test has power where the ladder needs it."""
    rng = np.random.default_rng(3)
    found = sum(trend(_rung_points([0.3 - 0.04 * i for i in range(4)], rng=rng), TOKENS).high < 0 for _ in range(400))
    assert found / 400 > 0.5


# ----------------------------------------------------------------------------------------------
# The ladder page on the committed run (docs/ladder/recursion_ablation/): what it measures
# ----------------------------------------------------------------------------------------------

COMMITTED = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "ladder", "recursion_ablation")


def _committed_rungs():
    """The committed ladder's rungs as the page reads a rung without runs in the store: each
    rung's trials.csv, comparisons.csv and claims.csv, its tokens from the committed ladder.csv."""
    import pandas as pd

    from cemlab.report.pages.ladder_page import Rung

    rows = pd.read_csv(os.path.join(COMMITTED, "ladder.csv"))
    rungs = []
    for scale in sorted(os.listdir(COMMITTED)):
        folder = os.path.join(COMMITTED, scale)
        if not os.path.isdir(folder):
            continue
        r = float(scale.split("tpp")[1])
        read = lambda name: pd.read_csv(os.path.join(folder, f"{name}.csv"),   # noqa: E731
                                        keep_default_na=False, na_values=[""])
        mine = rows[rows["rung"] == r].iloc[0]
        rungs.append(Rung(r, scale, float(mine["tokens"]), float(mine["steps"]), float(mine["epochs"]),
                          read("trials").assign(rung=r, rung_scale=scale), read("comparisons"), read("claims"),
                          "files"))
    return sorted(rungs, key=lambda rg: rg.rung)


@pytest.fixture(scope="module")
def committed():
    from cemlab.report.pages.ladder_page import comparison_rows

    rungs = _committed_rungs()
    return rungs, comparison_rows(rungs)


@pytest.mark.parametrize("k, n", [(0, 5), (4, 4), (5, 5), (4, 6), (3, 6), (11, 21), (9, 15), (1, 1)])
def test_the_share_interval_is_the_exact_clopper_pearson_interval(k, n):
    from scipy import stats

    from cemlab.report.pages.ladder_page import clopper_pearson

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12)
    if k == n:  # by hand: all n agree, the lower end solves p^n = 2.5%
        assert clopper_pearson(k, n)[0] == pytest.approx(0.025 ** (1 / n)) and clopper_pearson(k, n)[1] == 1
    if k == 0:
        assert clopper_pearson(k, n) == pytest.approx((0.0, 1 - 0.025 ** (1 / n)))
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))


def test_accuracy_gives_both_readings_of_the_comparisons_with_their_intervals(committed):
    """Counted here from the committed verdicts.csv (one column per rung): of the comparisons the
    top rung decides, how many each lower rung decides the same way (undecided: a miss), and of
    those it decides at all, how many agree. The committed run: rungs 1.25 and 5 each decide 4 of
    the top rung's 5, all agreeing."""
    import pandas as pd
    from scipy import stats

    from cemlab.report.pages.ladder_page import BOTH_DECIDED, TOP_DECIDED, accuracy

    rungs, rows = committed
    acc = accuracy(rungs, rows)
    vt = pd.read_csv(os.path.join(COMMITTED, "verdicts.csv"), keep_default_na=False)
    word = lambda cell: cell.split(" ")[0] if cell else ""   # noqa: E731  "contradicted +2.4% [...]" -> "contradicted"
    decisive = {"supported", "contradicted", "negligible"}
    top = [word(c) for c in vt["rung 20"]]
    expected = {}
    for r in ("0.3125", "1.25", "5"):
        here = [word(c) for c in vt[f"rung {r}"]]
        at_top = [(h, t) for h, t in zip(here, top) if t in decisive]
        both = [(h, t) for h, t in at_top if h in decisive]
        expected[(float(r), TOP_DECIDED)] = (len(at_top), sum(h == t for h, t in at_top))
        expected[(float(r), BOTH_DECIDED)] = (len(both), sum(h == t for h, t in both))
    # every rung as committed now: rerun with bracketing (docs/ladder.md). The top rung decides 5
    # comparisons, not 6: its CEM-MLP T=2 vs T=1 comparison is not decisive (both cells at their 8e-3
    # edge). The cheap rungs decide fewer: most of their cells are best at 8e-3 with the step spent.
    # With two rates at every rung: (6, 3) and (6, 3) at 0.3125; (6, 4) and (4, 4) at 1.25; (6, 5) and
    # (5, 5) at 5. Rung 0.3125 on 3 seeds (no seed look since 2026-11-28) decides none of the 5; on 8
    # seeds it decided one, the same way: (5, 1) and (1, 1).
    # Rung 20 rerun by the union rule (2026-11-29, its 5 cells): it decides 4 comparisons, not 5
    assert expected[(0.3125, TOP_DECIDED)] == (4, 0) and expected[(0.3125, BOTH_DECIDED)] == (0, 0)
    # Rungs 0.3125 and 1.25 rerun by the union rule (2026-11-29): at 1.25 the primary attention
    # comparison, on 3 fresh seeds, is the one the top rung decides that it decides too, the same way
    assert expected[(1.25, TOP_DECIDED)] == (4, 1) and expected[(1.25, BOTH_DECIDED)] == (1, 1)
    # Rung 5 rerun by the union rule (2026-11-29): its comparisons outside the primary condition have one
    # fresh seed and decide nothing (cem-attn T=2 vs Llama, contradicted before on 3 seeds, now undecided);
    # the three it decides (primary attention, test-time recursion at eta=1) agree with the top rung
    assert expected[(5.0, TOP_DECIDED)] == (4, 3) and expected[(5.0, BOTH_DECIDED)] == (3, 3)
    for (r, what), (n, k) in expected.items():
        row = acc[(acc["rung"] == r) & (acc["what"] == what)]
        assert len(row) == 1, (r, what)
        row = row.iloc[0]
        if n == 0:   # nothing to compare: no share and no interval, not a share of 0
            assert (row["compared"], row["agree"]) == (0, 0) and row[["share", "share_low", "share_high"]].isna().all()
            continue
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert (row["compared"], row["agree"]) == (n, k) and row["share"] == pytest.approx(k / n)
        assert (row["share_low"], row["share_high"]) == pytest.approx((ci.low, ci.high))
        assert row["interval"] == "exact Clopper-Pearson 95%"
    # every row of accuracy.csv that compares anything has its interval, the pairs' rows too (10 pairs of
    # the top rung's 5 cells)
    some = acc[acc["compared"] > 0]
    assert some[["share_low", "share_high"]].notna().all().all() and (some["share_low"] <= some["share"]).all()
    assert set(acc.loc[acc["what"].str.startswith("pairs of cells at tuned"), "compared"]) == {10}


def test_the_holds_verdict_says_how_the_effect_moved():
    from cemlab.report.stats.trend import Trend

    effects = [math.log1p(e) for e in (0.024, 0.848, 1.047, 0.103)]   # the committed T=2 vs T=1 attention effects
    flat = Trend(0.014, -0.008, 0.037, 3, 4, 0.95)
    word, text = ladder_verdict([(r, "contradicted") for r in RUNGS], flat, effects=list(zip(RUNGS, effects)))
    assert word == HOLDS
    assert text == ("holds at every rung (contradicted); effect +2.4% at 0.3125, +84.8% at 1.25, +104.7% at 5, "
                    "+10.3% at 20: not monotone (largest at 5, smallest at 0.3125); trend +1.4% per doubling of "
                    "tokens [-0.8%, +3.8%], 95% interval over 3 seeds, includes zero")
    rising = Trend(0.026, 0.020, 0.033, 3, 4, 0.95)
    grow = [math.log1p(e) for e in (0.021, 0.025, 0.092, 0.187)]
    _, text = ladder_verdict([(r, "contradicted") for r in RUNGS], rising, effects=list(zip(RUNGS, grow)))
    assert ": grows at every step; its effect changes: +2.6% per doubling of tokens [+2.0%, +3.4%]" in text
    _, text = ladder_verdict([(r, "supported") for r in RUNGS], rising, effects=list(zip(RUNGS, grow[::-1])))
    assert "+18.7% at 0.3125, +9.2% at 1.25, +2.5% at 5, +2.1% at 20: shrinks at every step" in text


def test_the_committed_ladder_rows_are_the_page_and_its_verdicts_say_how_they_moved(committed):
    import pandas as pd

    _, rows = committed
    saved = pd.read_csv(os.path.join(COMMITTED, "ladder.csv"), keep_default_na=False, na_values=[""])
    for col in ("claim", "comparison", "verdict", "ladder"):
        assert list(rows[col]) == list(saved[col]), col
    for col in ("effect", "ci_low", "ci_high", "slope", "slope_low", "slope_high"):
        assert rows[col].to_numpy(dtype=float) == pytest.approx(saved[col].to_numpy(dtype=float), nan_ok=True), col
    # every rung rerun by the union rule (judged on fresh seeds 2-4): the primary comparisons have a trend
    # over the 3 seeds every rung shares; the primary attention comparison is contradicted from rung 1.25 on
    attn = rows[rows["comparison"] == "cem-attn 86m dplr same per-step eta=1"].iloc[0]
    assert attn["ladder"] == CHANGES
    assert attn["ladder_verdict"] == ("changes with training: +4.2% per doubling of tokens [+1.9%, +6.7%], "
                                      "95% interval over 3 seeds")
    mlp = rows[rows["comparison"] == "cem-mlp 86m dplr same per-step eta=1"].iloc[0]
    assert mlp["ladder"] == CHANGES and mlp["ladder_verdict"].startswith("changes with training: +2.1% per doubling")
    # outside the primary condition one fresh seed a rung: no trend, open
    other = rows[rows["comparison"] == "cem-attn 86m dplr same per-step eta=0.5"].iloc[0]
    assert other["ladder"] == OPEN and "trend n/a: 1 seed(s) at every rung" in other["ladder_verdict"]


def _seed_diffs(text: str) -> dict[int, float]:
    return {int(s): float(d) for s, d in (p.split(":") for p in str(text).split())}


def test_the_trend_figure_draws_each_comparison_on_the_log_ratio_axis_with_its_fitted_line(committed):
    """One panel per primary comparison; its points are log(1 + effect); its dashed line is the
    mean of the seeds' least-squares lines (numpy's polyfit per seed here, on the seeds of
    comparisons.csv present at every rung)."""
    from cemlab.report.figures.ladder_figures import trend_figure

    rungs, rows = committed
    f = trend_figure(rows)
    prim = rows[rows["role"] == "primary"]
    keys = list(dict.fromkeys(zip(prim["claim"], prim["comparison"])))
    panels = [ax for ax in f.fig.axes if ax.get_visible()]
    assert f.id == "trend" and len(panels) == len(keys) == 9
    for ax, (claim, comp) in zip(panels, keys):
        assert ax.get_title(loc="left").replace("\n", " ").startswith(f"{claim}: {comp}"[:30])
        g = prim[(prim["claim"] == claim) & (prim["comparison"] == comp)].sort_values("rung")
        points = ax.lines[0].get_ydata()   # the errorbar's markers
        assert np.asarray(points, dtype=float) == pytest.approx(np.log1p(g["effect"].to_numpy(dtype=float)))
        per_rung = {}
        for rg in rungs:
            c = rg.comparisons
            hit = c[(c["id"] == claim) & (c["comparison"] == comp)]
            if len(hit):
                per_rung[rg.rung] = (rg.tokens, _seed_diffs(hit.iloc[0]["seed_diffs"]))
        seeds = sorted(set.intersection(*(set(d) for _, d in per_rung.values())))
        x = np.log2([t for t, _ in per_rung.values()])
        fits = [np.polyval(np.polyfit(x, [d[s] for _, d in per_rung.values()], 1), x) for s in seeds]
        line = [ln for ln in ax.lines if ln.get_gid() == "trend"]
        assert len(line) == 1 and np.asarray(line[0].get_ydata(), dtype=float) == pytest.approx(np.mean(fits, 0))
    import matplotlib.pyplot as plt

    plt.close(f.fig)


@pytest.mark.parametrize("dpi", [100, 110, 220])
def test_the_ladder_figures_show_whole_labels(committed, dpi):
    """Every drawn text of the forest and the trend figure lies inside the figure at the page's
    resolution (save_figure: 110 dpi) and others: the figure's tight bounding box (every drawn
    artist) inside its own, and each forest label's extent right of its left edge (the labels were
    cut there when a tight layout computed at 100 dpi was saved at 110)."""
    import matplotlib.pyplot as plt

    from cemlab.report.figures.ladder_figures import forest_figure, trend_figure

    _, rows = committed
    for f in (forest_figure(rows), trend_figure(rows)):
        fig = f.fig
        fig.set_dpi(dpi)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        tight = fig.get_tightbbox(renderer)   # inches
        w, h = fig.get_size_inches()
        assert tight.x0 >= -1e-6 and tight.y0 >= -1e-6 and tight.x1 <= w + 1e-6 and tight.y1 <= h + 1e-6, (f.id, tight)
        if f.id == "forest":
            labels = fig.axes[0].get_yticklabels()
            assert len(labels) == 9 * 4
            for t in labels + [t for t in fig.axes[0].texts]:
                box = t.get_window_extent(renderer)
                assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (t.get_text(), box)
        plt.close(fig)


def test_a_ladder_figure_registers_through_register_figure(committed, tmp_path):
    """The page's forest and trend are registered ladder figures; one more registered with
    ``ladder=True`` is drawn on the pages of its sweeps (from the page's ladder.csv rows), not on
    others', and is no id a sweep file's ``figures:`` may name."""
    from cemlab.models.registry import plugins_scope
    from cemlab.report.pages.ladder_page import _sections, verdict_table
    from cemlab.report.figures.ladder_figures import forest_figure, trend_figure
    from cemlab.report.figures.plotting import Figure, subplots
    from cemlab.report.registry import LADDER_FIGURES, ladder_figures_for, register_figure
    from cemlab.sweeps import feeds

    rungs, rows = committed
    seen = []

    def count_figure(frame):
        seen.append(frame)
        fig, ax = subplots(figsize=(3, 2))
        ax.bar(["verdicts"], [len(frame)])
        return Figure("extra_ladder", "Extra", "Registered by a test.", {"extra_ladder": frame.head(2)}, fig)

    with plugins_scope():
        register_figure("extra_ladder", count_figure, sweeps=["recursion_ablation"], ladder=True)
        register_figure("elsewhere", count_figure, sweeps=["another_sweep"], ladder=True)
        assert ladder_figures_for("recursion_ablation") == [forest_figure, trend_figure, count_figure]
        assert ladder_figures_for("another_sweep") == [forest_figure, trend_figure, count_figure]
        assert ladder_figures_for("third") == [forest_figure, trend_figure]
        assert "extra_ladder" not in feeds.FIGURES
        with pytest.raises(ValueError, match="already registered"):
            register_figure("forest", count_figure, sweeps=(), ladder=True)
        written: set[str] = set()
        sections = _sections(rungs, rows, verdict_table(rows), tmp_path, written, "recursion_ablation")
    assert len(seen) == 1 and seen[0] is rows
    assert [s.id for s in sections][-3:] == ["forest", "trend", "extra_ladder"]
    assert {"forest.png", "trend.pdf", "extra_ladder.png", "extra_ladder.csv", "accuracy.csv"} <= written
    assert all((tmp_path / name).is_file() for name in written)
    assert "extra_ladder" not in LADDER_FIGURES   # plugins_scope forgot it


@pytest.mark.parametrize("folder, suffix", [(f"workstation-tpp{r}", "") for r in ("0.3125", "1.25", "5", "20")]
                         + [("workstation-tpp20", "-20261128-every-choice")])
def test_the_test_time_interval_is_recomputed_from_the_committed_curves(folder, suffix):
    """docs/verdicts.md, "The test-time recursion interval", on every committed report, from the per-seed
    log ratios of test perplexity at T'=4 over T'=2 with scipy.stats.t: on fresh seeds at the chosen rate,
    their one-sided t bounds at the row's two levels; at every rate (the top rung before its rerun), the
    lowest lower bound and the highest upper bound over the rates."""
    import pandas as pd
    from scipy import stats

    folder = os.path.join(COMMITTED, folder)
    curves = pd.read_csv(os.path.join(folder, f"test_time_recursion{suffix}.csv"))
    comps = pd.read_csv(os.path.join(folder, f"comparisons{suffix}.csv"), keep_default_na=False, na_values=[""])

    def bounds(d, c):
        se = d.std(ddof=1) / math.sqrt(len(d))
        return (d.mean() - stats.t.ppf(1 - c["alpha_low"], len(d) - 1) * se,
                d.mean() + stats.t.ppf(1 - c["alpha_high"], len(d) - 1) * se)

    checked = 0
    for _, c in comps[(comps["id"] == "test-time-recursion") & (comps["n"] >= 2)].iterrows():
        variant = c["comparison"].rsplit(" ", 1)[0]    # "cem-attn T2 dplr eta=1 86m" -> the cell's variant
        ratios = {lr: np.log(at[4] / at[2]) for lr, at in
                  ((lr, g.pivot(index="seed", columns="test_T", values="value"))
                   for lr, g in curves[(curves["variant"] == variant) & (curves["trained_T"] == 2)].groupby("lr"))}
        if str(c["n_choices"]) == "1":   # one rate, the fresh seeds
            judged = _seed_diffs(c["seed_diffs"])
            rates = [lr for lr, d in ratios.items()
                     if set(judged) <= set(d.index) and all(d[s] == pytest.approx(x, abs=1e-12) for s, x in judged.items())]
            assert len(rates) >= 1 and len(judged) == c["n"], (variant, judged)
            low, high = bounds(np.array(list(judged.values())), c)
        else:                            # every rate the cell ran: the hull
            ends = [bounds(d.to_numpy(), c) for d in ratios.values()]
            assert len(ends) == int(c["n_choices"])
            low, high = min(e[0] for e in ends), max(e[1] for e in ends)
        assert (c["ci_low"], c["ci_high"]) == pytest.approx((math.expm1(low), math.expm1(high)))
        assert c["level"] == pytest.approx(1 - c["alpha_low"] - c["alpha_high"])
        checked += 1
    assert checked >= 1   # every report judges at least the primary condition's cells on two seeds or more
