"""The divergence scoring: which trials are a worst outcome (a divergence, a metric that is not
finite or no better than chance, whatever the run's status says: ``worst_outcomes``), scored below
every finished run for the paired tests (``outcomes``; ``cemlab.report.stats.bounds.paired_diffs_by_seed``
scores them where they weaken no test against their cell) or at the metric's chance value on a
learning-rate curve (``at_chance``), and the per-cell counts a comparison names (``UNUSABLE``). The
statuses are those of ``cemlab.tracking.outcomes``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cemlab.report.stats.bounds import WORST
from cemlab.tracking.outcomes import DIVERGED, RESULTS


def worst_outcomes(trials: pd.DataFrame) -> np.ndarray:
    """Which trials are a **worst outcome**: a result (finished or diverged; not a failure, an
    interruption or an early stop) that is a divergence, or whose metric is not finite, or no better
    than the metric's chance value (``chance``, ``Task.chance_value``: for perplexity the vocabulary
    size, a model that learned nothing), whatever its status says."""
    if trials.empty or "status" not in trials:
        return np.zeros(len(trials), dtype=bool)
    status = trials["status"].to_numpy()
    value = trials["value"].to_numpy(dtype=float) if "value" in trials else np.full(len(trials), np.nan)
    chance = trials["chance"].to_numpy(dtype=float) if "chance" in trials else np.full(len(trials), np.nan)
    with np.errstate(invalid="ignore"):
        exploded = ~np.isfinite(value) | (np.isfinite(chance) & (value >= chance))
    return (status == DIVERGED) | (np.isin(status, RESULTS) & exploded)


def outcomes(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials with every worst outcome (``worst_outcomes``) at ``WORST`` (infinite), test and
    validation alike: an outcome of its cell, ranked below every run that finished, which the paired
    tests score where it weakens no test against its cell (``bounds.paired_diffs_by_seed``). A failed
    (crashed) run keeps no value: its seed does not pair, as a seed not yet run."""
    hit = worst_outcomes(trials)
    if not hit.any():
        return trials
    out = trials.copy()
    out.loc[hit, "value"] = WORST
    if "val" in out:
        out.loc[hit, "val"] = WORST
    return out


def at_chance(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials with every worst outcome (``worst_outcomes``) at its metric's chance value: a
    learning-rate curve's point where a run diverged (a rate where it diverged is no optimum). Without
    a known chance value a worst outcome keeps no value."""
    hit = worst_outcomes(trials)
    if not hit.any() or "chance" not in trials:
        return trials
    chance = trials["chance"].to_numpy(dtype=float)
    out = trials.copy()
    out.loc[hit, "value"] = chance[hit]
    if "val" in out:
        out.loc[hit, "val"] = chance[hit]
    return out


#: Per candidate, the outcomes a comparison names (``Check.diverged``): a diverged seed and a finished
#: one whose metric is not finite or no better than chance are worst outcomes (``outcomes``), a failed
#: one has no value (its seed does not pair there).
UNUSABLE = ("n_diverged", "n_exploded", "n_failed")
#: Of those, the ones that are outcomes of their cell.
WORST_COUNTS = ("n_diverged", "n_exploded")


def usable_cells(d: pd.DataFrame) -> np.ndarray:
    """Cells with an outcome at some seed: a finished run with a value, or a worst outcome."""
    ok = np.isfinite(d["mean"].to_numpy(dtype=float))
    for col in WORST_COUNTS:
        if col in d:
            ok |= d[col].fillna(0).to_numpy(dtype=float) > 0
    return ok


def outcome_note(r) -> str:
    words = {"n_diverged": "diverged (the worst outcome)",
             "n_exploded": "finished with a non-finite or chance-level metric (the worst outcome)",
             "n_failed": "failed (no value)"}
    return (f"{r.get('variant', '')} lr={float(r['lr']):.3g}: "
            + ", ".join(f"{int(r[c])} {words[c]}" for c in UNUSABLE if c in r and r[c] > 0)
            + f" of {int(r.get('n_expected', 0))} seeds")
