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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep")
    parser.add_argument("--scale", default="smoke")
    parser.add_argument("--out", default="docs/images")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

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
            time.sleep(2)
            driver.save_screenshot(str(out / "dashboard-sweep.png"))
            driver.get(parent.data.tags[COMPARE_URL])
            _wait_text(driver, "Parallel Coordinates")
            time.sleep(3)
            driver.save_screenshot(str(out / "dashboard-compare.png"))
        finally:
            driver.quit()
    print(f"wrote {out / 'dashboard-sweep.png'} and {out / 'dashboard-compare.png'} from {uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
