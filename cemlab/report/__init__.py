"""Reports: the paper's figures, Akima optima and claim verdicts from the runs in MLflow.

``build_report(sweep, scale=None, out=None, tracking_uri=None) -> Path`` (the ``index.html``) is
the entry point; ``cemlab report`` is its command line. Modules (the store is read through
``cemlab.tracking.runs``): ``table`` (grid x runs, seed aggregation), ``akima`` and ``lr_optima`` (optimal learning rate),
``figures`` (the figure registry) with ``plotting`` (shared figure kit), ``paper_figures`` and
``run_figures``; ``claims`` (the claims of ``cemlab.paper`` bound to their rules), ``claim_rules``
(each claim's rule), ``stats`` and ``verdicts`` (intervals, verdicts, claims.csv); ``render``
(HTML/Markdown page), ``build`` (putting it together), ``registry`` (figure builders and claim
rules by id; ``register_figure`` / ``register_claim`` for plugins). A sweep file names what it feeds
(``figures:``, ``claims:``, ids in ``cemlab.sweeps.feeds``). Adding a claim: its entry (with its
sweeps) in ``cemlab.paper`` and its rule in ``claim_rules``; a figure: its builder in
``paper_figures`` and its entry (with its sweeps) in ``cemlab.paper.FIGURE_ENTRIES`` (and the ids
in those sweep files).

Importing this package is cheap; pandas, scipy and matplotlib load on first use.
"""

from __future__ import annotations

__all__ = ["build_report"]


def __getattr__(name: str):
    if name == "build_report":
        from cemlab.report.pages.build import build_report

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
