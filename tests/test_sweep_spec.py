"""Sweep files, scales, grid expansion and ``cemlab plan``.

Every sweep file of the project must validate and expand at every scale with the expected number
of trials; identical trials in different sweeps (the shared Llama baselines) must get one config
hash; broken files must fail before anything runs, naming the file and the key; and the plan must
read trial statuses from a real MLflow store.
"""

from __future__ import annotations

import itertools
import shutil
import textwrap

import pytest

from cemlab.config import RunConfig
from cemlab.models.config import ModelConfig
from cemlab.sweeps.sweepfile.files import list_sweeps, load_scales, sweeps_dir
from cemlab.sweeps.sweepfile.schema import SweepError, Trial
from cemlab.sweeps.sweepfile.load import load_sweep
from cemlab.tracking import schema

from sweep_support import REPO_SWEEPS, SWEEP_FILES, assert_refused, expected_grid, write_sweep as write

SCALES = ("smoke", "tiny", "paper")

#: The project's sweeps: their files (the trial count of each is computed from its YAML by
#: sweep_support.expected_grid, independently of cemlab.sweeps.sweepfile.load).
SWEEPS = {p.stem: p for p in SWEEP_FILES}


@pytest.fixture(autouse=True)
def _project_sweeps(monkeypatch):
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(REPO_SWEEPS))


def trials_by_id(trials: list[Trial]) -> dict[str, Trial]:
    return {t.trial_id: t for t in trials}


# ---------------------------------------------------------------------------------------------
# The project's sweep files
# ---------------------------------------------------------------------------------------------


def test_the_nine_experiments_and_the_optuna_example_have_sweep_files():
    """Every sweep a figure or a claim names (cemlab/paper.py) has a file, and every file is listed."""
    from cemlab.paper import CLAIM_ENTRIES, FIGURE_ENTRIES

    named = {s for e in FIGURE_ENTRIES + CLAIM_ENTRIES for s in e["sweeps"]}
    assert list_sweeps() == sorted(SWEEPS) and named <= set(SWEEPS) and len(named) >= 10
    assert sweeps_dir() == REPO_SWEEPS


@pytest.mark.parametrize("name,scale", list(itertools.product(sorted(SWEEPS), SCALES)))
def test_every_sweep_expands_at_every_scale(name, scale):
    spec = load_sweep(name)
    trials = spec.expand(scale)
    assert len(trials) == expected_grid(SWEEPS[name], scale)[0]
    assert len({t.trial_id for t in trials}) == len(trials)
    assert len({t.config_hash for t in trials}) == len(trials)
    for t in trials:
        assert (t.sweep, t.scale, t.figure) == (name, scale, spec.figure)
        assert t.config_hash == t.config.hash()
        assert t.config.task == spec.task
        assert t.config.tracking.experiment == f"cemlab/{name}"
        assert t.config.tracking.run_name == t.trial_id
        tags = t.config.tracking.tags
        assert tags[schema.SWEEP] == name and tags[schema.SCALE] == scale and tags[schema.TRIAL_ID] == t.trial_id
        assert tags[schema.CONFIG_HASH] == t.config_hash and tags[schema.FIGURE] == spec.figure
        assert tags[schema.GROUP] == t.group and tags[schema.VARIANT] == t.variant
        assert all(isinstance(v, str) for v in tags.values())
        assert t.trial_id.replace("-", "").replace("_", "").replace(".", "").isalnum()
        # The config round-trips through its own validation (what a trial process will do).
        assert RunConfig.model_validate(t.config.model_dump()).hash() == t.config_hash
        if spec.task == "lm":
            assert t.axes["size"] == t.size and t.config.train.lr == t.axes["lr"]
            assert t.config.train.seed == t.axes["seed"]


def test_expansion_is_deterministic():
    a = [(t.trial_id, t.config_hash) for t in load_sweep("recursion_ablation").expand("tiny")]
    b = [(t.trial_id, t.config_hash) for t in load_sweep("recursion_ablation").expand("tiny")]
    assert a == b
    ids = [i for i, _ in a]
    assert ids[0] == "86m__llama__lr2e-3__s0"
    assert ids[:5] == ["86m__llama__lr2e-3__s0", "86m__llama__lr2e-3__s1", "86m__llama__lr4e-3__s0",
                       "86m__llama__lr4e-3__s1", ids[4]] and ids[4].endswith("__lr2e-3__s0")
    assert ids[-1] == "86m__cem-mlp_T2_dplr_eta-0.5__lr4e-3__s1"


def test_trial_config_is_the_layered_settings():
    """A trial's config equals one built by hand from scales.yaml and the sweep file's layers."""
    scales = load_scales()
    tiny = scales["tiny"]
    t = trials_by_id(load_sweep("recursion_ablation").expand("tiny"))["86m__cem-mlp_T2_dplr_eta-0.5__lr2e-3__s1"]
    size = tiny.sizes["86m"]
    by_hand = RunConfig.model_validate({
        "model": {**tiny.section("lm").base["model"], **size.model, "mlp": "cem", "mlp_steps": 2, "mlp_precond": "dplr",
                  "mlp_eta": 0.5},
        "data": tiny.section("lm").base["data"],
        "train": {**tiny.section("lm").base["train"], **size.train, "lr": 2e-3, "seed": 1},
    })
    assert t.config_hash == by_hand.hash()
    assert t.axes == {"size": "86m", "group": "cem-mlp", "variant": "cem-mlp T2 dplr eta=0.5", "lr": 2e-3,
                      "seed": 1, "T": 2, "precond": "dplr", "eta": 0.5}
    assert t.config.model.d_model == size.model["d_model"] and t.config.model.name == "86m"
    assert t.config.train.tokens == size.train["tokens"]
    assert t.config.tracking.tags[schema.axis_tag("eta")] == "0.5"
    assert t.config.tracking.tags[schema.MODEL_KIND] == "cem-mlp"
    assert t.resources.workers == 1 and t.resources.gpus == 0


def test_paper_scale_is_table1_with_chinchilla_tokens_on_slimpajama():
    trials = load_sweep("attention_replacement").expand("paper")
    assert sorted({t.size for t in trials}) == ["108m", "134m", "162m", "86m"]
    for t in trials:
        m, preset = t.config.model, ModelConfig.preset(t.size)
        assert (m.d_model, m.n_layers, m.n_heads, m.d_mlp, m.vocab_size, m.context_length) == (
            preset.d_model, preset.n_layers, preset.n_heads, preset.d_mlp, 32000, 2048)
        assert t.config.train.tokens == "chinchilla" and t.config.train.batch_size == 128
        assert t.config.train.precision == "bf16-mixed"
        assert t.config.data.source == "hf" and "SlimPajama" in t.config.data.hf_dataset
        assert "llama" in t.config.data.tokenizer.lower()
        assert t.resources.gpus_per_worker == 1 and t.resources.workers * 8 * 2 == 128  # micro 8, accumulation 2


def test_scale_restrictions_replace_axis_values():
    spec = load_sweep("recursion_ablation")
    tiny, paper = spec.expand("tiny"), spec.expand("paper")
    assert sorted({t.size for t in tiny}) == ["86m"] and {t.axes["lr"] for t in tiny} == {2e-3, 4e-3}
    assert {t.axes["seed"] for t in tiny} == {0, 1} and {t.axes.get("eta") for t in tiny} == {None, 1, 0.5}
    # recursion crossed with the step size: eta in {1, 1/2} at T=1 and at T=2, each at both learning rates
    cem = {(t.axes["T"], t.axes["eta"], t.axes["lr"]) for t in tiny if t.axes.get("T")}
    assert cem == {(T, e, lr) for T in (1, 2) for e in (1, 0.5) for lr in (2e-3, 4e-3)}
    assert {t.axes["lr"] for t in paper} == {1e-3, 2e-3, 4e-3}
    gp = load_sweep("gp_recursion").expand("smoke")
    assert sorted({t.axes["T"] for t in gp}) == [1, 2] and {t.axes["seed"] for t in gp} == {0}


def test_gp_sweep_sets_kernel_steps_and_seed():
    from cemlab.gp.config import GPConfig

    trials = load_sweep("gp_recursion").expand("paper")
    assert {(t.axes["kernel"], t.axes["T"]) for t in trials} == set(itertools.product(["rbf", "gibbs"], [1, 2, 4, 8]))
    for t in trials:
        gp = GPConfig.model_validate(t.config.gp)
        assert t.task == "gp" and t.size == "" and "size" not in t.axes
        assert (gp.kernel, gp.steps, gp.seed, t.config.train.seed) == (t.axes["kernel"], t.axes["T"], t.axes["seed"],
                                                                       t.axes["seed"])
        assert gp.latent_dim == 64 and gp.n_inputs == 10
        assert t.trial_id == f"{t.axes['kernel']}_T{t.axes['T']}__s{t.axes['seed']}"


# ---------------------------------------------------------------------------------------------
# Shared trials across sweeps
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_llama_baselines_are_shared_across_sweeps(scale):
    """A Llama baseline at the same size, lr and seed is one config, whichever sweep names it."""
    llama_hashes: dict[tuple, set[str]] = {}
    for name in list_sweeps():
        for t in load_sweep(name).expand(scale):
            if t.task == "lm" and t.config.model.kind == "llama" and t.config.model.attention.reuse == 1 \
                    and t.config.model.mlp.reuse == 1:
                llama_hashes.setdefault((t.size, t.axes["lr"], t.axes["seed"]), set()).add(t.config_hash)
    assert llama_hashes and all(len(h) == 1 for h in llama_hashes.values()), llama_hashes


def test_identical_cells_of_different_figures_share_hashes():
    def h(sweep, trial_id, scale="tiny"):
        return trials_by_id(load_sweep(sweep).expand(scale))[trial_id].config_hash

    base = h("attention_replacement", "86m__llama__lr2e-3__s0")
    # Plain reuse with T=1 is the Llama baseline; so is the baseline of every other figure.
    assert base == h("recursion_ablation", "86m__llama__lr2e-3__s0") == h("kq_diagonal", "86m__llama__lr2e-3__s0")
    assert base == h("reuse_vs_recursion_mlp", "86m__reuse-mlp_T1__lr2e-3__s0")
    assert base == h("reuse_vs_recursion_attention", "86m__reuse-attn_T1__lr2e-3__s0")
    assert base == h("lr_sweep", "86m__llama__lr2e-3__s0") == h("mlp_replacement", "86m__llama__lr2e-3__s0")
    # Single-step CEM attention (shared KQ diagonal, no preconditioner) in Fig 2a and Fig 4.
    assert h("attention_replacement", "86m__cem-attn_T1__lr2e-3__s0") == \
        h("reuse_vs_recursion_attention", "86m__cem-attn_T1_eta-1__lr2e-3__s0")
    # CEM attention T=1 with a diagonal preconditioner and shared diagonal: Fig 2c and Fig 3b.
    # (recursion_ablation runs diag at the paper scale only; eta=1 set explicitly is the default)
    assert h("recursion_ablation", "86m__cem-attn_T1_diag_eta-1__lr2e-3__s0", "paper") == \
        h("kq_diagonal", "86m__cem-attn_kq_shared__lr2e-3__s0", "paper")
    # ... but a different scale is a different run.
    assert base != trials_by_id(load_sweep("attention_replacement").expand("smoke"))["86m__llama__lr2e-3__s0"].config_hash


# ---------------------------------------------------------------------------------------------
# Broken sweep files fail before anything runs, naming the file and the key
# ---------------------------------------------------------------------------------------------

GOOD_HEAD = """\
figure: "Fig X"
axes: {size: [86m], lr: [2.0e-3]}
"""
LLAMA = "variants: [{group: llama, label: llama}]\n"

BROKEN = {
    "unknown_top_key": ("figure: x\nfigrue: y\naxes: {size: [86m]}\n" + LLAMA, ["figrue", "unknown key"]),
    "unknown_axis_key": ("figure: x\naxes: {size: [86m], sede: [0]}\n" + LLAMA, ["axes.sede", "did you mean 'seed'"]),
    "wrong_type": ("figure: x\naxes: {size: [86m], lr: [fast]}\n" + LLAMA, ["axes.lr[0]", "valid number", "fast"]),
    "empty_axis": ("figure: x\naxes: {size: [], lr: [2.0e-3]}\n" + LLAMA, ["axes.size", "empty"]),
    "empty_variant_axis": (GOOD_HEAD + "variants:\n  - {group: cem, label: 'cem T{T}', set: {model.attention: cem, "
                           "model.attn_steps: '{T}'}, axes: {T: []}}\n", ["variants[0].axes", "'T' is empty"]),
    "no_variants": (GOOD_HEAD + "variants: []\n", ["variants", "empty"]),
    "unknown_template_axis": (GOOD_HEAD + "variants:\n  - {group: cem, label: 'cem T{T}', set: {model.attention: cem, "
                              "model.attn_steps: '{steps}'}, axes: {T: [1, 2]}}\n",
                              ["variants[0]", "set.model.attn_steps", "'steps'", "add the axis"]),
    "unknown_label_axis": (GOOD_HEAD + "variants:\n  - {group: cem, label: 'cem {precond}', set: "
                           "{model.attention: cem}}\n", ["variants[0]", "label", "'precond'"]),
    "axis_unused": (GOOD_HEAD + "variants:\n  - {group: cem, label: 'cem T{T}', set: {model.attention: cem}, "
                    "axes: {T: [1, 2]}}\n", ["variants[0]", "axes.T", "used in no 'set'"]),
    "kq_on_llama_attention": (GOOD_HEAD + "variants:\n  - {group: llama, label: llama kq, set: "
                              "{model.kq_diagonal: shared}}\n",
                              ["variants[0]", "kq_diagonal", "needs attention='cem'", "model.kq_diagonal is set in"]),
    "steps_on_llama_mlp_via_template": (GOOD_HEAD + "variants:\n  - {group: x, label: 'x T{T}', set: "
                                        "{model.mlp_steps: '{T}'}, axes: {T: [2]}}\n",
                                        ["variants[0]", "mlp_steps=2", "needs mlp='cem'"]),
    "model_key_typo": (GOOD_HEAD + "variants:\n  - {group: cem, label: cem, set: {model.attention: cem, "
                       "model.attn_stepz: 2}}\n", ["model.attn_stepz", "did you mean 'attn_steps'"]),
    "bad_value": (GOOD_HEAD + "variants:\n  - {group: cem, label: cem, set: {model.attention: cem, "
                  "model.attn_precond: full}}\n", ["model.attn_precond", "unknown preconditioner kind; choose one of ['none', 'diag', 'dplr'"]),
    "set_conflicts_with_axis": (GOOD_HEAD + "variants:\n  - {group: x, label: x, set: {train.lr: 0.1}}\n",
                                ["set.train.lr", "conflicts with the top-level 'lr' axis"]),
    "unknown_size": ("figure: x\naxes: {size: [86m, 999m]}\n" + LLAMA, ["axes.size", "'999m'", "scales.yaml"]),
    "unknown_scale": (GOOD_HEAD + LLAMA + "scales: {huge: {size: [86m]}}\n", ["scales.huge", "unknown scale"]),
    "scale_unknown_axis": (GOOD_HEAD + LLAMA + "scales: {tiny: {T: [1]}}\n", ["scales.tiny.T", "no axis 'T'"]),
    "scale_wrong_type": (GOOD_HEAD + LLAMA + "scales: {tiny: {lr: [fast]}}\n", ["scales.tiny.lr[0]", "valid number"]),
    "duplicate_ids": (GOOD_HEAD + "variants:\n  - {group: llama, label: llama}\n  - {group: cem, label: llama, set: "
                      "{model.attention: cem}}\n", ["variants[1].label", "id '86m__llama__lr2e-3__s0'"]),
    "duplicate_configs": (GOOD_HEAD + "variants:\n  - {group: llama, label: llama}\n  - {group: other, label: other}\n",
                          ["identical configs", "86m__llama__lr2e-3__s0", "86m__other__lr2e-3__s0"]),
    "name_mismatch": ("name: other\n" + GOOD_HEAD + LLAMA, ["name: 'other' differs from the file name"]),
    "gp_with_size": ("figure: x\ntask: gp\naxes: {size: [86m]}\nvariants: [{group: g, label: g}]\n",
                     ["axes.size", "GP sweep has no model sizes"]),
    "gp_bad_setting": ("figure: x\ntask: gp\nvariants: [{group: g, label: g, set: {gp.kernel: matern}}]\n",
                       ["gp.kernel", "'rbf' or 'gibbs'", "gp.kernel is set in"]),
    "unknown_figure_id": (GOOD_HEAD + "figures: [fig2a, fig2e]\n" + LLAMA,
                          ["figures", "unknown figure id 'fig2e'", "did you mean", "fig2a, fig2b, fig2c", "table3"]),
    "unknown_claim_id": (GOOD_HEAD + "claims: [t2-beats-t3]\n" + LLAMA,
                         ["claims", "unknown claim id 't2-beats-t3'", "did you mean 't2-beats-t1'",
                          "attn-small-cost, mlp-loses-more"]),
    "figure_id_twice": (GOOD_HEAD + "figures: [fig3a, fig3a]\n" + LLAMA, ["figures", "list each id once"]),
    "not_a_mapping": ("- just\n- a list\n", ["top level must be a mapping"]),
    "bad_yaml": ("figure: [unclosed\n", ["not valid YAML"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_sweep_files_fail_naming_file_and_key(sweep_dir, case):
    assert_refused(sweep_dir, case, *BROKEN[case], scale="tiny")


def test_broken_scales_file_names_the_scale_and_size(sweep_dir):
    scales = (sweep_dir / "scales.yaml").read_text()
    (sweep_dir / "scales.yaml").write_text(scales.replace("d_model: 96,  n_layers: 2, n_heads: 2",
                                                          "d_model: 96,  n_layers: 2, n_heads: 5", 1))
    write(sweep_dir, "ok", GOOD_HEAD + LLAMA)
    with pytest.raises(SweepError) as info:
        load_sweep(sweep_dir / "ok.yaml")
    msg = str(info.value)
    assert str(sweep_dir / "scales.yaml") in msg and "tiny.sizes.86m.model" in msg and "n_heads=5" in msg


def test_batch_not_divisible_by_workers_fails_naming_the_scale(sweep_dir):
    scales = (sweep_dir / "scales.yaml").read_text()
    (sweep_dir / "scales.yaml").write_text(scales.replace("resources: {workers: 8,", "resources: {workers: 3,"))
    write(sweep_dir, "ok", GOOD_HEAD + LLAMA)
    with pytest.raises(SweepError, match=r"batch_size=128 .*resources.workers=3 .*paper\.lm"):
        load_sweep(sweep_dir / "ok.yaml").expand("paper")


def test_unknown_sweep_name_lists_the_available_ones():
    with pytest.raises(SweepError, match=r"no sweep named 'recursion_ablaton'.*did you mean 'recursion_ablation'"):
        load_sweep("recursion_ablaton")


def test_unknown_scale_is_refused():
    with pytest.raises(SweepError, match=r"unknown scale 'huge'.*paper"):
        load_sweep("kq_diagonal").expand("huge")


def test_sweeps_dir_resolution(tmp_path, monkeypatch, sweep_dir):
    write(sweep_dir, "mine", GOOD_HEAD + LLAMA)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(sweep_dir))
    assert list_sweeps() == ["mine"] and load_sweep("mine").expand("smoke")[0].sweep == "mine"
    monkeypatch.delenv("CEMLAB_SWEEPS_DIR")
    monkeypatch.chdir(tmp_path)  # ./sweeps holds a scales.yaml
    assert sweeps_dir() == sweep_dir.resolve() and list_sweeps() == ["mine"]
    monkeypatch.chdir(tmp_path / "sweeps")  # no ./sweeps here: the repository's folder
    assert sweeps_dir() == REPO_SWEEPS


def test_templates_keep_types_and_format_strings(sweep_dir):
    write(sweep_dir, "tmpl", GOOD_HEAD + textwrap.dedent("""\
        variants:
          - group: cem-attn
            label: "attn T{T} eta {eta}"
            set: {model.attention: cem, model.attn_steps: "{T}", model.attn_eta: "{eta}",
                  tracking.tags: {note: "T={T} at {size}"}}
            axes: {T: [1, 3], eta: [0.5]}
        """))
    trials = load_sweep(sweep_dir / "tmpl.yaml").expand("tiny")
    assert [t.trial_id for t in trials] == ["86m__attn_T1_eta_0.5__lr2e-3__s0", "86m__attn_T3_eta_0.5__lr2e-3__s0"]
    assert [t.config.model.attention.steps for t in trials] == [1, 3] and trials[1].config.model.attention.eta == 0.5
    assert trials[1].config.tracking.tags["note"] == "T=3 at 86m"


@pytest.mark.parametrize("name", ["recursion_ablation", "reuse_vs_recursion_attention", "reuse_vs_recursion_mlp"])
def test_workstation_scale_trains_every_trial_at_20_tokens_per_llama_parameter(name):
    """Chinchilla, as the paper: 20 training tokens per parameter of the matched Llama (counted
    here from a real model), and 3 seeds in every cell of the recursion sweeps."""
    from cemlab.models import build_model, count_parameters
    from cemlab.sweeps.plan import plan_sweep

    plan = plan_sweep(name, "workstation", read_store=False)
    assert plan.rows
    for r in plan.rows:
        llama = count_parameters(build_model(r.trial.config.model.matched_baseline()))["total"]
        assert r.budget_params == llama and r.tokens >= 20 * llama
    cells: dict[str, set] = {}
    for r in plan.rows:
        key = tuple(sorted((k, str(v)) for k, v in r.trial.axes.items() if k != "seed"))
        cells.setdefault(key, set()).add(r.trial.axes["seed"])
    assert min(len(s) for s in cells.values()) >= 3


def test_prose_scales_are_their_base_scale_on_another_corpus():
    """A `like:` scale keeps the models, budgets and the sweep's restrictions of its base scale and
    changes what it names: here the corpus."""
    for base, prose in (("tiny", "tiny-prose"), ("workstation", "workstation-prose")):
        a, b = load_sweep("recursion_ablation").expand(base), load_sweep("recursion_ablation").expand(prose)
        assert [t.trial_id for t in a] == [t.trial_id for t in b]
        for x, y in zip(a, b):
            assert x.config.model == y.config.model and x.config.train == y.config.train
            assert x.config.data.source != "text" and y.config.data.source == "text"
            assert y.config.data.path == "/usr/share/doc/python3.11/html/_sources"
            assert x.config_hash != y.config_hash
        # an axis from the command line keeps the rest of the base scale's axis values
        a, b = (load_sweep("recursion_ablation").expand(s, overrides=["seed=[0]"]) for s in (base, prose))
        assert [t.trial_id for t in a] == [t.trial_id for t in b] and {t.axes["seed"] for t in b} == {0}


def test_like_must_name_a_base_scale(sweep_dir):
    text = (sweep_dir / "scales.yaml").read_text() + "\nloop-a:\n  like: loop-b\nloop-b:\n  like: tiny\n"
    (sweep_dir / "scales.yaml").write_text(text)
    with pytest.raises(SweepError, match=r"loop-a.like: 'loop-b' must name a scale of this file that is not itself"):
        load_scales(sweep_dir / "scales.yaml")


def test_tiny_recursion_ablation_selects_on_two_seeds_per_cell_with_two_step_sizes():
    """What `cemlab plan recursion_ablation --scale tiny --json` shows under "grid": the selection
    stage (seeds 0-1); the confirmation stage adds the fresh seeds (test_bracketing_plan)."""
    from cemlab.sweeps.plan import plan_sweep

    grid = plan_sweep("recursion_ablation", "tiny", read_store=False).grid()
    assert grid["seeds_per_cell"][0] == 2 and grid["axes"]["eta"] == [1, 0.5] and grid["axes"]["T"] == [1, 2]
    assert grid["cells"] == 18 and grid["axes"]["seed"] == [0, 1]  # 9 cells x 2 learning rates
    # tuned: every cell (all but lr and seed) at both rates with the same 2 seeds, chosen on validation
    tuning = grid["tuning"]
    assert "validation" in tuning["method"] and len(tuning["cells"]) == 9
    assert all(c["lr"] == [2e-3, 4e-3] and c["seeds"] == [0, 1] for c in tuning["cells"])
    smoke = plan_sweep("recursion_ablation", "smoke", read_store=False).grid()
    assert smoke["seeds_per_cell"] == [2, 2]


def test_a_sweep_name_never_reaches_outside_the_sweeps_folder(tmp_path, monkeypatch, capsys):
    """A bare name is a file of the sweeps folder: ``../../x`` is refused (it used to load the
    ``x.yaml`` two folders up); an explicit path to a ``.yaml`` file is still taken."""
    from cemlab.cli import main

    sweeps = tmp_path / "a" / "sweeps"
    sweeps.mkdir(parents=True)
    shutil.copy(REPO_SWEEPS / "scales.yaml", sweeps / "scales.yaml")
    outside = tmp_path / "x.yaml"
    shutil.copy(REPO_SWEEPS / "lr_sweep.yaml", outside)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(sweeps))
    for name in ("../../x", "..", "sub/x", "/abs/x"):
        with pytest.raises(SweepError, match=r"is not a sweep name: .*a \.yaml file"):
            load_sweep(name)
    assert main(["plan", "../../x", "--scale", "smoke", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "'../../x' is not a sweep name" in err and "Traceback" not in err
    assert load_sweep(str(outside)).name == "x"   # an explicit path to a .yaml file
