"""A lease's credentials open its proxy while the lease lives, and only then.

Real squid pods on the dev node check each lease's signed credentials with
the helper the pod program delivers; the helper pulls its revocation list
from the operator's discovery API (served where pods reach the host). The
bound asserted is REVOKED_WITHIN: the helper's one-second poll plus squid's
two-second credential cache, with room for a loaded machine.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import SECRETS
from harness.cluster import ClusterHandle
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.origins import serve_origin
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

REVOKED_WITHIN = 8.0
SECOND_TOKEN = "second"


@pytest.fixture
def operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with its discovery API where pods reach the host, and two tokens."""
    process = new_operator(dev_cluster.kubeconfig, namespace, tmp_path)
    url = f"http://{dev_cluster.host_address}:{process.env['EGRESS_PROXIES_DISCOVERY_PORT']}"
    process.env["EGRESS_PROXIES_DISCOVERY_HOST"] = dev_cluster.host_address
    process.env["EGRESS_PROXIES_PROXY_DISCOVERY_URL"] = url
    process.discovery_url = url
    tokens = Path(process.env["EGRESS_PROXIES_DISCOVERY_TOKENS_DIR"])
    (tokens / SECOND_TOKEN).write_text(secrets.token_urlsafe(24))
    process.start()
    yield process
    process.stop()


class Crawler:
    """Leases through the API with one token and fetches through the leased proxy."""

    def __init__(self, session: aiohttp.ClientSession, api: str, token: str) -> None:
        self._session = session
        self._api = api
        self._auth = {"Authorization": f"Bearer {token}"}

    async def lease(
        self, selector: dict[str, str], ttl: int = 60, target: str = "example.test"
    ) -> tuple[int, dict[str, Any]]:
        body = {"selector": selector, "ttlSeconds": ttl, "target": target}
        async with self._session.post(
            f"{self._api}/v1/leases", json=body, headers=self._auth
        ) as response:
            return response.status, await response.json()

    async def leased(
        self, selector: dict[str, str], ttl: int = 60, target: str = "example.test"
    ) -> dict[str, Any]:
        async def granted() -> dict[str, Any] | None:
            status, body = await self.lease(selector, ttl, target)
            return body if status == 201 else None

        return await wait_for(granted, timeout=60)

    async def release(self, lease_id: str) -> None:
        async with self._session.delete(
            f"{self._api}/v1/leases/{lease_id}", headers=self._auth
        ) as response:
            assert response.status == 204

    async def report_banned(self, lease_id: str) -> None:
        async with self._session.post(
            f"{self._api}/v1/leases/{lease_id}/report",
            json={"result": "banned"},
            headers=self._auth,
        ) as response:
            assert response.status == 200


async def fetch_status(proxy_url: str, url: str) -> int:
    """The status of one GET through the proxy (407: the proxy refused the credentials)."""
    async with aiohttp.ClientSession() as direct, direct.get(url, proxy=proxy_url) as response:
        return response.status


async def refused_within(proxy_url: str, url: str, bound: float) -> float:
    """Seconds until the proxy answers 407 to these credentials (asserted within `bound`)."""
    start = time.monotonic()

    async def refused() -> bool:
        return await fetch_status(proxy_url, url) == 407

    await wait_for(refused, timeout=bound, interval=0.2)
    elapsed = time.monotonic() - start
    print(f"refused after {elapsed:.1f} s")  # the bound as measured (pytest -s)
    return elapsed


def with_credentials(lease: dict[str, Any], username: str, password: str) -> str:
    proxy = lease["proxy"]
    return f"http://{username}:{password}@{proxy['host']}:{proxy['port']}"


async def test_a_lease_opens_its_proxy_only_while_it_lives(
    kube: KubeClient, namespace: str, operator: OperatorProcess, dev_cluster: ClusterHandle
) -> None:
    tokens = Path(operator.env["EGRESS_PROXIES_DISCOVERY_TOKENS_DIR"])
    async with serve_origin(host=dev_cluster.host_address) as origin, aiohttp.ClientSession() as s:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 2,
            "timeoutSeconds": 2,
        }
        for name in ("door", "other"):
            spec = {"attributes": {"door": name}, "healthCheck": health, "maxLeases": 8}
            await kube.create(proxy_path(namespace), managed_proxy(name, **spec))
        # Healthy: the probes got through, with the operator's own credentials.
        for name in ("door", "other"):
            await wait_for_condition(kube, namespace, name, "Healthy", "True")
        crawler = Crawler(s, operator.discovery_url, operator.discovery_token)
        here = {"door": "door"}

        first = await crawler.leased(here)
        url = first["proxy"]["urlWithCredentials"]
        assert await fetch_status(url, origin.url) == 200
        # The operator's credentials never reach a crawler.
        body = await kube.get(proxy_path(namespace, "door"))
        secret = await kube.get(SECRETS.path(namespace, body["status"]["credentialsSecret"]))
        operator_password = base64.b64decode(secret["data"]["password"]).decode()
        assert operator_password not in str(first)
        assert first["proxy"]["credentials"]["username"] != "crawler"

        # Another proxy's lease does not open this one.
        elsewhere = await crawler.leased({"door": "other"})
        own = elsewhere["proxy"]["credentials"]
        assert await fetch_status(elsewhere["proxy"]["urlWithCredentials"], origin.url) == 200
        assert await fetch_status(with_credentials(first, **own), origin.url) == 407
        # Nor does a password made up for a real lease's username.
        forged = {"username": first["proxy"]["credentials"]["username"], "password": "0" * 32}
        assert await fetch_status(with_credentials(first, **forged), origin.url) == 407

        # Released: a crawler that keeps the credentials is refused within the bound.
        await crawler.release(first["leaseId"])
        released_after = await refused_within(url, origin.url, REVOKED_WITHIN)

        # Expired: nobody released it.
        short = await crawler.leased(here, ttl=3)
        assert await fetch_status(short["proxy"]["urlWithCredentials"], origin.url) == 200
        await refused_within(short["proxy"]["urlWithCredentials"], origin.url, 3 + REVOKED_WITHIN)

        # Reported banned: the lease ends and its credentials with it.
        banned = await crawler.leased(here)
        assert await fetch_status(banned["proxy"]["urlWithCredentials"], origin.url) == 200
        await crawler.report_banned(banned["leaseId"])
        await refused_within(banned["proxy"]["urlWithCredentials"], origin.url, REVOKED_WITHIN)

        # Token removed from the token Secret: its leases close, the other token's stay open.
        second = Crawler(s, operator.discovery_url, (tokens / SECOND_TOKEN).read_text())
        # (example.test is cooling on this proxy since the ban: another site.)
        doomed = await second.leased(here, target="other.test")
        kept = await crawler.leased(here, target="other.test")
        assert await fetch_status(doomed["proxy"]["urlWithCredentials"], origin.url) == 200
        (tokens / SECOND_TOKEN).unlink()
        await refused_within(doomed["proxy"]["urlWithCredentials"], origin.url, REVOKED_WITHIN)
        assert await fetch_status(kept["proxy"]["urlWithCredentials"], origin.url) == 200
        assert released_after <= REVOKED_WITHIN

        # Nothing leaks: no lease's password, nor the key, in the log, the status or Events.
        key = base64.b64decode(secret["data"]["signingKey"]).decode()
        leased = (first, elsewhere, short, banned, doomed, kept)
        passwords = [lease["proxy"]["credentials"]["password"] for lease in leased]
        events = await kube.get(f"/api/v1/namespaces/{namespace}/events")
        proxies = await kube.get(proxy_path(namespace))
        for text in (Path(operator.log).read_text(), str(events), str(proxies)):
            assert key not in text
            assert not [password for password in passwords if password in text]


async def test_with_the_api_stopped_a_live_lease_works_until_it_expires(
    kube: KubeClient, namespace: str, operator: OperatorProcess, dev_cluster: ClusterHandle
) -> None:
    async with serve_origin(host=dev_cluster.host_address) as origin, aiohttp.ClientSession() as s:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 2,
            "timeoutSeconds": 2,
        }
        await kube.create(
            proxy_path(namespace),
            managed_proxy("steady", attributes={"door": "steady"}, healthCheck=health),
        )
        await wait_for_condition(kube, namespace, "steady", "Healthy", "True")
        crawler = Crawler(s, operator.discovery_url, operator.discovery_token)
        lease = await crawler.leased({"door": "steady"}, ttl=20)
        url = lease["proxy"]["urlWithCredentials"]
        assert await fetch_status(url, origin.url) == 200
        expires = time.time() + 20 - 1

        assert operator.child is not None
        operator.child.process.send_signal(signal.SIGKILL)
        operator.child.process.wait(timeout=10)
        with pytest.raises(aiohttp.ClientConnectionError):
            await crawler.lease({"door": "steady"})
        # Still open while the lease lives, with nobody to ask...
        fetched = 0
        while time.time() < expires - 2:
            assert await fetch_status(url, origin.url) == 200
            fetched += 1
            await asyncio.sleep(0.5)  # paces the fetches; nothing waits on it
        assert fetched > 10
        # ...and closed once it has expired.
        await refused_within(url, origin.url, 2 + REVOKED_WITHIN)
        operator.start()  # to finalize the Proxy when the namespace goes
