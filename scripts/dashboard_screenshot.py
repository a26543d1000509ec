"""Screenshots of a sweep in MLflow's dashboard, taken by a real headless browser (Debian's chromium
and chromedriver, driven by selenium), for the README:

    cemlab sweep lr_sweep --scale smoke        # any sweep with runs
    python scripts/dashboard_screenshot.py lr_sweep --scale smoke --out docs/images

writes ``dashboard-sweep.png`` (the sweep's parent run page: its description and the link to the
comparison view) and ``dashboard-compare.png`` (MLflow's comparison of the sweep's trials, the
``cemlab.compare_url`` tag of the parent run). The dashboard is the project's local server (started
if needed) or ``$MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--hide-scrollbars"]


def _wait_text(driver, text: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in driver.find_element("tag name", "body").text:
            return
        time.sleep(0.5)
    raise SystemExit(f"the page never showed {text!r}: {driver.current_url}")


def _click(driver, label: str) -> None:
    """Click the button with this aria-label, if the page has one."""
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, f"button[aria-label='{label}']"):
        if button.is_displayed():
            button.click()
            time.sleep(0.5)
            return


def _choose(driver, params: list[str], metric: str) -> None:
    """Plot ``params`` against ``metric`` in the parallel coordinates (the page picks its own first):
    open each of the two select boxes and click the options by their title."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    for button in driver.find_elements(By.XPATH, "//button[normalize-space()='Clear All']"):
        button.click()
        time.sleep(1)
    for index, values in ((0, params), (1, [metric])):
        boxes = [b for b in driver.find_elements(By.CSS_SELECTOR, "div[class$='-select-selector']") if b.is_displayed()]
        if len(boxes) <= index:
            return
        boxes[index].click()
        time.sleep(1)
        for value in values:  # the option list is virtual: scroll it until the option is rendered
            for _ in range(60):
                options = [o for o in driver.find_elements(By.CSS_SELECTOR, f"div[title='{value}']") if o.is_displayed()]
                if options:
                    options[0].click()
                    time.sleep(0.7)
                    break
                driver.execute_script("for (const h of document.querySelectorAll('.rc-virtual-list-holder')) "
                                      "{ if (h.offsetParent) h.scrollTop += 120; }")
                time.sleep(0.2)
            driver.execute_script("for (const h of document.querySelectorAll('.rc-virtual-list-holder')) "
                                  "{ if (h.offsetParent) h.scrollTop = 0; }")
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
        time.sleep(0.7)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep")
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--out", default="docs/images")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--params", nargs="+", default=["train.lr", "train.seed", "model.attention"],
                        help="params of the parallel coordinates plot")
    parser.add_argument("--metric", default="test/ppl")
    args = parser.parse_args(argv)

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from cemlab.tracking import schema
    from cemlab.tracking.conventions import COMPARE_URL, run_url
    from cemlab.tracking.server import shared_tracking_uri
    from cemlab.tracking.store import get_client, search_runs

    uri = shared_tracking_uri()
    client = get_client(uri)
    exp = client.get_experiment_by_name(f"cemlab/{args.sweep}")
    if exp is None:
        raise SystemExit(f"no experiment cemlab/{args.sweep} in {uri}: run `cemlab sweep {args.sweep}` first")
    parents = search_runs(client, [exp.experiment_id], f"tags.`{schema.ROLE}` = 'sweep' and "
                                                       f"tags.`{schema.SCALE}` = '{args.scale}'")
    parents = [p for p in parents if COMPARE_URL in p.data.tags]
    if not parents:
        raise SystemExit(f"no parent run of {args.sweep} at scale {args.scale} with a comparison link in {uri}")
    parent = max(parents, key=lambda r: r.info.start_time or 0)
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        raise SystemExit("chromium and chromedriver are needed: bash scripts/test-prereqs.sh")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = Options()
    options.binary_location = chromium
    with tempfile.TemporaryDirectory() as profile:
        for flag in CHROME_FLAGS + [f"--user-data-dir={profile}", f"--window-size={args.width},{args.height}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
        try:
            driver.set_page_load_timeout(120)
            driver.get(run_url(uri, exp.experiment_id, parent.info.run_id))
            _wait_text(driver, "Compare its")
            _click(driver, "Close")  # MLflow's assistant panel
            _click(driver, "Expand description")
            heading = driver.find_element(By.XPATH, "//h4[contains(text(),'Description')]")
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", heading)
            time.sleep(2)
            driver.save_screenshot(str(out / "dashboard-sweep.png"))
            driver.get(parent.data.tags[COMPARE_URL])
            _wait_text(driver, "Parallel Coordinates")
            _click(driver, "Close")
            time.sleep(2)
            _choose(driver, args.params, args.metric)
            time.sleep(3)
            driver.save_screenshot(str(out / "dashboard-compare.png"))
        finally:
            driver.quit()
    print(f"wrote {out / 'dashboard-sweep.png'} and {out / 'dashboard-compare.png'} from {uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
