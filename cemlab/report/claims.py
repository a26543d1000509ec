"""The paper's claims bound to their rules: each entry of ``cemlab.paper.CLAIM_ENTRIES`` (id, paper
reference, claim, rule in words, regime) with the function of ``cemlab.report.claim_rules`` its
entry names, which turns runs into the claim's verdict.

A claim is judged from the runs of the sweeps whose files list it (``cemlab.report.verdicts``).
Adding a claim: its entry in ``cemlab.paper``, its rule in ``claim_rules``, and its id in the
``claims:`` of the sweep files whose runs judge it. An entry whose rule ``claim_rules`` does not
define fails on import, naming the claim and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from cemlab import paper
from cemlab.paper import PAPER_REGIME
from cemlab.report import claim_rules

__all__ = ["Claim", "CLAIMS", "bind", "claims_for"]


@dataclass
class Claim:
    id: str
    paper: str
    claim: str
    rule: str
    evaluate: Callable  # (ClaimData) -> (list[Check], list[str] missing)
    paper_regime: str = PAPER_REGIME
    primary: str = ""
    margin: float = paper.SESOI
    combine: str = "all"


def bind(entries, rules: ModuleType = claim_rules) -> list[Claim]:
    """The claims of ``entries`` (``cemlab.paper.CLAIM_ENTRIES``), each with the rule function of
    ``rules`` its entry names; a ``LookupError`` naming the claim and the rule if there is none."""
    out = []
    for e in entries:
        name = e["function"]
        fn = getattr(rules, name, None) if name.startswith("rule_") else None
        if not callable(fn):
            raise LookupError(f"claim {e['id']!r} (cemlab/paper.py) names the rule {name!r}, which "
                              f"{rules.__name__} does not define: add `def {name}(data: ClaimData)` there, "
                              f"or name one of its rule_* functions")
        out.append(Claim(e["id"], e["paper"], e["claim"], e["rule"], fn, e["paper_regime"], e.get("primary", ""),
                         e.get("margin", paper.SESOI), e.get("combine", "all")))
    return out


#: The claims of the paper, in paper order, and one beyond it.
CLAIMS: list[Claim] = bind(paper.CLAIM_ENTRIES)


def claims_for(ids: list[str]) -> list[Claim]:
    """The claims of ``ids`` (a sweep file's ``claims:``), in paper order."""
    return [c for c in CLAIMS if c.id in ids]
