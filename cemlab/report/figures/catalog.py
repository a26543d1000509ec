"""The report's figures by id: the paper figures a sweep file's ``figures:`` names, and the figures
every sweep's report tries.

Every builder takes the report context (``cemlab.report.inputs.context.ReportContext``) and returns a
``Figure`` (``cemlab.report.figures.plotting``; None when the sweep holds no data for it): a matplotlib
figure, the DataFrames written as CSV, a caption. Paper figures are in
``cemlab.report.figures.paper_figures``, each named by its id in ``cemlab.paper.FIGURES`` (the ids sweep
files are checked against); the others in ``cemlab.report.figures.run_figures``: ``energy`` (energy after
each recursion step), ``test_time_recursion`` (test metric with the recursion steps changed at
evaluation only), ``training`` (curves) and ``params`` (parameters and FLOPs per cell); ``lr_tuning``
(``cemlab.report.figures.lr_tuning``: each cell's learning rates, best rate, edge and Akima optimum).

Adding a paper figure: its builder in ``paper_figures``, its entry (id and sweeps) in
``cemlab.paper.FIGURE_ENTRIES``, and the id in the ``figures:`` of the sweep files its entry names;
or both registered by a plugin (``cemlab.report.registry.register_figure``).
"""

from __future__ import annotations

from typing import Callable

from cemlab import paper
from cemlab.report.figures import paper_figures
from cemlab.report.registry import BUILDERS
from cemlab.report.figures.plotting import Figure
from cemlab.report.figures.lr_tuning import lr_tuning
from cemlab.report.figures.run_figures import energy, params, test_time, training
from cemlab.sweeps import feeds
__all__ = ["Figure", "PAPER_FIGURES", "GENERIC_FIGURES", "paper_figures_for"]

#: Paper figures by id, in page order.
PAPER_FIGURES: dict[str, Callable] = {fid: getattr(paper_figures, fid) for fid in paper.FIGURES}
for _fid, _builder in PAPER_FIGURES.items():
    BUILDERS.register(_fid, _builder)
#: Figures every sweep's report tries.
GENERIC_FIGURES: dict[str, Callable] = {"lr_tuning": lr_tuning, "energy": energy, "test_time_recursion": test_time,
                                        "training": training, "params": params}


def paper_figures_for(ids: list[str]) -> list[Callable]:
    """The builders of the figure ids ``ids`` (a sweep file's ``figures:``), in page order: the
    paper's, then those plugins registered (``cemlab.sweeps.feeds.FIGURES``)."""
    return [BUILDERS[fid] for fid in feeds.FIGURES.names() if fid in ids]
