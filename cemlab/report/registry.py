"""The report's figures and claims by id, and how a module outside cemlab adds one.

Each figure id (``cemlab.sweeps.feeds.FIGURES``) has a builder here (``BUILDERS``: a function of
the report context returning a ``Figure`` or None), each claim id (``cemlab.sweeps.feeds.CLAIMS``)
a rule (``RULES``: a function of ``ClaimData`` returning its comparisons and what was missing). The
paper's are bound by name: the builder of the same name in ``cemlab.report.figures.paper_figures``, the
rule its entry names (``function``) in ``cemlab.report.claims.rules``; ``cemlab.report.claims.catalog``
binds them on import and fails naming a claim whose rule is missing.

A plugin (``cemlab.models.registry``: a module named in ``CEMLAB_PLUGINS`` or in the entry-point
group ``cemlab.plugins``) registers on import::

    from cemlab.report.registry import register_claim, register_figure

    register_figure("fig9", my_builder, sweeps=["my_sweep"])
    register_claim(dict(id="my-claim", paper="...", claim="...", rule="...", sweeps=["my_sweep"]), my_rule)

and lists the ids in its sweep file's ``figures:`` and ``claims:``.

A figure of the across-the-ladder page (``cemlab.report.pages.ladder_page``) registers the same way, with
``ladder=True``: its builder takes the page's rows (the frame of ``ladder.csv``: one row per
comparison and rung) and returns a ``Figure`` or None, and the ladder page of every sweep in
``sweeps`` draws it (no sweeps: every ladder's page), after the page's own forest and trend, which
register so themselves::

    register_figure("my_ladder_fig", my_ladder_builder, sweeps=["recursion_ablation"], ladder=True)
"""

from __future__ import annotations

from typing import Callable, Iterable

from cemlab import paper
from cemlab.models.registry import Registry
from cemlab.sweeps import feeds
#: Figure id -> builder (``(ReportContext) -> Figure | None``).
BUILDERS: Registry[Callable] = Registry("figure builder", "figures")
#: Claim id -> rule (``(ClaimData) -> (list[Check], list[str] missing)``).
RULES: Registry[Callable] = Registry("claim rule", "claims")
#: Ladder figure id -> its entry (``id``, ``sweeps``: the sweeps whose ladder page draws it, empty
#: for every ladder; ``builder``: ``(ladder rows: pd.DataFrame) -> Figure | None``), in page order.
LADDER_FIGURES: Registry[dict] = Registry("ladder figure", "ladder figures")


def register_figure(fid: str, builder: Callable, sweeps: Iterable[str], ladder: bool = False) -> Callable:
    """Add figure ``fid``, drawn by ``builder`` from the runs of ``sweeps`` (whose files list
    ``fid`` under ``figures:``). With ``ladder``: a figure of the ladder page of ``sweeps`` (every
    ladder's when empty), drawn by ``builder`` from the page's ``ladder.csv`` rows. An id already
    taken is an error (``Registry.register``)."""
    entry = dict(id=fid, sweeps=tuple(sweeps))
    if ladder:
        LADDER_FIGURES.register(fid, {**entry, "builder": builder})
        return builder
    feeds.FIGURES.register(fid, entry)
    BUILDERS.register(fid, builder)
    return builder


def ladder_figures_for(sweep: str) -> list[Callable]:
    """The builders of the figures on ``sweep``'s ladder page, in page order."""
    return [e["builder"] for _, e in LADDER_FIGURES.items() if not e["sweeps"] or sweep in e["sweeps"]]


def register_claim(entry: dict, rule: Callable) -> Callable:
    """Add the claim of ``entry`` (the arguments of ``cemlab.paper.claim_entry``: ``id``, ``paper``,
    ``claim``, ``rule`` in words and ``sweeps`` required; ``paper_regime`` (default: not in the
    paper), ``primary``, ``margin``, ``combine`` optional), judged by ``rule`` from the cells of its
    ``sweeps``."""
    try:
        full = paper.claim_entry(**{"function": getattr(rule, "__name__", ""), "paper_regime": paper.NOT_IN_PAPER,
                                    **entry})
    except TypeError as e:  # a key missing or unknown: Python names it
        raise ValueError(f"claim entry {entry.get('id', '?')!r}: {e} (the keys of cemlab.paper.claim_entry)") from None
    feeds.CLAIMS.register(full["id"], full)
    RULES.register(full["id"], rule)
    return rule
