"""The paper's claims as data: what each states, where in the paper, the rule (in words) that
turns runs into its verdict, and the function that applies it (``cemlab.report.claim_rules``).

Each claim's id is in ``cemlab.paper.CLAIMS``, the ids a sweep file's ``claims:`` may list; a
claim is judged from the runs of the sweeps whose files list it (``cemlab.report.verdicts``). Adding
a claim: its entry here, its rule in ``claim_rules``, its id in ``cemlab.paper.CLAIMS`` and in the
``claims:`` of the sweep files whose runs judge it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cemlab.report.claim_rules import (CLOSE_TOL, MATCH_TOL, NEGLIGIBLE, SMALL_COST, rule_256m,
                                       rule_attn_small_cost, rule_cem_attn_t2_beats_llama, rule_full_cem_higher_lr,
                                       rule_full_cem_matches_llama, rule_gp_not_monotonic, rule_gp_t2_beats_t1,
                                       rule_kq_matters, rule_mlp_loses_more, rule_param_matching_recovers,
                                       rule_precond_t2_not_t1, rule_reuse, rule_shared_close, rule_t2_beats_t1,
                                       rule_test_time_recursion)
from cemlab.report.verdicts import PAPER_REGIME, PAPER_REGIME_GP

__all__ = ["Claim", "CLAIMS", "claims_for"]


@dataclass
class Claim:
    id: str
    paper: str
    claim: str
    rule: str
    evaluate: Callable  # (ClaimData) -> (list[Check], list[str] missing)
    paper_regime: str = PAPER_REGIME


# ----------------------------------------------------------------------------------------------
# the claims of the paper, in paper order, and one beyond it
# ----------------------------------------------------------------------------------------------

CLAIMS: list[Claim] = [
    Claim("attn-small-cost", "Fig. 2a, sec. 4.1",
          "Replacing attention by CEM attention (T=1, about half the attention parameters) costs little perplexity.",
          f"At every size, CEM attention's perplexity is at most {SMALL_COST:.0%} above Llama's (paired over seeds).",
          rule_attn_small_cost),
    Claim("mlp-loses-more", "Fig. 2b, sec. 4.1",
          "CEM MLPs lose more perplexity than CEM attention.",
          "At every size, the relative perplexity increase of the dimension-matched CEM MLP over Llama is larger "
          "than that of CEM attention.", rule_mlp_loses_more),
    Claim("param-matching-recovers", "Fig. 2b, sec. 4.1",
          "Parameter matching (hidden width x1.5) recovers some of the CEM MLP's loss.",
          "At every size, the parameter-matched CEM MLP has lower perplexity than the dimension-matched one.",
          rule_param_matching_recovers),
    Claim("t2-beats-t1", "Fig. 2c/2d, sec. 4.2",
          "Recursion T=2 beats T=1 (CEM attention and CEM MLP).",
          "For every sublayer, size and preconditioner, perplexity at T=2 is lower than at T=1; judged per step "
          "size eta of the T=2 cells.", rule_t2_beats_t1),
    Claim("precond-t2-not-t1", "Fig. 2c/2d, sec. 4.2",
          "Preconditioners have little effect at T=1 but help at T=2.",
          f"Gain of the richest preconditioner over the simplest (dplr over diag, or over none), averaged over "
          f"sublayers and sizes per seed: within +-{NEGLIGIBLE:.0%} at T=1, above {NEGLIGIBLE:.0%} and above the "
          f"T=1 gain at T=2; per eta.", rule_precond_t2_not_t1),
    Claim("cem-attn-t2-beats-llama", "Fig. 2c, sec. 4.2",
          "CEM attention with T=2 (and a preconditioner) beats Llama attention.",
          "At every size, the best CEM attention at T=2 has lower perplexity than Llama; per eta.",
          rule_cem_attn_t2_beats_llama),
    Claim("full-cem-matches-llama", "Fig. 3a, sec. 4.3",
          "A full CEM Transformer (T=2, dplr) matches or beats Llama at the optimal learning rate.",
          f"At every size, CEM's Akima-interpolated optimal perplexity is at most {MATCH_TOL:.0%} above Llama's "
          f"(optima per seed, paired).", rule_full_cem_matches_llama),
    Claim("full-cem-higher-lr", "Fig. 3a, sec. 4.3",
          "Full CEM Transformers prefer a higher learning rate than Llama.",
          "At every size, CEM's optimal learning rate is higher than Llama's (log2 ratio of the per-seed optima > 0; "
          "an optimum at the grid's edge stands for 'at or beyond the edge').", rule_full_cem_higher_lr),
    Claim("full-cem-256m", "appendix (256M)",
          "At 256M parameters, full CEM still matches or beats Llama.",
          f"At every size of the sweep, full CEM's perplexity is at most {MATCH_TOL:.0%} above Llama's.", rule_256m),
    Claim("kq-diagonal-matters", "Fig. 3b, sec. 4.4",
          "A diagonal term in A_k is essential for good performance.",
          f"At every size, CEM attention without a diagonal is more than {NEGLIGIBLE:.0%} worse than the best "
          f"diagonal variant.", rule_kq_matters),
    Claim("shared-close-to-per-head", "Fig. 3b, sec. 4.4",
          "A diagonal shared across heads is close to per-head diagonals.",
          f"At every size, the shared diagonal's perplexity is at most {CLOSE_TOL:.0%} above the per-head one's.",
          rule_shared_close),
    Claim("reuse-vs-recursion-mlp", "Fig. 3c, sec. 4.4",
          "Plain reuse of the MLP block gains little from T=1 to T=2, while CEM MLP recursion gains.",
          f"At every size, plain reuse gains at most {NEGLIGIBLE:.0%} and each CEM MLP setting gains more than "
          f"0 and more than plain reuse; per eta.",
          rule_reuse("reuse_vs_recursion_mlp", attention=False)),
    Claim("reuse-vs-recursion-attention", "Fig. 4, appendix D",
          "Plain reuse of the attention block gains little (or hurts), while CEM attention recursion gains.",
          f"At every size, plain reuse gains at most {NEGLIGIBLE:.0%} and CEM attention gains more than 0 and "
          f"more than plain reuse; per eta.",
          rule_reuse("reuse_vs_recursion_attention", attention=True)),
    Claim("gp-t2-beats-t1", "Table 3 (GP study)",
          "In the GP study, T=2 beats T=1.",
          "For every kernel, the test RMSE at T=2 is lower than at T=1.", rule_gp_t2_beats_t1, PAPER_REGIME_GP),
    Claim("gp-not-monotonic", "Table 3 (GP study)",
          "In the GP study, gains from more recursion steps are not monotonic.",
          "For at least one kernel, the test RMSE rises from one T to the next larger T.",
          rule_gp_not_monotonic, PAPER_REGIME_GP),
    Claim("test-time-recursion", "beyond the paper (sec. 5.2: future work)",
          "A CEM model trained with T=2 improves when given more recursion steps at test time.",
          "For every T=2-trained CEM cell, test perplexity evaluated with 2T steps is lower than with the T steps it "
          "was trained with (test/ppl_at_steps, paired over seeds); per eta.",
          rule_test_time_recursion, "not in the paper"),
]


def claims_for(ids: list[str]) -> list[Claim]:
    """The claims of ``ids`` (a sweep file's ``claims:``), in paper order."""
    return [c for c in CLAIMS if c.id in ids]
