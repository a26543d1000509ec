"""A real headless browser for the tests that open pages (Debian's chromium and chromedriver,
driven by selenium): the ``browser`` fixture (import it into the test module) and helpers to wait
for a page's text. Install the browser with ``bash scripts/test-prereqs.sh``."""

from __future__ import annotations

import shutil
import time

import pytest

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run"]


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("chromium and chromedriver are needed: run `bash scripts/test-prereqs.sh` "
                    "(apt-get install -y chromium chromium-driver)")
    options = Options()
    options.binary_location = chromium
    for flag in CHROME_FLAGS + [f"--user-data-dir={tmp_path / 'chrome-profile'}", "--window-size=1400,2400"]:
        options.add_argument(flag)
    d = webdriver.Chrome(options=options, service=Service(driver))
    d.set_page_load_timeout(120)
    yield d
    d.quit()


def wait_for(predicate, timeout: float = 90.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def body_text(d) -> str:
    from selenium.webdriver.common.by import By

    return d.find_element(By.TAG_NAME, "body").text
