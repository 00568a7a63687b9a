"""The console in a real browser: Debian's headless Chromium, driven with Selenium.

Each test logs in through the page, as a person would, and watches the page
change while the fleet and the crawlers (through the real discovery API)
change underneath it: no reload, only the page's own polling.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from egress_proxies.kube.resources import PROXIES
from egress_proxies.leases import LeaseStore, RedisLeaseStore
from harness.browser import chromium, wait_until
from harness.console import ConsoleSite, proxy_body, served_console
from harness.console_page import (
    cell,
    click,
    log_in,
    mark_page,
    number,
    row,
    still_same_page,
    text,
)
from harness.redis import RedisServer
from tests.console.conftest import CRAWLER, Tokens

pytestmark = pytest.mark.integration

SITE = "shop.example"
NOTHING = "\N{EN DASH}"  # what a cell shows for no value


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    with chromium() as driver:
        yield driver


def crawler(site: ConsoleSite, tokens: Tokens) -> httpx.Client:
    return httpx.Client(
        base_url=site.discovery, headers={"Authorization": f"Bearer {tokens.crawler}"}
    )


def lease(client: httpx.Client, status: int = 201, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/leases", json={"ttlSeconds": 60} | body)
    assert response.status_code == status, response.text
    granted: dict[str, Any] = response.json()
    return granted


def errors_logged(browser: Chrome) -> list[str]:
    """The page's error messages since last asked (a CSP violation, a script error)."""
    entries: list[dict[str, Any]] = browser.execute("getLog", {"type": "browser"})["value"]
    return [entry["message"] for entry in entries if entry["level"] == "SEVERE"]


def test_a_proxy_appears_and_becomes_ready_live(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    errors_logged(browser)
    log_in(browser, site.console, tokens.viewer)
    wait_until(browser, lambda b: text(b, "fleet-count") == "0 proxies")
    mark_page(browser)

    site.put(
        proxy_body("fresh", phase="Provisioning", healthy=None, address=None, latency_millis=None)
    )
    wait_until(browser, lambda b: cell(b, "crawl/fresh", "phase") == "Provisioning")
    assert cell(browser, "crawl/fresh", "ready") == NOTHING

    site.put(proxy_body("fresh", latency_millis=23))
    wait_until(browser, lambda b: cell(b, "crawl/fresh", "ready") == "True")
    assert cell(browser, "crawl/fresh", "phase") == "Ready"
    assert cell(browser, "crawl/fresh", "address") == "127.0.0.1:3128"
    assert still_same_page(browser)
    assert errors_logged(browser) == []


def test_a_sites_pace_drops_after_a_rate_limited_report(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("a"))
    with crawler(site, tokens) as client:
        granted = lease(client, target=SITE)
        report = f"/v1/leases/{granted['leaseId']}/report"
        assert client.post(report, json={"result": "ok", "count": 5}).status_code == 200
        log_in(browser, site.console, tokens.viewer, view=f"sites/{SITE}")
        wait_until(browser, lambda b: text(b, "site-name") == SITE and number(b, "site-pace"))
        shown = number(browser, "site-pace")
        assert shown is not None and shown > 0
        before: float = shown
        assert text(browser, "site-limited") == "0"
        mark_page(browser)

        limited = client.post(report, json={"result": "rate_limited"})
        assert limited.status_code == 200, limited.text

    wait_until(browser, lambda b: (number(b, "site-pace") or before) < before)
    assert text(browser, "site-limited") == "1"
    assert browser.find_elements(By.CSS_SELECTOR, "#pace-chart line.limit")
    assert still_same_page(browser)


def test_cordoning_a_proxy_stops_the_lease_api_offering_it(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("a", latency_millis=5))
    site.put(proxy_body("b", latency_millis=50))
    log_in(browser, site.console, tokens.actor)
    wait_until(browser, lambda b: cell(b, "crawl/a", "cordoned") == "no")

    click(browser, "crawl/a", "cordon")
    wait_until(browser, lambda b: cell(b, "crawl/a", "cordoned") == "yes")

    assert site.objects.patches == [(PROXIES.path("crawl", "a"), {"spec": {"cordoned": True}})]
    [(regarding, kind, reason, message)] = site.events.events
    assert (regarding.kind, regarding.name, kind, reason) == ("Proxy", "a", "Normal", "Cordoned")
    assert "alice" in message
    with crawler(site, tokens) as client:
        listed = client.get("/v1/proxies", params={"healthy": "true"}).json()
        assert [proxy["name"] for proxy in listed["proxies"]] == ["b"]
        assert lease(client)["proxy"]["name"] == "b"  # a has the lower latency, but is cordoned
        assert lease(client, status=409)["error"] == "no_match"


def test_a_viewer_sees_no_action_and_a_forged_one_is_refused(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("a"))
    log_in(browser, site.console, tokens.viewer)
    wait_until(browser, lambda b: cell(b, "crawl/a", "cordoned") == "no")
    assert browser.find_elements(By.CSS_SELECTOR, "button[data-action]") == []
    assert text(browser, "who") == "bob (view)"

    forged = httpx.post(
        f"{site.console}/console/api/v1/proxies/crawl/a/cordon",
        json={"cordoned": True},
        headers={"Authorization": f"Bearer {tokens.viewer}"},
    )
    assert forged.status_code == 403
    assert forged.json()["error"] == "forbidden"
    assert site.objects.patches == [] and site.events.events == []
    assert cell(browser, "crawl/a", "cordoned") == "no"


def test_a_crawler_token_opens_no_console(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    browser.get(f"{site.console}/console/")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait_until(browser, lambda b: b.find_element(By.ID, "token")).send_keys(tokens.crawler)
    browser.find_element(By.ID, "open").click()

    wait_until(browser, lambda b: text(b, "login-error") == "Not a console token.")
    assert not browser.find_element(By.ID, "view").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('consoleToken')") is None
    refused = httpx.get(
        f"{site.console}/console/api/v1/fleet",
        headers={"Authorization": f"Bearer {tokens.crawler}"},
    )
    assert refused.status_code == 401


def test_draining_a_pool_member_from_the_page(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("member", pool="eu"))
    site.put(proxy_body("alone"))
    log_in(browser, site.console, tokens.actor)
    wait_until(browser, lambda b: cell(b, "crawl/member", "draining") == "no")
    assert (
        browser.find_elements(
            By.CSS_SELECTOR, 'tr[data-key="crawl/alone"] button[data-action="drain"]'
        )
        == []
    )  # no pool would replace it

    click(browser, "crawl/member", "drain")
    wait_until(browser, lambda b: cell(b, "crawl/member", "draining") == "yes")
    assert [reason for _, _, reason, _ in site.events.events] == ["DrainedFromConsole"]
    with crawler(site, tokens) as client:
        assert lease(client)["proxy"]["name"] == "alone"


@pytest.fixture(params=["memory", "redis"])
def any_store_site(request: pytest.FixtureRequest, tokens: Tokens) -> Iterator[ConsoleSite]:
    """A served console over the memory store or a RedisLeaseStore on the real redis-server."""
    store: LeaseStore | None = None
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        prefix: str = request.getfixturevalue("redis_prefix")
        store = RedisLeaseStore(server.url, prefix=prefix, timeout=2.0)
    users = tokens.users()
    with served_console(
        lambda: users,
        frozenset({tokens.crawler}),
        store=store,
        crawler_names={tokens.crawler: CRAWLER},
    ) as served:
        yield served


def test_clearing_a_cooldown_from_the_page_lets_the_lease_api_offer_the_proxy_again(
    browser: Chrome, any_store_site: ConsoleSite, tokens: Tokens
) -> None:
    site = any_store_site
    site.put(proxy_body("a"))
    with crawler(site, tokens) as client:
        granted = lease(client, target=SITE)
        banned = client.post(f"/v1/leases/{granted['leaseId']}/report", json={"result": "banned"})
        assert banned.status_code == 200, banned.text
        client.delete(f"/v1/leases/{granted['leaseId']}")
        assert lease(client, status=409, target=SITE)["error"] == "no_match"
        log_in(browser, site.console, tokens.actor, view="cooldowns")
        errors_logged(browser)  # what the page of an earlier test, now gone, left in the log
        pair = f"crawl/a {SITE}"
        wait_until(browser, lambda b: cell(b, pair, "kind") == "banned")
        mark_page(browser)

        click(browser, pair, "clear-cooldown")

        wait_until(browser, lambda b: text(b, "view") is not None and row(b, pair) is None)
        assert site.objects.patches == []  # a write to the lease store, not to an object
        [(regarding, kind, reason, message)] = site.events.events
        assert (regarding.kind, regarding.name, kind, reason) == (
            "Proxy",
            "a",
            "Normal",
            "CooldownCleared",
        )
        assert "alice" in message and SITE in message
        assert lease(client, target=SITE)["proxy"]["name"] == "a"
    assert still_same_page(browser)
    assert errors_logged(browser) == []


def test_a_viewer_sees_no_clear_button_and_a_forged_clear_is_refused(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("a"))
    with crawler(site, tokens) as client:
        granted = lease(client, target=SITE)
        client.post(f"/v1/leases/{granted['leaseId']}/report", json={"result": "banned"})
    log_in(browser, site.console, tokens.viewer, view="cooldowns")
    pair = f"crawl/a {SITE}"
    wait_until(browser, lambda b: cell(b, pair, "kind") == "banned")
    assert browser.find_elements(By.CSS_SELECTOR, "button[data-action]") == []

    forged = httpx.post(
        f"{site.console}/console/api/v1/proxies/crawl/a/clear-cooldown",
        json={"target": SITE},
        headers={"Authorization": f"Bearer {tokens.viewer}"},
    )
    assert forged.status_code == 403
    assert forged.json()["error"] == "forbidden"
    assert site.events.events == []
    # The page redraws its table on each poll: read the cell once it is drawn again.
    wait_until(browser, lambda b: cell(b, pair, "kind") == "banned")


def test_the_leases_view_names_each_leases_token_never_the_token(
    browser: Chrome, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("a", max_leases=2))
    log_in(browser, site.console, tokens.viewer, view="leases")
    errors_logged(browser)  # what the page of an earlier test, now gone, left in the log
    wait_until(browser, lambda b: text(b, "content") is not None)
    mark_page(browser)
    with crawler(site, tokens) as client:
        granted = lease(client, target=SITE, ttlSeconds=120)
    key = granted["leaseId"][:6] + "\N{HORIZONTAL ELLIPSIS}"

    def shown(b: Chrome) -> dict[str, str | None] | None:
        # One read of the row's cells, none of them caught mid-redraw by the page's poll.
        cells = {column: cell(b, key, column) for column in ("holder", "proxy", "site")}
        return cells if cells["holder"] == CRAWLER and None not in cells.values() else None

    row_cells = wait_until(browser, shown)
    assert row_cells is not None
    assert row_cells["proxy"] == "crawl/a"
    assert row_cells["site"] == SITE
    assert tokens.crawler not in browser.page_source
    assert granted["leaseId"] not in browser.page_source
    assert still_same_page(browser)
    assert errors_logged(browser) == []
