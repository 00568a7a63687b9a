"""A crawler's view: lease a managed proxy from the running operator and fetch through it."""

from __future__ import annotations

import os
import signal
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from harness.origins import ORIGIN_BODY, serve_origin
from tests.conftest import wait_for
from tests.health.test_proxy_health import squid_pid

pytestmark = pytest.mark.e2e


class Crawler:
    """The small crawler script: lease, fetch through the proxy, report, release."""

    def __init__(self, session: aiohttp.ClientSession, operator: OperatorProcess) -> None:
        self._session = session
        self._api = operator.discovery_url
        self._auth = {"Authorization": f"Bearer {operator.discovery_token}"}

    async def lease(self, selector: dict[str, str], target: str) -> tuple[int, dict[str, Any]]:
        body = {"selector": selector, "ttlSeconds": 60, "target": target}
        async with self._session.post(
            f"{self._api}/v1/leases", json=body, headers=self._auth
        ) as response:
            return response.status, await response.json()

    async def report(self, lease_id: str, result: str) -> int:
        async with self._session.post(
            f"{self._api}/v1/leases/{lease_id}/report", json={"result": result}, headers=self._auth
        ) as response:
            return response.status

    async def release(self, lease_id: str) -> int:
        async with self._session.delete(
            f"{self._api}/v1/leases/{lease_id}", headers=self._auth
        ) as response:
            return response.status

    async def fetch(self, proxy_url: str, url: str) -> str:
        async with aiohttp.ClientSession() as direct, direct.get(url, proxy=proxy_url) as response:
            assert response.status == 200
            return await response.text()


async def test_lease_fetch_unhealthy_never_offered_and_delete_ends_leases(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    async with serve_origin() as origin, aiohttp.ClientSession() as session:
        crawler = Crawler(session, operator)
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 1,
            "timeoutSeconds": 1,
            "failureThreshold": 2,
        }
        await kube.create(
            proxy_path(namespace),
            managed_proxy("leasable", attributes={"region": "eu"}, healthCheck=health),
        )
        await wait_for_condition(kube, namespace, "leasable", "Healthy", "True")

        async def leased() -> dict[str, Any] | None:
            status, body = await crawler.lease({"region": "eu"}, "127.0.0.1")
            return body if status == 201 else None

        lease = await wait_for(leased, timeout=30)
        proxy = lease["proxy"]
        assert (proxy["namespace"], proxy["name"]) == (namespace, "leasable")
        # The lease's own credentials, never the operator's (tests/e2e/test_lease_credentials.py).
        assert proxy["credentials"]["username"] != "crawler"
        assert await crawler.fetch(proxy["urlWithCredentials"], origin.url) == ORIGIN_BODY
        assert await crawler.report(lease["leaseId"], "ok") == 200
        assert await crawler.release(lease["leaseId"]) == 204

        # An unhealthy proxy is never offered.
        pid = await squid_pid(kube, namespace)
        os.kill(pid, signal.SIGSTOP)
        try:
            await wait_for_condition(kube, namespace, "leasable", "Healthy", "False")

            async def refused() -> dict[str, Any] | None:
                status, body = await crawler.lease({"region": "eu"}, "127.0.0.1")
                return body if status == 409 else None

            conflict = await wait_for(refused, timeout=10)
            assert conflict["unhealthy"] == 1 and conflict["considered"] == 1
        finally:
            os.kill(pid, signal.SIGCONT)
        await wait_for_condition(kube, namespace, "leasable", "Healthy", "True")
        lease = await wait_for(leased, timeout=30)

        # Deleting the Proxy ends its leases.
        await kube.delete(proxy_path(namespace, "leasable"))
        await wait_gone(kube, proxy_path(namespace, "leasable"))

        async def lease_ended() -> bool:
            return await crawler.report(lease["leaseId"], "ok") == 404

        await wait_for(lease_ended, timeout=30)
        status, body = await crawler.lease({"region": "eu"}, "127.0.0.1")
        assert status == 409 and body["considered"] == 0
