"""The claims bound to their rules: each claim entry (``cemlab.paper.CLAIM_ENTRIES``, then those a
plugin registers: ``cemlab.report.registry``) with its rule, which turns runs into the claim's
verdict: for the paper's claims the function its entry names, in ``cemlab.report.claims.rules`` or
``cemlab.report.claims.recursion_rules`` (``RULE_MODULES``).

A claim is judged from the runs of the sweeps its entry names (``sweeps``); the sweep files that
list it under ``claims:`` are those sweeps (tests/test_sweep_files.py keeps them in step). Adding a
claim: its entry in ``cemlab.paper``, its rule in one of ``RULE_MODULES``, and its id in the ``claims:``
of the sweep files its entry names (or both registered by a plugin). An entry whose rule no module of
``RULE_MODULES`` defines fails on import, naming the claim, the rule and the modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from cemlab import paper
from cemlab.paper import PAPER_REGIME
from cemlab.report.claims import recursion_rules, rules as claim_rules
from cemlab.report.registry import RULES
from cemlab.sweeps import feeds
__all__ = ["Claim", "CLAIMS", "all_claims", "bind", "claims_for"]


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
    sweeps: tuple[str, ...] = ()
    primary_condition: str = ""
    relative_margin: bool = True  # margin a relative change (False: on the effect's own scale)


def _claim(e: dict, fn: Callable) -> Claim:
    return Claim(e["id"], e["paper"], e["claim"], e["rule"], fn, e["paper_regime"], e.get("primary", ""),
                 e.get("margin", paper.SESOI), e.get("combine", "all"), tuple(e.get("sweeps", ())),
                 e.get("primary_condition", ""), e.get("relative_margin", True))


#: The modules the paper's claims' rules live in (a rule is a ``rule_*`` function of one of them).
RULE_MODULES: tuple[ModuleType, ...] = (claim_rules, recursion_rules)


def bind(entries, modules: tuple[ModuleType, ...] = RULE_MODULES) -> list[Claim]:
    """The claims of ``entries`` (``cemlab.paper.CLAIM_ENTRIES``), each with the rule function its entry
    names, found in ``modules`` (``RULE_MODULES``); a ``LookupError`` naming the claim, the rule and
    the modules if none defines it."""
    out = []
    for e in entries:
        name = e["function"]
        found = [getattr(m, name, None) for m in modules] if name.startswith("rule_") else []
        fn = next((f for f in found if callable(f)), None)
        if fn is None:
            where = " or ".join(m.__name__ for m in modules)
            raise LookupError(f"claim {e['id']!r} (cemlab/paper.py) names the rule {name!r}, which {where} "
                              f"does not define: add `def {name}(data: ClaimData)` to one of them, or name one "
                              f"of their rule_* functions")
        out.append(_claim(e, fn))
    return out


#: The claims of the paper, in paper order, and the ones beyond it.
CLAIMS: list[Claim] = bind(paper.CLAIM_ENTRIES)
for _c in CLAIMS:
    RULES.register(_c.id, _c.evaluate)


def all_claims() -> list[Claim]:
    """Every claim, the paper's first, then those plugins registered, in page order."""
    return [_claim(e, RULES[cid]) for cid, e in feeds.CLAIMS.items()]


def claims_for(ids: list[str]) -> list[Claim]:
    """The claims of ``ids`` (a sweep file's ``claims:``), in page order."""
    return [c for c in all_claims() if c.id in ids]
