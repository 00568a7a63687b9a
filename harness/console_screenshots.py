"""Take docs/console.md's screenshots: each view of the console in headless Chromium.

    .venv/bin/python -m harness.console_screenshots [OUT_DIR]   # default docs/console

A console over a fleet of 24 Proxies in two pools, with crawlers leasing
and reporting through the real discovery API for half a minute, so every
view (sparklines and the pace chart included) shows data the store gave.
"""

from __future__ import annotations

import base64
import functools
import secrets
import sys
import time
from pathlib import Path

import httpx
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from egress_proxies.console import History, users_from_secret_data
from harness.browser import chromium, wait_until
from harness.console import served_console
from harness.console_demo import SITES, crawling, stock

CRAWL_SECONDS = 30.0
VIEWS = {
    "fleet": "fleet",
    "sites": "sites",
    "site": f"sites/{SITES[0]}",
    "cooldowns": "cooldowns",
    "pools": "pools",
    "leases": "leases",
}


def _showing(browser: Chrome, view: str) -> bool:
    found = browser.find_elements(By.ID, "content")
    return bool(found) and found[0].get_attribute("data-view") == view


def main(out: Path) -> None:
    """Serve the demo, crawl, then save login.png and one PNG per view into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    actor, crawler = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    users = users_from_secret_data({"alice.act": base64.b64encode(actor.encode()).decode()})
    history = History(interval=1.0, span=60.0)
    with served_console(
        lambda: users, frozenset({crawler}), history=history, crawler_names={crawler: "team-shop"}
    ) as site:
        stock(site, proxies=24)
        with crawling(site, crawler), chromium() as browser:
            browser.set_window_size(1440, 900)
            browser.get(f"{site.console}/console/")
            wait_until(browser, lambda b: b.find_element(By.ID, "token"))
            browser.save_screenshot(str(out / "login.png"))
            browser.find_element(By.ID, "token").send_keys(actor)
            browser.find_element(By.ID, "open").click()
            wait_until(browser, lambda b: b.find_element(By.ID, "view").is_displayed())
            time.sleep(CRAWL_SECONDS)  # the demo's point is half a minute of history
            api = f"{site.console}/console/api/v1"
            for path, body in (
                ("pools/crawl/eu/scale", {"replicas": 14}),
                ("proxies/crawl/eu-0004/cordon", {"cordoned": True}),
                ("proxies/crawl/us-0003/drain", {}),
            ):
                acted = httpx.post(
                    f"{api}/{path}", json=body, headers={"Authorization": f"Bearer {actor}"}
                )
                acted.raise_for_status()
            for name, route in VIEWS.items():
                browser.get(f"{site.console}/console/#/{route}")
                wait_until(browser, functools.partial(_showing, view=name))
                browser.save_screenshot(str(out / f"{name}.png"))
                print(f"saved {out / name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/console"))
