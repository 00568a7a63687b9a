"""Leases and cooldowns in Redis survive an operator restart; a deleted Proxy's leases end.

The operator runs as a process with `--lease-store redis://...` (the variable),
serving the discovery API in-process; 13 External Proxies point at one real
squid. Ten are leased and three cool down for one target; the operator is
restarted; everything is still there.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from harness.operator import OperatorProcess, new_operator, proxy_path, wait_for_condition
from harness.origins import serve_origin
from harness.redis import RedisServer
from harness.squid import SquidProcess
from tests.conftest import ClusterHandle, wait_for
from tests.telemetry.test_metrics_scenario import READY_CHECK, external_proxy

pytestmark = pytest.mark.e2e

LEASED, COOLING = 10, 3
TARGET = "shop.example"


@pytest.fixture
def redis_operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path, redis_server: RedisServer
) -> Iterator[OperatorProcess]:
    process = new_operator(
        dev_cluster.kubeconfig,
        namespace,
        tmp_path,
        {
            "EGRESS_PROXIES_LEASE_STORE": redis_server.url,
            "EGRESS_PROXIES_LEASE_STORE_PREFIX": f"e2e-{secrets.token_hex(4)}",
        },
    )
    process.start()
    yield process
    process.stop()


class Crawler:
    """Talks to the operator's discovery API."""

    def __init__(self, session: aiohttp.ClientSession, operator: OperatorProcess) -> None:
        self.session, self.api = session, operator.discovery_url
        self.auth = {"Authorization": f"Bearer {operator.discovery_token}"}

    async def lease(self, target: str) -> tuple[int, dict[str, Any]]:
        body = {"selector": {"pool": "r"}, "ttlSeconds": 600, "target": target}
        async with self.session.post(
            f"{self.api}/v1/leases", json=body, headers=self.auth
        ) as response:
            return response.status, await response.json()

    async def post(self, path: str, body: dict[str, Any]) -> int:
        async with self.session.post(f"{self.api}{path}", json=body, headers=self.auth) as response:
            return response.status

    async def delete(self, path: str) -> int:
        async with self.session.delete(f"{self.api}{path}", headers=self.auth) as response:
            return response.status

    async def offered(self) -> int | None:
        """How many proxies the API offers; None while it does not answer."""
        query = {"attr.pool": "r", "healthy": "true"}
        try:
            async with self.session.get(
                f"{self.api}/v1/proxies", params=query, headers=self.auth
            ) as response:
                return int((await response.json())["count"]) if response.status == 200 else None
        except aiohttp.ClientConnectionError:
            return None

    async def active(self) -> dict[str, int]:
        async with self.session.get(
            f"{self.api}/v1/proxies", params={"attr.pool": "r"}, headers=self.auth
        ) as response:
            body = await response.json()
        return {p["name"]: p["activeLeases"] for p in body["proxies"] if p["activeLeases"]}


async def test_leases_and_cooldowns_survive_an_operator_restart(
    kube: KubeClient, namespace: str, redis_operator: OperatorProcess
) -> None:
    total = LEASED + COOLING
    with SquidProcess(ports=total) as squid:
        async with serve_origin() as origin, aiohttp.ClientSession() as session:
            check = {**READY_CHECK, "url": origin.url}
            for index, port in enumerate(squid.ports):
                body = external_proxy(
                    f"p{index:02}", port, attributes={"pool": "r"}, healthCheck=check
                )
                await kube.create(proxy_path(namespace), body)
            crawler = Crawler(session, redis_operator)

            async def all_offered() -> bool:
                return await crawler.offered() == total

            await wait_for(all_offered, timeout=60)
            leases = []
            for _ in range(total):
                status, body = await crawler.lease(TARGET)
                assert status == 201, body
                leases.append(body)
            held, cooled = leases[:LEASED], leases[LEASED:]
            for lease in cooled:
                report = {"result": "banned", "reason": "http_403"}
                assert await crawler.post(f"/v1/leases/{lease['leaseId']}/report", report) == 200
                assert await crawler.delete(f"/v1/leases/{lease['leaseId']}") == 204
            status, refusal = await crawler.lease(TARGET)
            assert status == 409
            assert (refusal["atCapacity"], refusal["inCooldown"]) == (LEASED, COOLING)
            before = await crawler.active()

            redis_operator.stop()
            redis_operator.start()
            await wait_for(all_offered, timeout=60)

            assert await crawler.active() == before
            assert len(before) == LEASED
            status, refusal = await crawler.lease(TARGET)
            assert status == 409, "leased proxies are not handed out again, cooldowns still block"
            assert (refusal["atCapacity"], refusal["inCooldown"]) == (LEASED, COOLING)
            # The cooldowns are per target: another target gets a cooling proxy.
            status, other = await crawler.lease("other.example")
            assert status == 201
            assert other["proxy"]["name"] in {lease["proxy"]["name"] for lease in cooled}
            # The old leases are still the crawlers': they renew, report and release.
            first = held[0]
            path = f"/v1/leases/{first['leaseId']}"
            assert await crawler.post(f"{path}/renew", {"ttlSeconds": 600}) == 200
            assert await crawler.post(f"{path}/report", {"result": "ok"}) == 200
            assert await crawler.delete(path) == 204
            status, again = await crawler.lease(TARGET)
            assert status == 201
            assert again["proxy"]["name"] == first["proxy"]["name"]

            # Deleting a Proxy still ends its leases.
            second = held[1]
            name = second["proxy"]["name"]
            await kube.delete(proxy_path(namespace, name))

            async def ended() -> bool:
                return (
                    await crawler.post(f"/v1/leases/{second['leaseId']}/report", {"result": "ok"})
                    == 404
                )

            await wait_for(ended, timeout=30)
            assert name not in await crawler.active()
            # The rest of the fleet is untouched (any Proxy but the deleted one: the leases
            # pick which that is, so it may be p00).
            remaining = next(f"p{i:02}" for i in range(total) if f"p{i:02}" != name)
            await wait_for_condition(kube, namespace, remaining, "Healthy", "True")
