"""The pool controller on the real API server: no restart or relist counts from a partial view.

No operator runs here: the controllers are built in the test (a fresh one is
a restarted operator), so each round is driven and observed directly, and a
census (a watch of the test's own) counts every Proxy at every moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.catalog.feed import PROXIES_WATCH, fleet_watches
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import SystemClock
from egress_proxies.kube import KubeClient
from egress_proxies.kube.client import JsonObject
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.kube.watches import Watches
from egress_proxies.pools import DemandBook, PoolComponents, PoolController
from harness.census import ProxyCensus
from harness.cluster import wait_for

pytestmark = pytest.mark.integration

REPLICAS, SURGE = 4, 1


class Interrupting:
    """The real client, with a Proxy watch the test can break into a real 410 Gone.

    `expire()` ends the current Proxy watch; the next one asks for a compacted
    resourceVersion, which the API server answers with 410, and the relist
    that follows waits for `lists_allowed`.
    """

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._expired = asyncio.Event()
        self.gone_answered = 0
        self.lists_allowed = asyncio.Event()
        self.lists_allowed.set()
        self.listing = asyncio.Event()

    def expire(self) -> None:
        self._expired.set()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        self.listing.set()
        await self.lists_allowed.wait()
        return await self._kube.request(method, path, body=body, params=params)

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[JsonObject]:
        if "/proxies" not in path:  # the Secrets' watches go on as they are
            async for event in self._kube.watch(
                path, resource_version=resource_version, timeout_seconds=timeout_seconds
            ):
                yield event
            return
        if self._expired.is_set():
            self._expired.clear()
            self.gone_answered += 1
            resource_version = "1"  # long compacted: the server says 410 Gone
        stream: AsyncGenerator[JsonObject, None] = self._kube.watch(  # type: ignore[assignment]
            path, resource_version=resource_version, timeout_seconds=timeout_seconds
        )
        expired = asyncio.create_task(self._expired.wait())
        following: asyncio.Future[JsonObject] | None = None
        try:
            while True:
                following = asyncio.ensure_future(anext(stream))
                done, _ = await asyncio.wait(
                    {following, expired}, return_when=asyncio.FIRST_COMPLETED
                )
                if following not in done:
                    return  # the stream ends as a server-ended watch does
                try:
                    event = following.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            expired.cancel()
            if following is not None and not following.done():
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            await stream.aclose()


class Operator:
    """One operator's pool side: its own fleet, watches and controller."""

    def __init__(self, client: Any, kube: KubeClient, namespace: str) -> None:
        self.fleet = Fleet()
        self.watches: Watches = fleet_watches(
            client, self.fleet, SystemClock(), namespaces=[namespace]
        )

        async def no_leases() -> Mapping[ProxyKey, Mapping[str | None, int]]:
            return {}

        self.controller = PoolController(
            PoolComponents(
                client=kube,
                members=self.fleet,
                lease_counts=no_leases,
                demand=DemandBook(SystemClock()),
                max_lease_seconds=60.0,
                synced=lambda: self.watches.synced(PROXIES_WATCH),
                watched_version=lambda: self.watches.version(PROXIES_WATCH),
            )
        )
        self._task = asyncio.create_task(self.watches.run())

    async def round(self, kube: KubeClient, namespace: str) -> None:
        pool = await kube.get(PROXY_POOLS.path(namespace, "big"))
        await self.controller.converge(pool, lambda *_: None)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def pool_manifest() -> dict[str, Any]:
    return {
        "apiVersion": PROXY_POOLS.api_version,
        "kind": "ProxyPool",
        "metadata": {"name": "big"},
        "spec": {
            "replicas": REPLICAS,
            "strategy": {"maxSurge": SURGE, "maxUnavailable": 0},
            "template": {
                "spec": {
                    "provider": "kubernetes",
                    "kubernetes": {"image": "squid:local"},
                }
            },
        },
    }


async def _members(kube: KubeClient, namespace: str) -> list[str]:
    listing = await kube.get(PROXIES.path(namespace))
    return sorted(item["metadata"]["name"] for item in listing["items"])


async def test_a_restarted_controller_counts_the_members_it_finds_and_creates_none(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(PROXY_POOLS.path(namespace), pool_manifest())
    first = Operator(kube, kube, namespace)
    try:
        await first.watches.wait_synced()

        async def four_members() -> bool:
            await first.round(kube, namespace)
            return len(await _members(kube, namespace)) == REPLICAS

        await wait_for(four_members, timeout=30)
    finally:
        await first.stop()
    before = await _members(kube, namespace)

    async with ProxyCensus(kube, namespace, pool="big") as census:
        # The restarted operator's rounds start at once, before its watch has listed.
        restarted = Operator(kube, kube, namespace)
        try:
            while restarted.controller.rounds < 5:
                await restarted.round(kube, namespace)
                await asyncio.sleep(0.05)
        finally:
            await restarted.stop()

    census.check()
    assert census.created == []
    assert await _members(kube, namespace) == before
    assert census.peak == REPLICAS


async def test_during_a_relist_forced_by_410_no_round_runs_and_after_it_the_pool_is_whole(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(PROXY_POOLS.path(namespace), pool_manifest())
    client = Interrupting(kube)
    operator = Operator(client, kube, namespace)
    try:
        await operator.watches.wait_synced()

        async def four_members() -> bool:
            await operator.round(kube, namespace)
            return len(await _members(kube, namespace)) == REPLICAS

        await wait_for(four_members, timeout=30)

        async with ProxyCensus(kube, namespace, pool="big") as census:
            client.lists_allowed.clear()
            client.listing.clear()
            client.expire()
            await asyncio.wait_for(client.listing.wait(), 10)  # 410 answered; relisting
            assert client.gone_answered == 1
            assert not operator.watches.synced(PROXIES_WATCH)
            # A member deleted in the gap: a stale view still shows it.
            gone = (await _members(kube, namespace))[0]
            await kube.delete(PROXIES.path(namespace, gone))
            rounds = operator.controller.rounds
            for _ in range(5):
                await operator.round(kube, namespace)
            assert operator.controller.rounds == rounds  # no round on a partial view
            assert census.created == []

            client.lists_allowed.set()
            await operator.watches.wait_synced()

            async def whole_again() -> bool:
                await operator.round(kube, namespace)
                return len(await _members(kube, namespace)) == REPLICAS

            await wait_for(whole_again, timeout=30)

        census.check()
        assert len(census.created) == 1  # the one replacement, made once
        assert census.deleting == [gone]
        assert census.peak <= REPLICAS + SURGE
    finally:
        await operator.stop()
