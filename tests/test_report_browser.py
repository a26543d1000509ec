"""The report page and the MLflow dashboard in a real headless browser (Debian's chromium and
chromedriver, driven by selenium).

1. ``index.html`` of a report: every figure image loads (``naturalWidth > 0``) and the verdict
   table is there with its verdicts.
2. The MLflow dashboard of a real ``mlflow server`` (cemlab's local server on the project store,
   127.0.0.1, a free port, stopped after): the experiment link cemlab writes opens the runs table
   (model-training view, no GenAI overview), the sweep's parent run and, once expanded, every trial
   run are listed by name; the parent's comparison link shows MLflow's plots; the parent run's
   artifacts hold the report.

Screenshots are saved under tmp_path. Install the browser with ``bash scripts/test-prereqs.sh``
(``apt-get install -y chromium chromium-driver``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_support as rs  # noqa: E402
from browser_support import body_text, browser, wait_for  # noqa: E402,F401  (browser: the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

def test_report_page_renders(browser, tmp_path, monkeypatch):
    from selenium.webdriver.common.by import By

    from cemlab.report.pages.build import build

    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(rs.write_sweeps(tmp_path / "sweeps")))
    uri = rs.migrated_store(tmp_path / "template.db", tmp_path / "mlflow.db")
    rs.populate(uri, tmp_path / "artifacts", ["recursion_ablation", "lr_sweep"])
    result = build("recursion_ablation", "smoke", tmp_path / "reports", uri)

    browser.get(result.index_html.as_uri())
    wait_for(lambda: browser.execute_script("return document.readyState") == "complete", what="page load")
    images = browser.find_elements(By.TAG_NAME, "img")
    assert [Path(i.get_attribute("src")).name for i in images] == [f"{f}.png" for f in (
        "fig2c", "fig2d", "energy", "test_time_recursion", "training", "forest")]
    for img in images:
        width = wait_for(lambda: browser.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", img), 30, f"image {img.get_attribute('src')}")
        assert width > 100
    rows = browser.find_elements(By.CSS_SELECTOR, "#verdicts table tbody tr")
    assert len(rows) == len(result.verdicts) == 4
    verdict_cells = browser.find_elements(By.CSS_SELECTOR, "#verdicts td.supported")
    # t2-beats-t1, precond-t2-not-t1 and cem-attn-t2-beats-llama (tests/test_report.py, EXPECTED_VERDICTS)
    assert [c.text for c in verdict_cells] == ["supported"] * 3
    # the test-time curves of the crafted runs rise beyond the trained T: contradicted
    assert [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#verdicts td.contradicted")] == ["contradicted"]
    assert "t2-beats-t1" in body_text(browser)
    assert "scale smoke" in body_text(browser) and "3 seeds" in body_text(browser)  # the regime of each verdict
    # readable at 1280 px: wide tables scroll inside their box, the page itself does not
    browser.set_window_size(1280, 2400)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 1280
    assert browser.find_elements(By.CSS_SELECTOR, "#comparisons + figure img, #comparisons ~ div.scroll table")
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_mlflow_dashboard_lists_the_sweeps_runs(browser, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    from cemlab.report.pages.build import build
    from cemlab.sweeps.sweepfile.load import load_sweep
    from cemlab.tracking import server
    from cemlab.tracking.conventions import describe_sweep_run, experiment_url, run_url

    monkeypatch.setenv("CEMLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("CEMLAB_SWEEPS_DIR", str(rs.write_sweeps(tmp_path / "sweeps")))
    url = server.start_server()
    try:
        rs.populate(url, tmp_path / "unused", ["recursion_ablation"])
        result = build("recursion_ablation", "smoke", tmp_path / "reports", url)
        client = MlflowClient(url)
        assert result.parent_run_id and result.publish_error is None
        assert "report/index.html" in {a.path for a in client.list_artifacts(result.parent_run_id, "report")}
        exp = client.get_experiment_by_name("cemlab/recursion_ablation")
        parent_name = client.get_run(result.parent_run_id).info.run_name
        trial_names = [t.trial_id for t in load_sweep("recursion_ablation").expand("smoke")]

        # the link cemlab prints and writes opens the runs table (model-training view), not the GenAI
        # overview of traces that MLflow 3 shows an experiment on by default
        assert run_url(url, exp.experiment_id, result.parent_run_id) in result.index_html.read_text()
        browser.get(experiment_url(url, exp.experiment_id))
        wait_for(lambda: parent_name in body_text(browser), what=f"parent run {parent_name} in the runs table")
        text = body_text(browser)
        assert browser.save_screenshot(str(tmp_path / "experiment.png"))
        assert "Detect Issues" not in text and "No data available" not in text
        assert browser.find_elements(By.CSS_SELECTOR, "[role='grid'], table"), "no runs table"
        # trial runs are nested under the parent: expand it, as a user would
        for button in browser.find_elements(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']"):
            button.click()
        wait_for(lambda: all(n in body_text(browser) for n in trial_names), what="every trial run name")
        shot = tmp_path / "dashboard.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

        # the comparison link of the parent's description
        trial_ids = [r.info.run_id for r in client.search_runs([exp.experiment_id])
                     if r.info.run_id != result.parent_run_id]
        compare = describe_sweep_run(client, result.parent_run_id, sweep="recursion_ablation", figure="Fig 2c",
                                     scale="smoke", description="", run_ids=trial_ids)
        browser.get(compare)
        wait_for(lambda: "Parallel Coordinates" in body_text(browser), what="the comparison page's plots")
        assert browser.save_screenshot(str(tmp_path / "compare.png"))

        browser.get(f"{url}/#/experiments/{exp.experiment_id}/runs/{result.parent_run_id}/artifacts")
        wait_for(lambda: "report" in body_text(browser).split(), what="the report folder among the artifacts")
        browser.save_screenshot(str(tmp_path / "artifacts.png"))
    finally:
        server.stop_server()
