"""Debian's headless Chromium, driven through chromium-driver with Selenium.

    with chromium() as browser:
        browser.get(url)
        wait_until(browser, lambda b: b.find_element(By.ID, "view").is_displayed())

Nothing is downloaded: both binaries come from Debian (`tools/build.sh`
installs them), and Selenium is told where they are, so its own driver
manager never runs. Each browser gets a fresh profile directory, removed on
exit.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_SECONDS = 15.0
# Headless, as root in a container, with nothing of its own phoning home.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1440,900",
)

Value = TypeVar("Value")


class MissingBrowserError(RuntimeError):
    """chromium or chromium-driver is not installed (run `make tools`)."""


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile, quit on exit."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(binary) is None:
            raise MissingBrowserError(
                f"{binary} is missing: `make tools` installs Debian's chromium and chromium-driver"
            )
    profile = Path(tempfile.mkdtemp(prefix="egress-proxies-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    # The page's console messages (a CSP violation is one) for `browser.get_log("browser")`.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_until(
    browser: webdriver.Chrome,
    condition: Callable[[webdriver.Chrome], Value],
    timeout: float = WAIT_SECONDS,
    message: str = "",
) -> Value:
    """Poll `condition` until it returns something truthy (TimeoutException after `timeout`)."""
    result: Value = WebDriverWait(browser, timeout, poll_frequency=0.05).until(condition, message)
    return result
