"""A sweep run with ``key=value`` overrides can be reported: the report's grids are the overridden
trials (their config hashes, so the runs in the store match), and the sweep's end builds it."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace

from rich.console import Console

from cemlab import cli
from cemlab.report.pages.build import SweepGrids
from cemlab.sweeps.sweepfile.load import load_sweep

OVERRIDES = ["data.max_chars=200000"]


def test_report_grids_are_the_overridden_trials():
    plain = {t.config_hash for t in load_sweep("recursion_ablation").expand("smoke")}
    ran = {t.config_hash for t in load_sweep("recursion_ablation").expand("smoke", overrides=OVERRIDES)}
    assert ran.isdisjoint(plain)  # on main, the report read `plain` and found no runs ("NO RUNS")
    grids = SweepGrids(OVERRIDES)
    assert {t.config_hash for t in grids.trials("recursion_ablation", "smoke")} == ran
    # a sweep an override does not fit (the GP study has no precond axis) keeps its own grid
    axis = SweepGrids(["precond=[diag]"])
    assert {t.axes["precond"] for t in axis.trials("recursion_ablation", "smoke") if "precond" in t.axes} == {"diag"}
    assert [t.config_hash for t in axis.trials("gp_recursion", "smoke")] == [
        t.config_hash for t in load_sweep("gp_recursion").expand("smoke")]


def test_sweep_end_builds_the_report_with_its_overrides(monkeypatch):
    import cemlab.report as report

    seen = {}

    def fake_build_report(sweep, scale=None, tracking_uri=None, overrides=None):
        seen.update(sweep=sweep, scale=scale, overrides=overrides)
        return "reports/recursion_ablation/index.html"

    monkeypatch.setattr(report, "build_report", fake_build_report)
    result = SimpleNamespace(interrupted=False, store_error=None, sweep="recursion_ablation", scale="smoke",
                             tracking_uri="sqlite:///x.db", report=None, report_error=None)
    out = io.StringIO()
    cli.report_after_sweep(result, Console(file=out, width=80), OVERRIDES)
    assert seen == {"sweep": "recursion_ablation", "scale": "smoke", "overrides": OVERRIDES}
    assert result.report == "reports/recursion_ablation/index.html"
    assert out.getvalue() == "Report: reports/recursion_ablation/index.html\n"


def test_report_command_takes_overrides_beside_sweep_names():
    from cemlab.report import cli as report_cli

    p = argparse.ArgumentParser()
    report_cli.add_arguments(p)
    args = p.parse_args(["recursion_ablation", "data.max_chars=200000", "--scale", "smoke"])
    assert args.sweeps == ["recursion_ablation", "data.max_chars=200000"]  # split in run(): names / overrides
