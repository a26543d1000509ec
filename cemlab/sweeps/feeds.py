"""What a sweep file's ``figures:`` and ``claims:`` may name: the figure and claim entries (plain
data: an id, the sweeps it is drawn from or judged by, for a claim its statement and rule in words),
the paper's from ``cemlab.paper`` first, then those a plugin registers.

A plugin (a module named in ``CEMLAB_PLUGINS`` or the entry-point group ``cemlab.plugins``,
``cemlab.models.registry``) adds a figure or a claim with ``cemlab.report.registry.register_figure``
/ ``register_claim``, which put the entry here and its builder or rule in the report's registries.
The sweep layer checks ids against these registries without importing the report.
"""

from __future__ import annotations

from cemlab import paper
from cemlab.models.registry import Registry

#: Figure id -> its entry (``id``, ``sweeps``), in page order.
FIGURES: Registry[dict] = Registry("figure id", "figures")
#: Claim id -> its entry (``cemlab.paper.CLAIM_ENTRIES``' keys), in page order.
CLAIMS: Registry[dict] = Registry("claim id", "claims")

for _e in paper.FIGURE_ENTRIES:
    FIGURES.register(_e["id"], _e)
for _e in paper.CLAIM_ENTRIES:
    CLAIMS.register(_e["id"], _e)


def sweeps_listing(registry: Registry[dict], sweep: str) -> list[str]:
    """The ids of ``registry`` whose entry names ``sweep`` among its sweeps, in page order: what the
    sweep file's ``figures:`` (``FIGURES``) or ``claims:`` (``CLAIMS``) lists."""
    return [i for i, e in registry.items() if sweep in e["sweeps"]]
