"""The operator's console in headless Chromium, on the dev cluster: a real Proxy, real writes.

A Proxy applied with the API appears on the open page and turns Ready
without a reload; cordoning it from the page is a write to its spec that
kubectl sees, an Event names the console user, and the operator's lease
API stops offering it until it is uncordoned.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import EVENTS
from harness.browser import chromium, wait_until
from harness.cluster import ClusterHandle
from harness.console_page import cell, click, log_in, mark_page, still_same_page
from harness.operator import OperatorProcess, managed_proxy, new_operator, proxy_path
from harness.origins import serve_origin
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

Value = TypeVar("Value")
READY_TIMEOUT = 180.0


@pytest.fixture
def console_token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
def console_operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path, console_token: str
) -> Iterator[tuple[OperatorProcess, str]]:
    """The operator with its console on: alice may act. Yields it and the console's URL."""
    users = tmp_path / "console-users"
    users.mkdir()
    (users / "alice.act").write_text(console_token)
    port = free_port()
    process = new_operator(
        dev_cluster.kubeconfig,
        namespace,
        tmp_path,
        {
            "EGRESS_PROXIES_CONSOLE_TOKENS_DIR": str(users),
            "EGRESS_PROXIES_CONSOLE_HOST": "127.0.0.1",
            "EGRESS_PROXIES_CONSOLE_PORT": str(port),
        },
    )
    process.start()
    yield process, f"http://127.0.0.1:{port}"
    process.stop()


@pytest.fixture
def browser() -> Iterator[Chrome]:
    with chromium() as driver:
        yield driver


async def waiting(
    browser: Chrome, condition: Callable[[Chrome], Value], timeout: float = 30.0
) -> Value:
    """`wait_until` off the event loop (the test's API client keeps its connections)."""
    return await asyncio.to_thread(wait_until, browser, condition, timeout)


async def lease(operator: OperatorProcess) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{operator.discovery_url}/v1/leases",
            json={"ttlSeconds": 30},
            headers={"Authorization": f"Bearer {operator.discovery_token}"},
        ) as response,
    ):
        return response.status, await response.json()


async def console_events(
    kube: KubeClient, namespace: str, name: str, reasons: tuple[str, ...] = ("Cordoned",)
) -> list[str]:
    events = await kube.list(EVENTS.path(namespace))
    return [
        f"{event['reason']}: {event.get('message', '')}"
        for event in events["items"]
        if event["involvedObject"]["name"] == name and event["reason"] in reasons
    ]


async def test_a_proxy_turns_ready_live_and_cordoning_it_stops_its_leases(
    kube: KubeClient,
    namespace: str,
    console_operator: tuple[OperatorProcess, str],
    console_token: str,
    browser: Chrome,
) -> None:
    operator, console = console_operator
    await wait_for(lambda: _serving(console), timeout=60)
    await asyncio.to_thread(log_in, browser, console, console_token)
    mark_page(browser)
    key = f"{namespace}/live"

    async with serve_origin() as origin:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 1,
            "timeoutSeconds": 1,
        }
        await kube.create(proxy_path(namespace), managed_proxy("live", healthCheck=health))
        first = await waiting(browser, lambda b: cell(b, key, "phase"))
        assert first != "Ready"  # seen before it was ready
        try:
            await waiting(browser, lambda b: cell(b, key, "ready") == "True", timeout=READY_TIMEOUT)
        except TimeoutException:
            status = (await kube.get(proxy_path(namespace, "live"))).get("status")
            page = browser.find_element(By.ID, "view").text
            raise AssertionError(f"not Ready on the page:\n{page}\nstatus: {status}") from None
        assert cell(browser, key, "phase") == "Ready"
        assert still_same_page(browser)
        status, granted = await wait_for(lambda: _granted(operator), timeout=60)
        assert (status, granted["proxy"]["name"]) == (201, "live")
        await _release(operator, granted["leaseId"])
        await _cordon_and_uncordon(kube, namespace, operator, browser, key)


async def _cordon_and_uncordon(
    kube: KubeClient, namespace: str, operator: OperatorProcess, browser: Chrome, key: str
) -> None:
    await asyncio.to_thread(click, browser, key, "cordon")
    await waiting(browser, lambda b: cell(b, key, "cordoned") == "yes")
    body = await kube.get(proxy_path(namespace, "live"))
    assert body["spec"]["cordoned"] is True
    assert await wait_for(lambda: console_events(kube, namespace, "live"), timeout=30) == [
        "Cordoned: cordoned from the console by alice: no new leases"
    ]
    refused, answer = await lease(operator)
    assert (refused, answer["error"]) == (409, "no_match")

    await asyncio.to_thread(click, browser, key, "uncordon")
    await waiting(browser, lambda b: cell(b, key, "cordoned") == "no")
    _, granted = await wait_for(lambda: _granted(operator), timeout=30)
    assert granted["proxy"]["name"] == "live"
    await _clear_a_ban(kube, namespace, operator, browser, key, granted["leaseId"])


async def _clear_a_ban(
    kube: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    browser: Chrome,
    key: str,
    lease_id: str,
) -> None:
    """A ban without a target cools the proxy for every site; clearing it from the page
    writes the store, posts the Event naming the user, and the lease API grants it again."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{operator.discovery_url}/v1/leases/{lease_id}/report",
            json={"result": "banned"},
            headers={"Authorization": f"Bearer {operator.discovery_token}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
    await _release(operator, lease_id)
    refused, answer = await lease(operator)
    assert (refused, answer["error"]) == (409, "no_match")
    browser.get(browser.current_url.split("#")[0] + "#/cooldowns")
    pair = f"{key} "  # no site: the proxy's cooldown for every site
    await waiting(browser, lambda b: cell(b, pair, "kind") == "banned")
    await asyncio.to_thread(click, browser, pair, "clear-cooldown")
    await waiting(
        browser, lambda b: b.find_elements(By.CSS_SELECTOR, f'tr[data-key="{pair}"]') == []
    )
    assert await wait_for(
        lambda: console_events(kube, namespace, "live", ("CooldownCleared",)), timeout=30
    ) == [
        "CooldownCleared: cooldown for every site cleared from the console by alice: "
        "leased again at once"
    ]
    _, granted = await wait_for(lambda: _granted(operator), timeout=30)
    assert granted["proxy"]["name"] == "live"


async def _serving(console: str) -> bool:
    """The operator's console answers (it starts a moment after the process)."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{console}/console/") as response,
        ):
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def _granted(operator: OperatorProcess) -> tuple[int, dict[str, Any]] | None:
    status, body = await lease(operator)
    return (status, body) if status == 201 else None


async def _release(operator: OperatorProcess, lease_id: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.delete(
            f"{operator.discovery_url}/v1/leases/{lease_id}",
            headers={"Authorization": f"Bearer {operator.discovery_token}"},
        ) as response,
    ):
        assert response.status == 204
