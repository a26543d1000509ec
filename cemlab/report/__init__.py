"""Reports: the paper's figures, Akima optima and claim verdicts from the runs in MLflow.

``build_report(sweep, scale=None, out=None, tracking_uri=None) -> Path`` (the ``index.html``) is
the entry point; ``cemlab report`` is its command line. Folders by concern (the store is read
through ``cemlab.tracking.runs``): ``inputs`` (the sweep files as the report reads them, ``grids``;
grid x runs and seed aggregation, ``table``), ``stats`` (the paired tests, the decision, the
interval that decided, the worst outcomes' scoring, the looks of a seeded sweep, the ladder's
trends, Akima optima), ``claims`` (the claims of ``cemlab.paper`` bound to their rules,
``catalog``; each claim's rule, ``rules``; verdicts and claims.csv), ``figures`` (the figure
registry ``catalog`` with the shared kit ``plotting``, ``paper_figures``, ``lr_optima``,
``run_figures``, ``ladder_figures``) and ``pages`` (``build`` puts a report together, ``writers``
writes its files, ``render`` the HTML/Markdown page, ``ladder_page`` the across-the-ladder page);
``registry`` (figure builders and claim rules by id; ``register_figure`` / ``register_claim`` for
plugins). A sweep file names what it feeds (``figures:``, ``claims:``, ids in
``cemlab.sweeps.feeds``). Adding a claim: its entry (with its sweeps) in ``cemlab.paper`` and its
rule in ``cemlab.report.claims.rules``; a figure: its builder in
``cemlab.report.figures.paper_figures`` and its entry (with its sweeps) in
``cemlab.paper.FIGURE_ENTRIES`` (and the ids in those sweep files).

Importing this package is cheap; pandas, scipy and matplotlib load on first use.
"""

from __future__ import annotations

__all__ = ["build_report"]


def __getattr__(name: str):
    if name == "build_report":
        from cemlab.report.pages.build import build_report

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
