"""The browser tier: Debian's chromium driven by its chromedriver through Selenium, both paths
set explicitly (Selenium Manager never runs, nothing is downloaded). Without them the tests
skip, and fail under CI=true, where .ci/run installed them."""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless chromium; `browser.shot(name)` saves a screenshot under the test's tmp dir."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        message = f"no {', '.join(missing)}: apt-get install chromium chromium-driver"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1100",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        # a DNS-rebinding site's name, resolved to the console's address (its Host is refused)
        "--host-resolver-rules=MAP rebind.test 127.0.0.1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(name: str) -> Path:
        path = shots / f"{name}.png"
        driver.save_screenshot(str(path))
        return path

    driver.shot = shot
    try:
        yield driver
    finally:
        driver.quit()
