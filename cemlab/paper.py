"""The paper's figures and claims that cemlab reproduces: what a sweep file's ``figures:`` and
``claims:`` keys may name, and each claim's definition.

Plain data with no imports, so that loading a sweep file (``cemlab.sweeps.sweepfile.load``) checks these ids
without loading the report (``cemlab.report``, which may not be imported by the sweep layer). The
report draws each figure with the function of the same name in ``cemlab.report.figures.paper_figures``
and judges each claim with the rule its entry names in ``cemlab.report.claims.rules`` (bound in
``cemlab.report.claims.catalog``, which fails on import when a rule is missing); a test keeps them in step.

Adding a claim: its entry in ``CLAIM_ENTRIES`` here (with the sweeps that judge it), its rule
function in ``cemlab.report.claims.rules``, and its id in the ``claims:`` of those sweep files.
Adding a figure: its builder in ``cemlab.report.figures.paper_figures``, its entry in ``FIGURE_ENTRIES``
here (with the sweeps that feed it), and the id in the ``figures:`` of those sweep files. A test
keeps the entries' sweeps and the files' lists in step; a plugin registers figures and claims of
its own through ``cemlab.report.registry``.
"""

from __future__ import annotations

#: Paper figures and tables the report draws, in page order: each id (a builder's name in
#: ``cemlab.report.figures.paper_figures``) with the sweeps whose files list it under ``figures:``.
FIGURE_ENTRIES: tuple[dict, ...] = (
    dict(id="fig2a", sweeps=("attention_replacement",)),
    dict(id="fig2b", sweeps=("mlp_replacement",)),
    dict(id="fig2c", sweeps=("recursion_ablation",)),
    dict(id="fig2d", sweeps=("recursion_ablation",)),
    dict(id="fig3a", sweeps=("lr_search", "lr_sweep", "scale_256m")),
    dict(id="fig3b", sweeps=("kq_diagonal",)),
    dict(id="fig3c", sweeps=("reuse_vs_recursion_mlp",)),
    dict(id="fig4", sweeps=("reuse_vs_recursion_attention",)),
    dict(id="table3", sweeps=("gp_recursion",)),
)
#: The figure ids, in page order: what a sweep file's ``figures:`` may list.
FIGURES: tuple[str, ...] = tuple(e["id"] for e in FIGURE_ENTRIES)

# Tolerances of the rules (relative to the reference perplexity), chosen to match the paper's wording.
#: "Only a small effect on test perplexity" (sec. 4.1): CEM attention at most 5% above Llama.
SMALL_COST = 0.05
#: "Little or no effect/gain": a relative change of at most 1% counts as none.
NEGLIGIBLE = 0.01
#: "Matches or beats": at most 1% above the reference.
MATCH_TOL = 0.01
#: "Close to": within 2% of the reference.
CLOSE_TOL = 0.02
#: Smallest effect of interest of a difference claim on perplexity or RMSE (relative change): an
#: interval wholly inside +-1% reads ``negligible`` (no claim has a zero tolerance).
SESOI = 0.01
#: Smallest effect of interest of the learning-rate claim: a quarter octave (log2 of the lr ratio).
SESOI_LR = 0.25

#: The primary condition of the claims judged per step size: the paper's residual step eta = 1 (eq. 3),
#: for T=2 against T=1 at the same per-step eta; the other conditions are sensitivity checks.
ETA1 = "eta=1"
ETA1_PER_STEP = "same per-step eta=1"

#: Sign convention of every comparison's ``effect`` (stated once on the report page).
SIGN_CONVENTION = ("effect = log ratio of the main metric (test perplexity; test RMSE for the GP study) of the "
                   "variant the claim favours over its reference, log(value_favoured / value_reference), per seed "
                   "and then averaged (for perplexity: the difference in mean cross-entropy); shown as the relative "
                   "change exp(effect) - 1: negative = the favoured variant is better. In percent on the page and "
                   "as a fraction in the CSV files. The learning-rate claim's effect is log2(lr_CEM / lr_Llama).")

#: The regime of the paper's language-model runs (sec. 4, Table 1-2), shown next to every verdict.
PAPER_REGIME = "86M-162M params, Chinchilla tokens of the matched Llama (20/param), SlimPajama; seeds not stated"
#: The GP study's regime (Table 3).
PAPER_REGIME_GP = "GP regression as in Table 3 (8192 training points); seeds not stated"
#: The regime of a claim the paper does not make (beyond it, or a plugin's).
NOT_IN_PAPER = "not in the paper"


def claim_entry(id: str, paper: str, claim: str, rule: str, function: str, sweeps: tuple[str, ...],
           paper_regime: str = PAPER_REGIME, primary: str = "", margin: float = SESOI, combine: str = "all",
           primary_condition: str = "", relative_margin: bool = True) -> dict:
    """One claim: its id, where the paper makes it, what it states, the rule (in words) that turns
    runs into its verdict, the name of the function in ``cemlab.report.claims.rules`` that applies
    that rule, the sweeps whose runs judge it (``sweeps``: its own first; the rule reads them by
    position, ``ClaimData.sweep(i)``, and no other; their files list the claim under ``claims:``),
    the regime of the paper's runs behind it, its primary comparison (the first whose
    label contains ``primary``: the paper's headline contrast, whose effect claims.csv shows), its
    smallest effect of interest ``margin`` (a relative change, compared as log(1 + margin) like the
    effects; ``relative_margin=False``: already on the effect's own scale, as the learning-rate
    claim's log2 ratio), how its comparisons combine (``combine``, a key of
    ``cemlab.report.stats.significance.COMBINE_RULES``) and, for a claim judged per condition (step size), the
    condition whose verdict is the claim's (``primary_condition``; the others are sensitivity
    checks): the paper's own setting, fixed before any run (eta = 1, the residual step of eq. 3)."""
    return dict(id=id, paper=paper, claim=claim, rule=rule, function=function, sweeps=tuple(sweeps),
                paper_regime=paper_regime, primary=primary, margin=margin, combine=combine,
                primary_condition=primary_condition, relative_margin=relative_margin)


#: The claims of the paper, in paper order, and one beyond it (``cemlab.report.claims.catalog.CLAIMS``).
CLAIM_ENTRIES: tuple[dict, ...] = (
    claim_entry("attn-small-cost", "Fig. 2a, sec. 4.1",
           "Replacing attention by CEM attention (T=1, about half the attention parameters) costs little perplexity.",
           f"At every size, CEM attention's perplexity is at most {SMALL_COST:.0%} above Llama's (paired over seeds).",
           "rule_attn_small_cost", ('attention_replacement',), primary=""),
    claim_entry("mlp-loses-more", "Fig. 2b, sec. 4.1",
           "CEM MLPs lose more perplexity than CEM attention.",
           "At every size, CEM attention's relative change over Llama minus the dimension-matched CEM MLP's "
           "relative change over Llama is below 0 (effect: that difference).",
           "rule_mlp_loses_more", ('mlp_replacement', 'attention_replacement')),
    claim_entry("param-matching-recovers", "Fig. 2b, sec. 4.1",
           "Parameter matching (hidden width x1.5) recovers some of the CEM MLP's loss.",
           "At every size, the parameter-matched CEM MLP has lower perplexity than the dimension-matched one.",
           "rule_param_matching_recovers", ('mlp_replacement',)),
    claim_entry("t2-beats-t1", "Fig. 2c/2d, sec. 4.2",
           "Recursion T=2 beats T=1 (CEM attention and CEM MLP).",
           "For every sublayer, size and preconditioner, perplexity at T=2 is lower than at T=1; judged separately "
           "at the same per-step eta (T=2 eta=e vs T=1 eta=e) and at the same total step T*eta (T=2 eta=1/2 vs "
           "T=1 eta=1), each a condition of its own.", "rule_t2_beats_t1", ('recursion_ablation',), primary="cem-attn",
           primary_condition=ETA1_PER_STEP),
    claim_entry("precond-t2-not-t1", "Fig. 2c/2d, sec. 4.2",
           "Preconditioners have little effect at T=1 but help at T=2.",
           f"Relative change of the richest preconditioner over the simplest (dplr over diag, or over none), averaged "
           f"over sublayers and sizes per seed: equivalent to 0 within +-{NEGLIGIBLE:.0%} at T=1 (TOST), below "
           f"-{NEGLIGIBLE:.0%} at T=2, and the T=2 change minus the T=1 change below 0; per eta of the T=2 cells "
           f"(T=1 at the same per-step eta where it was run).",
           "rule_precond_t2_not_t1", ('recursion_ablation',), primary="T=2 - T=1", primary_condition=ETA1),
    claim_entry("cem-attn-t2-beats-llama", "Fig. 2c, sec. 4.2",
           "CEM attention with T=2 (and a preconditioner) beats Llama attention.",
           "At every size, the best CEM attention at T=2 has lower perplexity than Llama; per eta.",
           "rule_cem_attn_t2_beats_llama", ('recursion_ablation',), primary_condition=ETA1),
    claim_entry("full-cem-matches-llama", "Fig. 3a, sec. 4.3",
           "A full CEM Transformer (T=2, dplr) matches or beats Llama at the optimal learning rate.",
           f"At every size, CEM's Akima-interpolated optimal perplexity is at most {MATCH_TOL:.0%} above Llama's "
           f"(optima per seed, paired).", "rule_full_cem_matches_llama", ('lr_sweep',)),
    claim_entry("full-cem-higher-lr", "Fig. 3a, sec. 4.3",
           "Full CEM Transformers prefer a higher learning rate than Llama.",
           "At every size, CEM's optimal learning rate is higher than Llama's (log2 ratio of the per-seed optima > 0; "
           "an optimum at the grid's edge stands for 'at or beyond the edge').",
           "rule_full_cem_higher_lr", ('lr_sweep',), margin=SESOI_LR, relative_margin=False),
    claim_entry("full-cem-256m", "appendix (256M)",
           "At 256M parameters, full CEM still matches or beats Llama.",
           f"At every size of the sweep, full CEM's perplexity is at most {MATCH_TOL:.0%} above Llama's.",
           "rule_256m", ('scale_256m',)),
    claim_entry("kq-diagonal-matters", "Fig. 3b, sec. 4.4",
           "A diagonal term in A_k is essential for good performance.",
           f"At every size, the best diagonal variant's relative change against CEM attention without a diagonal "
           f"is below -{NEGLIGIBLE:.0%}.", "rule_kq_matters", ('kq_diagonal',)),
    claim_entry("shared-close-to-per-head", "Fig. 3b, sec. 4.4",
           "A diagonal shared across heads is close to per-head diagonals.",
           f"At every size, the shared diagonal's perplexity is equivalent to the per-head one's within "
           f"+-{CLOSE_TOL:.0%} (TOST).",
           "rule_shared_close", ('kq_diagonal',)),
    claim_entry("reuse-vs-recursion-mlp", "Fig. 3c, sec. 4.4",
           "Plain reuse of the MLP block gains little from T=1 to T=2, while CEM MLP recursion gains.",
           f"At every size (relative change T=2 vs T=1): plain reuse's is above -{NEGLIGIBLE:.0%}, each CEM MLP "
           f"setting's is below 0 and below plain reuse's; per eta.",
           "rule_reuse_vs_recursion_mlp", ('reuse_vs_recursion_mlp',), primary="vs reuse", primary_condition=ETA1),
    claim_entry("reuse-vs-recursion-attention", "Fig. 4, appendix D",
           "Plain reuse of the attention block gains little (or hurts), while CEM attention recursion gains.",
           f"At every size (relative change T=2 vs T=1): plain reuse's is above -{NEGLIGIBLE:.0%}, CEM "
           f"attention's is below 0 and below plain reuse's; per eta.",
           "rule_reuse_vs_recursion_attention", ('reuse_vs_recursion_attention',), primary="vs reuse",
           primary_condition=ETA1),
    claim_entry("gp-t2-beats-t1", "Table 3 (GP study)",
           "In the GP study, T=2 beats T=1.",
           "For every kernel, the test RMSE at T=2 is lower than at T=1.",
           "rule_gp_t2_beats_t1", ('gp_recursion',), PAPER_REGIME_GP),
    claim_entry("gp-not-monotonic", "Table 3 (GP study)",
           "In the GP study, gains from more recursion steps are not monotonic.",
           "For at least one kernel, the test RMSE at some T is lower than at the next larger T (effect: RMSE at "
           "the smaller T relative to the larger).",
           "rule_gp_not_monotonic", ('gp_recursion',), PAPER_REGIME_GP, combine="any"),
    claim_entry("test-time-recursion", "beyond the paper (sec. 5.2: future work)",
           "A CEM model trained with T=2 improves when given more recursion steps at test time.",
           "For every T=2-trained CEM cell, test perplexity evaluated with 2T steps is lower than with the T steps it "
           "was trained with (test/ppl_at_steps, paired over seeds); per eta.",
           "rule_test_time_recursion", ('recursion_ablation',), NOT_IN_PAPER, primary_condition=ETA1),
    claim_entry("small-step-t1", "beyond the paper (step size at T=1)",
           "Without recursion (T=1), a smaller CEM step eta=1/2 beats the residual step eta=1, and beats Llama.",
           "For every sublayer, size and preconditioner, perplexity at T=1 eta=1/2 is lower than at T=1 eta=1, and "
           "lower than Llama's.",
           "rule_small_step_t1", ('recursion_ablation',), NOT_IN_PAPER, primary="cem-attn"),
)

#: Claim ids, in paper order: what a sweep file's ``claims:`` may list.
CLAIMS: tuple[str, ...] = tuple(e["id"] for e in CLAIM_ENTRIES)
