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
from harness.browser import chromium, wait_until
from harness.console import ConsoleSite, proxy_body
from harness.console_page import cell, click, log_in, mark_page, number, still_same_page, text
from tests.console.conftest import Tokens

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
