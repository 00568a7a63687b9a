"""A rolling restart of the HA pair (each operator in turn: SIGTERM, start again) while a
crawler holds leases and keeps leasing: no lease lost, no 5xx, no Proxy created or deleted.

Two operator processes on one shared backend (a real PostgreSQL) and one lease store (a
real Redis), ranked by start. The crawler talks to whichever replica is Ready, as a
Service would route it; a connection refused by a replica that is stopping sends it to
the other one.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.lease_holder import LeaseHolder
from harness.operator import OperatorProcess, new_operator
from harness.origins import Origin, serve_origin
from harness.postgres import PostgresServer
from harness.redis import RedisServer
from tests.operator.test_operator_restart import create_pool, pool_body, settled

pytestmark = pytest.mark.e2e

POOL = "rolled"
CRAWL_PACE_SECONDS = 0.2  # the crawler's own pace between requests
HELD = 2  # leases the crawler holds at once (one per member)


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


class Crawler(LeaseHolder):
    """Leases and renews through whichever replica answers /readyz; records every status."""

    def __init__(self, session: aiohttp.ClientSession, replicas: list[OperatorProcess]) -> None:
        super().__init__(POOL, held=HELD, pace_seconds=CRAWL_PACE_SECONDS)
        self._session = session
        self._replicas = replicas

    async def _ready(self) -> OperatorProcess | None:
        for replica in self._replicas:
            with contextlib.suppress(aiohttp.ClientError):
                async with self._session.get(f"{replica.discovery_url}/readyz") as response:
                    if response.status == 200:
                        return replica
        return None

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        replica = await self._ready()
        if replica is None:
            return None
        headers = {"Authorization": f"Bearer {replica.discovery_token}"}
        try:
            async with self._session.request(
                method, f"{replica.discovery_url}{path}", json=body, headers=headers
            ) as response:
                answer = await response.json() if response.status != 204 else {}
                return response.status, answer
        except aiohttp.ClientError:
            return None  # the replica went away between /readyz and the request


async def ready(operator: OperatorProcess) -> None:
    async def answers() -> bool:
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{operator.discovery_url}/readyz") as response,
            ):
                return response.status == 200
        except aiohttp.ClientError:
            return False

    await wait_for(answers, timeout=120, interval=0.2)


async def test_a_rolling_restart_loses_no_lease_answers_no_5xx_and_touches_no_proxy(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    origin: Origin,
) -> None:
    env = {
        "EGRESS_PROXIES_STATE_BACKEND": f"{postgres_server.url}&table=roll_{secrets.token_hex(3)}",
        **postgres_server.env,
        "EGRESS_PROXIES_LEASE_STORE": redis_server.url,
        "EGRESS_PROXIES_LEASE_STORE_PREFIX": f"roll-{secrets.token_hex(4)}",
        "EGRESS_PROXIES_PRIORITY_BY_START": "true",
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS": "15",
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
    }
    replicas = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        replicas.append(new_operator(dev_cluster.kubeconfig, namespace, tmp_path / name, env))
    first, second = replicas
    first.start()
    try:
        await create_pool(kube, namespace, pool_body(POOL, 2, origin))
        await settled(kube, namespace, POOL, 2)
        second.start()  # the standby joins, as a Deployment's second pod would
        await ready(second)
        async with (
            ProxyCensus(kube, namespace, pool=POOL) as census,
            aiohttp.ClientSession() as session,
        ):
            crawler = Crawler(session, replicas)
            stop = asyncio.Event()
            crawling = asyncio.create_task(crawler.crawl(stop))
            try:
                await wait_for(lambda: _some(crawler.leases), timeout=60, interval=0.2)
                for replica in replicas:  # a rolling update: one at a time
                    replica.stop()
                    replica.start()
                    await ready(replica)
                    await wait_for(lambda: _some(crawler.renewals), timeout=30, interval=0.2)
                renewals_after_roll = len(crawler.renewals)
                leases_after_roll = len(crawler.leases)
                await wait_for(
                    lambda: _more(crawler.renewals, renewals_after_roll), timeout=30, interval=0.2
                )
                await wait_for(
                    lambda: _more(crawler.leases, leases_after_roll), timeout=30, interval=0.2
                )
            finally:
                stop.set()
                await crawling
        census.check()
        print(census, f"statuses: {len(crawler.statuses)}, renewals: {len(crawler.renewals)}")
        assert crawler.leases
        assert all(status < 500 for status in crawler.statuses + crawler.renewals)
        assert set(crawler.renewals) == {200}, "every lease held survived the roll"
        # 409 no_match: both members are leased (a crawler asking faster than they free up).
        assert set(crawler.statuses) <= {201, 204, 409}, crawler.statuses
        assert census.created == [] and census.deleting == []
    finally:
        for replica in replicas:
            replica.stop()


async def _some(items: list[Any]) -> bool:
    return bool(items)


async def _more(items: list[Any], than: int) -> bool:
    return len(items) > than
