"""Fleet console benchmark: the Fleet view of a large fleet in headless Chromium.

    .venv/bin/python -m bench.console [--proxies 1000] [--targets 200] [--updates 10]
        [--cpu-seconds 20] [--smoke]

Serves the console and the discovery API (harness.console) over `--proxies`
Proxies, has a crawler lease and report through the API for `--targets`
sites, then, in this one process and one run, measures:

1. first paint: from the start of the page's navigation (its token already
   in the tab) to the Fleet table drawn with every Proxy, by the page's own
   clock (`performance.timeOrigin`);
2. live update: from a Proxy's body changing in the fleet (as the watch
   delivers it) to the page having drawn it, `--updates` times (median and
   worst); the page polls every half second;
3. the serving process's CPU while one browser shows the Fleet view, over
   the same process with no console open, as % of one core: with a quiet
   fleet, and with one Proxy's status changing ten times a second (as
   probes write latencies), so that every poll decodes the fleet again.

Targets (issue 44): first paint and a live update ≤ 1 s each, CPU ≤ 5 %.
`--smoke`: 20 proxies, 5 targets, 2 updates, 2 s of CPU each.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from egress_proxies.console import users_from_secret_data
from harness.browser import chromium, wait_until
from harness.console import ConsoleSite, proxy_body, served_console
from harness.console_demo import stock

FIRST_PAINT = "first paint of the Fleet view"
UPDATE_MEDIAN = "live update, median"
UPDATE_WORST = "live update, worst"
CONSOLE_CPU = "CPU with one console open over none"
BUSY_CPU = "CPU with one console open over none, fleet changing"
FIGURES = (FIRST_PAINT, UPDATE_MEDIAN, UPDATE_WORST, CONSOLE_CPU, BUSY_CPU)
SMOKE = {"proxies": 20, "targets": 5, "updates": 2, "cpu_seconds": 2.0}


def visit_targets(site: ConsoleSite, token: str, targets: int) -> None:
    """A lease, an ok report and a release per target, through the discovery API."""
    with httpx.Client(
        base_url=site.discovery, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        for index in range(targets):
            granted = client.post(
                "/v1/leases", json={"ttlSeconds": 60, "target": f"site-{index:03d}.example"}
            )
            granted.raise_for_status()
            lease = granted.json()["leaseId"]
            client.post(f"/v1/leases/{lease}/report", json={"result": "ok", "count": 20})
            client.delete(f"/v1/leases/{lease}")


def drawn_at(browser: Chrome) -> float:
    """When the page last drew its view, epoch seconds by the page's clock."""
    found = browser.find_elements(By.ID, "content")
    stamp = found[0].get_attribute("data-drawn-at") if found else None
    return float(stamp) / 1000 if stamp else 0.0


def rows(browser: Chrome) -> int:
    """Rows in the Fleet table."""
    count: int = browser.execute_script(
        "return document.querySelectorAll('table[data-view=fleet] tbody tr').length"
    )
    return count


def first_paint(browser: Chrome, url: str, token: str, proxies: int) -> float:
    """Seconds from the navigation's start to the table drawn with every Proxy."""
    browser.get(url)
    browser.execute_script("sessionStorage.setItem('consoleToken', arguments[0])", token)
    browser.get("about:blank")
    browser.get(url)
    wait_until(browser, lambda b: rows(b) == proxies, timeout=60)
    origin: float = browser.execute_script("return performance.timeOrigin") / 1000
    return drawn_at(browser) - origin


def live_update(browser: Chrome, site: ConsoleSite, round_: int) -> float:
    """Seconds from a Proxy's phase changing to the page having drawn it."""
    phase = f"Phase{round_}"
    changed = time.time()
    site.put(proxy_body("changing", pool="eu", phase=phase))
    wait_until(
        browser,
        lambda b: b.execute_script(
            "const c = document.querySelector("
            "'tr[data-key=\"crawl/changing\"] td[data-col=phase]');"
            "return c && c.textContent === arguments[0]",
            phase,
        ),
        timeout=30,
    )
    return drawn_at(browser) - changed


@contextmanager
def changing(site: ConsoleSite, busy: bool) -> Iterator[None]:
    """While the block runs, and `busy`, one Proxy's latency changes ten times a second."""
    stop = threading.Event()

    def change() -> None:
        latency = 10
        while not stop.wait(0.1):
            latency = 10 + (latency + 1) % 20
            site.put(proxy_body("changing", pool="eu", latency_millis=latency))

    thread = threading.Thread(target=change, daemon=True)
    if busy:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if busy:
            thread.join()


def cpu_share(seconds: float) -> float:
    """This process's CPU over `seconds` of wall time, as a share of one core."""
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def main() -> None:
    """Serve the console over a large fleet, then measure it in headless Chromium."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--proxies", type=int, default=1000)
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--cpu-seconds", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)

    viewer, crawler = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    users = users_from_secret_data({"bench.view": base64.b64encode(viewer.encode()).decode()})
    with served_console(lambda: users, frozenset({crawler})) as site:
        stock(site, proxies=args.proxies - 1)
        site.put(proxy_body("changing", pool="eu"))
        visit_targets(site, crawler, args.targets)
        sites = httpx.get(
            f"{site.console}/console/api/v1/sites",
            headers={"Authorization": f"Bearer {viewer}"},
        ).json()["count"]
        print(f"fleet: {args.proxies} proxies, {sites} targets")
        with chromium() as browser:
            url = f"{site.console}/console/#/fleet"
            paint = first_paint(browser, url, viewer, args.proxies)
            print(f"{FIRST_PAINT}: {paint:.3f} s (target <= 1 s)")
            updates = [live_update(browser, site, round_) for round_ in range(args.updates)]
            print(f"{UPDATE_MEDIAN}: {statistics.median(updates):.3f} s (target <= 1 s)")
            print(f"{UPDATE_WORST}: {max(updates):.3f} s (polling every half second)")
            shares = {}
            for busy in (False, True):
                browser.get(url)
                wait_until(browser, lambda b: rows(b) == args.proxies, timeout=60)
                with changing(site, busy):
                    shares[busy, "open"] = cpu_share(args.cpu_seconds)
                    browser.get("about:blank")
                    shares[busy, "none"] = cpu_share(args.cpu_seconds)
        for busy, figure in ((False, CONSOLE_CPU), (True, BUSY_CPU)):
            opened, none = shares[busy, "open"], shares[busy, "none"]
            print(
                f"{figure}: {100 * (opened - none):.1f} % of a core "
                f"(open {100 * opened:.1f} %, none {100 * none:.1f} %; target <= 5 %)"
            )


if __name__ == "__main__":
    main()
