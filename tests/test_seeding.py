"""Seeds added where a verdict is open: the ``seeding`` key of a sweep file, its planned looks, the
level each look judges at, the trials a look adds and which cells it opens.

The sweep itself (Ray, MLflow) is tested at smoke scale in ``test_sweep_run_seeding.py``; the
error rates of the procedure, for the main job's former seed looks, in docs/verdicts.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cemlab.report.inputs.seeded import cell_of, full_grid, seed_of
from cemlab.report.looks.interim_look import level_note, open_cells
from cemlab.report.stats.sequential import ALPHA, look_alpha, sweep_alpha
from cemlab.report.stats.significance import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Interval
from cemlab.report.claims.verdicts import Check, Verdict
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.sweeps.sweepfile.schema import Seeding, SweepError

from sweep_support import REPO_SWEEPS, assert_refused, seeded_sweeps, write_sweep

HEAD = """\
figure: "Fig X"
claims: [t2-beats-t1]
axes: {size: [86m], lr: [2.0e-3], seed: [0, 1, 2]}
variants:
  - {group: cem-attn, label: "cem-attn T{T}", set: {model.attention: cem, model.attn_steps: "{T}"}, axes: {T: [1, 2]}}
"""




# ---------------------------------------------------------------------------------------------
# The key: every mistake named with its field and its fix, when the file is read
# ---------------------------------------------------------------------------------------------

BAD = {
    "unknown_key": (HEAD + "seeding: {max_seed: {tiny: 6}}\n", ["seeding", "max_seed"]),
    "no_max_seeds": (HEAD + "seeding: {batch: 2}\n", ["seeding.max_seeds", "required key is missing"]),
    "empty_max_seeds": (HEAD + "seeding: {max_seeds: {}}\n", ["seeding.max_seeds", "max_seeds: {tiny: 6}"]),
    "one_seed": (HEAD + "seeding: {max_seeds: {tiny: 1}}\n", ["seeding.max_seeds", ">= 2"]),
    "zero_batch": (HEAD + "seeding: {max_seeds: {tiny: 6}, batch: 0}\n", ["seeding.batch", "greater than or equal to 1"]),
    "unknown_scale": (HEAD + "seeding: {max_seeds: {tiyn: 6}}\n", ["seeding.max_seeds.tiyn", "unknown scale", "tiny"]),
    "fewer_than_grid": (HEAD + "seeding: {max_seeds: {tiny: 2}}\n",
                        ["seeding.max_seeds.tiny", "fewer than the 3 seeds", "give at least 3"]),
    "no_claims": (HEAD.replace("claims: [t2-beats-t1]\n", "") + "seeding: {max_seeds: {tiny: 6}}\n",
                  ["seeding", "lists no claims", "claims: [...]"]),
    # the per-look split of alpha: fixed in the file, checked against alpha and the plan's looks
    "split_sum": (HEAD + "seeding: {max_seeds: {tiny: 8}, batch: 5, alpha_split: {tiny: [0.01, 0.03]}}\n",
                  ["seeding.alpha_split.tiny", "sums to 0.04", "sum to 0.05", "[0.025, 0.025]"]),
    "split_zero": (HEAD + "seeding: {max_seeds: {tiny: 8}, batch: 5, alpha_split: {tiny: [0, 0.05]}}\n",
                   ["seeding.alpha_split.tiny", "above 0", "[0.005, 0.045]"]),
    "split_looks": (HEAD + "seeding: {max_seeds: {tiny: 8}, batch: 5, alpha_split: {tiny: [0.01, 0.02, 0.02]}}\n",
                    ["seeding.alpha_split.tiny", "gives 3 look(s)", "plans 2 looks", "give 2 levels summing to 0.05"]),
    "split_scale": (HEAD + "seeding: {max_seeds: {tiny: 8}, alpha_split: {tiyn: [0.025, 0.025]}}\n",
                    ["seeding.alpha_split.tiyn", "unknown scale"]),
    "split_no_budget": (HEAD + "seeding: {max_seeds: {tiny: 8}, batch: 5, alpha_split: {smoke: [0.025, 0.025]}}\n",
                        ["seeding.alpha_split.smoke", "no seed budget", "seeding.max_seeds.smoke"]),
    "optuna": ("figure: x\nclaims: [t2-beats-t1]\naxes: {size: [86m]}\nvariants: [{group: llama, label: llama}]\n"
               "search: optuna\noptuna: {lr: [1.0e-3, 4.0e-3], samples: 2}\nseeding: {max_seeds: {tiny: 6}}\n",
               ["seeding", "search: optuna", "remove seeding"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_seeding_key_fails_naming_the_field_and_the_fix(sweep_dir, case):
    assert_refused(sweep_dir, case, *BAD[case])


# ---------------------------------------------------------------------------------------------
# Planned looks and their level
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("top, batch, looks", [
    (6, 3, [[0, 1, 2], [0, 1, 2, 3, 4, 5]]),
    (5, 2, [[0, 1, 2], [0, 1, 2, 3, 4]]),
    (6, 2, [[0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]]),   # the last look capped at max_seeds
    (7, 3, [[0, 1, 2], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6]]),
    (3, 3, [[0, 1, 2]]),                                         # no room: one look, nothing added
])
def test_looks_add_batches_up_to_max_seeds(top, batch, looks):
    got = Seeding(max_seeds={"tiny": top}, batch=batch).looks("tiny", [0, 1, 2])
    assert got == looks
    assert len(got) == 1 + math.ceil((top - 3) / batch)   # K = 1 + ceil((max - initial) / batch)
    assert all(a == b[:len(a)] for a, b in zip(got, got[1:]))   # nested: look j reads the first n_j seeds


def test_looks_count_up_from_the_grids_largest_seed_and_follow_like_scales():
    s = Seeding(max_seeds={"tiny": 4}, batch=1)
    assert s.looks("tiny", [3, 7]) == [[3, 7], [3, 7, 8], [3, 7, 8, 9]]
    assert s.looks("smoke", [0, 1]) == [[0, 1]]                       # a scale without a budget
    assert s.looks("tiny-prose", [0, 1], like="tiny") == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]


def test_each_look_judges_at_alpha_over_the_planned_looks():
    assert look_alpha(1) == pytest.approx(ALPHA) and look_alpha(2) == pytest.approx(0.025) and look_alpha(3) == pytest.approx(ALPHA / 3)
    with pytest.raises(ValueError, match="at least one look"):
        look_alpha(0)


def test_the_main_job_plans_two_looks_at_its_split_of_alpha(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(seeded_sweeps(tmp_path)))
    spec = load_sweep("recursion_ablation")
    tiny, smoke = spec.expand("tiny"), spec.expand("smoke")
    assert spec.looks("tiny", tiny) == [[0, 1, 2], [0, 1, 2, 3, 4, 5]]   # docs/verdicts-history.md: seed budget
    assert spec.look_alphas("tiny", tiny) == pytest.approx([0.0025, 0.0475])   # docs/verdicts-history.md: split rule
    assert sweep_alpha(spec, "tiny", tiny) == pytest.approx(0.0025)   # where the looks are not replayed: the strictest
    assert sweep_alpha(spec, "smoke", smoke) == ALPHA     # no budget at smoke: the fixed design
    # a seed axis given on the command line is run exactly: one look, no seed added, judged at alpha
    given = spec.expand("tiny", overrides=["seed=[0]"])
    assert spec.looks("tiny", given) == [[0]] and sweep_alpha(spec, "tiny", given) == ALPHA
    assert "each at alpha 0.05 on the seeds of the grid" in level_note(spec, "tiny", given)
    note = level_note(spec, "tiny", tiny)
    assert "seeding.alpha_split: 0.0025 + 0.0475 = 0.05 (one-sided 0.00125 + 0.02375)" in note
    assert "look 1: 6 seeds at alpha 0.0475 (one-sided 0.02375)" in note
    # the page says so when the runs hold no added seed (cemlab sweep --no-seeding), not otherwise
    assert "no seed was added" in level_note(spec, "tiny", tiny, seeds_run={0, 1, 2})
    assert "no seed was added" not in level_note(spec, "tiny", tiny, seeds_run={0, 1, 2, 5})
    assert "no seed was added" not in level_note(spec, "tiny", tiny, seeds_run=set())   # no runs: nothing to say
    assert level_note(load_sweep("lr_search"), "tiny", []).startswith("none: this sweep's file lists no claim (")


def test_added_seeds_are_the_trials_a_file_listing_them_would_have(sweep_dir):
    seeded = load_sweep(write_sweep(sweep_dir, "seeded", HEAD + "seeding: {max_seeds: {tiny: 5}, batch: 2}\n"))
    listed = load_sweep(write_sweep(sweep_dir, "listed", HEAD.replace("seed: [0, 1, 2]", "seed: [0, 1, 2, 3, 4]")))
    grid = seeded.expand("tiny")
    full = full_grid(seeded, "tiny", grid)
    assert len(grid) == 6 and len(full) == 10
    ids = lambda ts: {t.trial_id: t.config_hash for t in ts}   # noqa: E731
    # the same ids and config hashes as a file that lists the seeds, apart from the sweep's name
    assert {k: v for k, v in ids(full).items()}.keys() == ids(listed.expand("tiny")).keys()
    assert ids(full).items() >= ids(grid).items()                   # the grid's own trials unchanged
    assert {seed_of(t) for t in full} == {0, 1, 2, 3, 4}
    assert len({cell_of(t) for t in full}) == 2                      # the added seeds join the grid's cells


def test_the_plan_shows_the_looks_and_the_most_trials(sweep_dir):
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep(write_sweep(sweep_dir, "seeded", HEAD + "seeding: {max_seeds: {tiny: 6}, batch: 2}\n").as_posix(),
                      "tiny", read_store=False)
    s = plan.seeding()
    assert [lk["seeds"] for lk in s["looks"]] == [[0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]]
    assert s["alpha_split"] == pytest.approx([ALPHA / 3] * 3) and len(plan.rows) == 6 and s["max_trials"] == 12
    assert [lk["alpha_one_sided"] for lk in s["looks"]] == pytest.approx([ALPHA / 6] * 3)


def test_a_split_of_alpha_is_carried_into_the_plan_the_looks_and_the_page(sweep_dir, capsys):
    """``seeding.alpha_split``: look 0 at 0.005 and look 1 at 0.045 (one-sided 0.0025 and 0.0225),
    in ``cemlab plan``'s look lines and JSON, in each look's level, on the report page's summary and
    as the level of the claims the report reads this sweep beside its own (the strictest look's)."""
    from cemlab.cli import main
    from cemlab.report.looks.interim_look import LookLoop
    from cemlab.sweeps.plan import plan_sweep

    path = write_sweep(sweep_dir, "split", HEAD + "seeding: {max_seeds: {tiny: 8}, batch: 5, alpha_split: {tiny: [0.005, "
                                            "0.045]}}\n")
    spec = load_sweep(path)
    grid = spec.expand("tiny")
    assert spec.look_alphas("tiny", grid) == [0.005, 0.045]
    assert spec.look_alphas("smoke", spec.expand("smoke")) == [ALPHA]   # no budget there: one look at alpha
    s = plan_sweep(path.as_posix(), "tiny", read_store=False).seeding()
    assert [lk["alpha"] for lk in s["looks"]] == [0.005, 0.045] and s["split"].startswith("0.005 + 0.045 = 0.05")
    main(["plan", path.as_posix(), "--scale", "tiny", "--no-store"])
    out = " ".join(capsys.readouterr().out.split())
    assert "look 0: seeds 0,1,2 at alpha 0.005 (one-sided 0.0025)" in out
    assert "look 1: seeds 0,1,2,3,4,5,6,7 at alpha 0.045 (one-sided 0.0225)" in out
    note = level_note(spec, "tiny", grid)
    assert "look 0: 3 seeds at alpha 0.005 (one-sided 0.0025)" in note and "seeding.alpha_split" in note
    assert sweep_alpha(spec, "tiny", grid) == pytest.approx(0.005)
    loop = LookLoop([], "tiny", "split", spec.looks("tiny", grid), spec.look_alphas("tiny", grid))
    assert loop.alphas == [0.005, 0.045]
    # a seed axis given on the command line runs those seeds at alpha, one look: no split applies
    one = spec.expand("tiny", overrides=["seed=[0]"])
    assert spec.look_alphas("tiny", one) == [ALPHA] and spec.split_note("tiny", one) == ""
    # a split that does not fit the looks a seed axis plans: the even split (a rule fixed before any
    # run), and the note says why
    why = "seeding.alpha_split.tiny lists 2 levels, but the seed axis [0] plans 3 looks: each judges at the even split"
    assert spec.seeding.split_note("tiny", [0], None).startswith(why)
    assert spec.seeding.alphas("tiny", [0], None) == pytest.approx([ALPHA / 3] * 3)


def test_a_seed_axis_given_on_the_command_line_adds_no_seeds_and_says_so(tmp_path, monkeypatch, capsys):
    """``cemlab sweep recursion_ablation --scale tiny "seed=[0]"`` adds no seed to its 18 trials:
    the plan has one look, the seeding stage asks no judge for a look, and the plan and the sweep's
    first lines say why (no training: the plan, the stage with a judge that must not be called,
    and the start lines printed from the same trials)."""
    from types import SimpleNamespace

    from rich.console import Console

    from cemlab.cli import main
    from cemlab.sweeps.cli.plan import _plan_json
    from cemlab.sweeps.look_levels import seeds_given_note
    from cemlab.sweeps.plan import plan_sweep
    from cemlab.sweeps.stages.progress import print_start
    from cemlab.sweeps.stages.seeding import add_seeds

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(seeded_sweeps(tmp_path)))
    spec = load_sweep("recursion_ablation")
    plan = plan_sweep(spec, "tiny", read_store=False, overrides=["seed=[0]"])
    # no seed added; the file's bracketing step still may add one rate per cell at that seed (9 trials)
    assert len(plan.rows) == 18 and plan.looks == [[0]] and plan.max_trials == 18 + 9 and plan.seeding() == {}
    note = plan.seeding_note
    for part in ("seed=[0] from the command line", "none added where a verdict is open", "alpha 0.05",
                 "up to 6 per cell at tiny"):
        assert part in note, (part, note)
    assert _plan_json(plan)["seeding_note"] == note
    # nothing to say where the file's own seed axis runs, or where the file adds no seeds (smoke)
    assert seeds_given_note(spec, "tiny", spec.expand("tiny")) == ""
    assert seeds_given_note(spec, "smoke", spec.expand("smoke", overrides=["seed=[0]"])) == ""

    # cemlab plan prints it
    assert main(["plan", "recursion_ablation", "--scale", "tiny", "--no-store", "seed=[0]"]) == 0
    assert f"Seeding: {note}" in " ".join(capsys.readouterr().out.split())

    # the sweep: the seeding stage plans no look (a judge called would add seeds) ...
    trials = [r.trial for r in plan.rows]
    inv = SimpleNamespace(spec=spec, scale="tiny", parent_run_id="p", parent_reopened=False, uri="sqlite:///x.db",
                          experiment_id="1", log_dir=Path("logs"), other_driver=None)

    def judge(*args):
        raise AssertionError(f"a look was judged: {args[3]}")

    add_seeds(inv, trials, ["seed=[0]"], judge)
    # ... and its first lines say why
    console = Console(record=True, width=400)
    print_start(inv, trials, console)
    first = console.export_text().splitlines()
    assert first[0].startswith("Sweep recursion_ablation") and "18 trials" in first[0]
    assert [line for line in first[:5] if line.strip().startswith("seeds:")] == [f"  seeds: {note}"], first


# ---------------------------------------------------------------------------------------------
# Which cells a look opens
# ---------------------------------------------------------------------------------------------


def _cell(name: str, sweep: str = "mine") -> str:
    return json.dumps({"sweep": sweep, "variant": name}, sort_keys=True)


def _check(verdict: str, *cells: str) -> Check:
    return Check("c", "c", Interval(0.0, -1.0, 1.0, 3), verdict=verdict, cell_ids=cells)


def _verdict(verdict: str, checks: list, cond: str = "") -> Verdict:
    return Verdict("claim", "", "", "", ["mine"], verdict, "", "tiny", condition=cond, checks=checks)


def test_only_the_cells_of_open_comparisons_in_open_conditions_get_seeds():
    a, b, c, d, other = _cell("a"), _cell("b"), _cell("c"), _cell("d"), _cell("x", sweep="theirs")
    verdicts = [
        # open: the comparison a-b is open, b-c is decided (c gets nothing from it)
        _verdict(INCONCLUSIVE, [_check(INCONCLUSIVE, a, b, other), _check(SUPPORTED, b, c)], "eta=1"),
        # decided conditions add nothing, even with an open comparison inside
        _verdict(CONTRADICTED, [_check(INCONCLUSIVE, d, c), _check(CONTRADICTED, d, a)], "eta=1/2"),
        _verdict(SUPPORTED, [_check(SUPPORTED, c, d)], "eta=2"),
    ]
    claims, cells = open_cells(verdicts, "mine")
    assert claims == ["claim [eta=1]"]
    assert cells == [a, b]   # not the other sweep's cell: its own sweep adds its seeds
    assert open_cells(verdicts[1:], "mine") == ([], [])


def test_a_claim_is_judged_at_the_level_of_its_seeded_sweep_in_every_report(tmp_path, monkeypatch):
    """In the seeded plan the strictest look's level; with the confirmation stage (the project's own
    file) the stage's level, 0.045."""
    from cemlab.report.claims.catalog import all_claims
    from cemlab.report.inputs.grids import SweepGrids
    from cemlab.report.stats.sequential import claim_alpha

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(seeded_sweeps(tmp_path)))
    grids, by_id = SweepGrids(), {c.id: c for c in all_claims()}
    assert claim_alpha(by_id["t2-beats-t1"], grids, "tiny") == pytest.approx(0.0025)   # the strictest look
    assert claim_alpha(by_id["t2-beats-t1"], grids, "smoke") == ALPHA
    assert claim_alpha(by_id["attn-small-cost"], grids, "tiny") == ALPHA
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    assert claim_alpha(by_id["t2-beats-t1"], SweepGrids(), "tiny") == pytest.approx(0.045)


def test_every_sweep_that_judges_claims_runs_at_least_three_seeds_at_tiny(monkeypatch):
    from cemlab.sweeps.sweepfile.files import list_sweeps

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    judged = 0
    for name in list_sweeps():
        spec = load_sweep(name)
        if not spec.claims:   # nothing judged from its runs; lr_search's description says why
            assert name != "lr_search" or "judges no claim" in spec.description
            continue
        judged += 1
        grid = spec.expand("tiny")
        seeds = spec.looks("tiny", grid)[0]
        # three seeds, or a confirmation stage: its selection seeds, then fresh ones (docs/verdicts.md)
        assert len(seeds) >= 3 or (spec.confirmation_budget("tiny", grid) and len(seeds) >= 2), (name, seeds)
    assert judged >= 8


def test_a_comparison_decided_at_a_look_keeps_its_verdict_at_later_looks():
    from types import SimpleNamespace

    from cemlab.report.looks.interim_look import LookLoop

    a, b, c = _cell("a"), _cell("b"), _cell("c")
    loop = LookLoop([SimpleNamespace(id="claim", combine="all")], "tiny", "mine", [[0, 1, 2], [0, 1, 2, 3, 4]], 0.025)

    def look(first: str, second: str) -> Verdict:
        checks = [Check("a-b", "a-b", Interval(-0.05, -0.08, -0.02, 3), verdict=first, cell_ids=(a, b)),
                  Check("b-c", "b-c", Interval(0.0, -0.05, 0.05, 3), verdict=second, cell_ids=(b, c))]
        return loop._freeze(_verdict(INCONCLUSIVE, checks))

    v0 = look(SUPPORTED, INCONCLUSIVE)
    assert open_cells([v0], "mine") == (["claim"], [b, c])      # a gets nothing: a-b is decided
    decided = v0.checks[0]
    # look 1: b has more seeds (for b-c), a does not; a-b is not judged again, b-c decides
    v1 = look(INCONCLUSIVE, SUPPORTED)
    assert v1.checks[0] is decided and v1.verdict == SUPPORTED and v1.effect == pytest.approx(math.expm1(-0.05))  # log scale, shown as exp - 1
    assert open_cells([v1], "mine") == ([], [])


def test_an_open_tuned_cell_takes_its_other_learning_rates_with_it(sweep_dir):
    from cemlab.report.looks.interim_look import next_trials

    spec = load_sweep(write_sweep(sweep_dir, "tuned", HEAD.replace("lr: [2.0e-3]", "lr: [2.0e-3, 4.0e-3]")
                            + "seeding: {max_seeds: {tiny: 5}, batch: 2}\n"))
    grid = spec.expand("tiny")
    full = full_grid(spec, "tiny", grid)
    t1 = next(t for t in grid if t.axes["T"] == 1 and t.axes["lr"] == 2e-3)
    added = next_trials(full, [cell_of(t1)], [3, 4])   # the comparison read T=1 at lr 2e-3 only
    assert sorted((t.axes["T"], t.axes["lr"], seed_of(t)) for t in added) == \
        [(1, 2e-3, 3), (1, 2e-3, 4), (1, 4e-3, 3), (1, 4e-3, 4)]


def test_no_seeding_runs_the_grids_seeds_only_and_its_resume_command_keeps_the_flag(monkeypatch):
    """``cemlab sweep --no-seeding`` hands the runner no judge (so ``add_seeds`` adds nothing), and
    the command it prints to resume carries the flag; without it the report's judge is handed in."""
    import cemlab.sweeps.runner as runner
    from cemlab.cli import main

    got = []

    def fake_run_sweep(*args, **kwargs):
        got.append(kwargs)
        raise KeyboardInterrupt   # stop before anything runs; the command prints how to resume

    monkeypatch.setattr(runner, "run_sweep", fake_run_sweep)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))
    assert main(["sweep", "recursion_ablation", "--no-seeding", "--no-report"]) == 130
    assert main(["sweep", "recursion_ablation", "--no-report"]) == 130
    assert got[0]["looker"] is None and callable(got[1]["looker"])
    assert "--no-seeding" in got[0]["command"].split() and "--no-seeding" not in got[1]["command"].split()
