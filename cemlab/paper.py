"""The paper's figures and claims that cemlab reproduces, by id: what a sweep file's ``figures:``
and ``claims:`` keys may name.

Plain data with no imports, so that loading a sweep file (``cemlab.sweeps.spec``) checks these ids
without loading the report (``cemlab.report``, which may not be imported by the sweep layer). The
report draws each figure with the function of the same name in ``cemlab.report.paper_figures``
and judges each claim with its entry in ``cemlab.report.claims``; a test keeps the three in step.
"""

from __future__ import annotations

#: Paper figures and tables the report draws, in page order (each is a builder's name).
FIGURES: tuple[str, ...] = ("fig2a", "fig2b", "fig2c", "fig2d", "fig3a", "fig3b", "fig3c", "fig4", "table3")

#: Claims the report judges, in paper order (``cemlab.report.claims.CLAIMS``).
CLAIMS: tuple[str, ...] = (
    "attn-small-cost", "mlp-loses-more", "param-matching-recovers", "t2-beats-t1", "precond-t2-not-t1",
    "cem-attn-t2-beats-llama", "full-cem-matches-llama", "full-cem-higher-lr", "full-cem-256m",
    "kq-diagonal-matters", "shared-close-to-per-head", "reuse-vs-recursion-mlp", "reuse-vs-recursion-attention",
    "gp-t2-beats-t1", "gp-not-monotonic", "test-time-recursion",
)
