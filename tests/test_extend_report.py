"""Extending the report from outside cemlab: a plugin module (tests/plugins/extra_figure.py, named
in ``CEMLAB_PLUGINS``) registers a figure and a claim; a new sweep file (in a test-only sweeps
folder) lists them; a smoke sweep runs (real Ray, a real MLflow server) and its report has the new
figure's files, the claim's verdict on the page and in claims.csv, and its comparisons in
comparisons.csv. No file of the package changes for it.

The plugin's registrations are undone after the test (the registries are process-wide), so that
other test modules in the same session see the project's own figures and claims only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cemlab.models.registry import plugins_scope
from sweep_support import linked_files, local_sweeps, run

pytestmark = pytest.mark.slow

PLUGIN = "plugins.extra_figure"

EXTRA_SWEEP = """\
figure: "extra"
figures: [extra_gap]
claims: [extra-cem-attn-close]
description: A sweep written by a test, feeding a figure and a claim registered by a plugin.
task: lm
axes:
  size: [86m]
  lr: [2.0e-3]
  seed: [0, 1]
variants:
  - group: llama
    label: llama
  - group: cem-attn
    label: "cem-attn T1"
    set:
      model.attention: cem
      model.kq_diagonal: shared
"""


@pytest.fixture
def plugin(monkeypatch):
    """``CEMLAB_PLUGINS`` names the plugin; the registries are restored afterwards."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    monkeypatch.setenv("CEMLAB_PLUGINS", PLUGIN)
    with plugins_scope():
        yield


@pytest.fixture
def sweep_env(runs_dir, tmp_path, monkeypatch, ray_local, plugin):
    from cemlab.tracking.server import stop_server

    monkeypatch.setenv("CEMLAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, extra_attention=EXTRA_SWEEP)))
    monkeypatch.delenv("CEMLAB_SWEEP_FAULTS", raising=False)
    yield runs_dir
    stop_server()


def test_without_the_plugin_the_new_ids_are_unknown(tmp_path, monkeypatch):
    """The sweep file alone fails naming the figure id (the plugin is what makes it known)."""
    from cemlab.sweeps.sweepfile.schema import SweepError
    from cemlab.sweeps.sweepfile.load import load_sweep

    monkeypatch.delenv("CEMLAB_PLUGINS", raising=False)
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(local_sweeps(tmp_path, extra_attention=EXTRA_SWEEP)))
    with pytest.raises(SweepError, match="extra_gap"):
        load_sweep("extra_attention")


def test_a_plugin_adds_a_figure_and_a_claim_to_a_sweeps_report(sweep_env, data_cache):
    from cemlab.report.claims.catalog import all_claims
    from cemlab.sweeps import feeds
    result = run("extra_attention", data_cache)
    assert result.exit_code == 0, [(o.trial.trial_id, o.status, o.error) for o in result.outcomes]
    assert len(result.outcomes) == 4 and result.report is not None, getattr(result, "report_error", None)
    # registered by name, after the paper's own
    assert feeds.FIGURES.names()[-1] == "extra_gap" and feeds.CLAIMS.names()[-1] == "extra-cem-attn-close"
    assert [c.sweeps for c in all_claims() if c.id == "extra-cem-attn-close"] == [("extra_attention",)]

    out = Path(result.report).parent
    files = {p.name for p in out.iterdir()}
    assert {"extra_gap.png", "extra_gap.pdf", "extra_gap.csv"} <= files
    gap = pd.read_csv(out / "extra_gap.csv")
    assert list(gap["size"]) == ["86m"] and (gap["gap"] == gap["cem_attn"] - gap["llama"]).all()
    assert all((out / f).is_file() for f in linked_files(Path(result.report)))

    claims = pd.read_csv(out / "claims.csv")
    assert list(claims["id"]) == ["extra-cem-attn-close"]
    row = claims.iloc[0]
    assert row["sweeps"] == "extra_attention" and row["n_comparisons"] == 1 and row["n_seeds"] == 2
    assert row["verdict"] in ("supported", "contradicted", "inconclusive")
    comparisons = pd.read_csv(out / "comparisons.csv")
    mine = comparisons[comparisons["id"] == "extra-cem-attn-close"]
    assert len(mine) == 1 and mine.iloc[0]["comparison"] == "86m" and mine.iloc[0]["threshold"] == 0.5
    assert mine.iloc[0]["verdict"] == row["verdict"] and mine.iloc[0]["n"] == 2

    page = Path(result.report).read_text()
    assert "extra-cem-attn-close" in page and "CEM attention is within 50% of Llama." in page
    assert 'src="extra_gap.png"' in page
