"""Two `egress-proxies discovery` processes over one real redis-server and the dev cluster.

The fleet is 40 exclusive External Proxies whose status says healthy (written
as the operator's health pump writes it); the tier reads it through its watch.
The tier serves every namespace, so each test selects its own Proxies by an
attribute naming its namespace (other tests' namespaces may still be ending).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.leases import open_lease_store
from harness.cluster import ClusterHandle
from harness.operator import proxy_path
from harness.redis import RedisServer
from harness.tier import DiscoveryProcess, external_proxy, report_healthy

pytestmark = pytest.mark.e2e

FLEET = 40
CLIENTS = 200
ROUNDS = 3
PREFIX = "tier-e2e"


@pytest.fixture
async def fleet(kube: KubeClient, namespace: str) -> list[str]:
    """40 healthy exclusive Proxies in the test's namespace."""
    names = [f"px-{i:02d}" for i in range(FLEET)]
    for i, name in enumerate(names):
        body = external_proxy(name, 20000 + i, attributes={"suite": namespace})
        await kube.create(proxy_path(namespace), body)
        await report_healthy(kube, namespace, name, latency=10 + i)
    return names


@pytest.fixture
def token(tmp_path: Path) -> tuple[Path, str]:
    directory = tmp_path / "tokens"
    directory.mkdir()
    value = secrets.token_urlsafe(24)
    (directory / "crawler").write_text(value)
    return directory, value


@pytest.fixture
async def replicas(
    dev_cluster: ClusterHandle,
    own_redis: RedisServer,
    token: tuple[Path, str],
    tmp_path: Path,
    fleet: list[str],
) -> AsyncIterator[list[DiscoveryProcess]]:
    """Two discovery processes sharing `own_redis`, both ready."""
    processes = [
        DiscoveryProcess(
            name=f"discovery-{letter}",
            kubeconfig=dev_cluster.kubeconfig,
            lease_store=own_redis.url,
            prefix=PREFIX,
            # 200 clients, two replicas, Redis and the apiserver on a shared 2-core machine:
            # the default 1 s would turn CPU starvation into 503s, which is not under test here.
            store_timeout=10.0,
            token_dir=token[0],
            log=tmp_path / f"discovery-{letter}.log",
            pid_dir=tmp_path / "pids",
        )
        for letter in "ab"
    ]
    try:
        for process in processes:
            process.start()
        for process in processes:
            await process.ready()
        yield processes
    finally:
        for process in processes:
            process.stop()


@dataclass
class Ledger:
    """What the clients saw: every status, and who holds which proxy right now."""

    statuses: Counter[int] = field(default_factory=Counter)
    holders: Counter[str] = field(default_factory=Counter)
    overlaps: list[str] = field(default_factory=list)
    grants: Counter[str] = field(default_factory=Counter)


async def lease_and_release(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], ledger: Ledger, suite: str
) -> None:
    """ROUNDS exclusive leases, each held briefly; 409s are retried after a pause.

    A holder is counted from the 201's arrival until before its DELETE is sent,
    inside the lease's real lifetime, so two holders counted at once are a
    double grant for certain.
    """
    granted = 0
    while granted < ROUNDS:
        request = {"ttlSeconds": 120, "selector": {"suite": suite}}
        async with http.post(f"{url}/v1/leases", json=request, headers=headers) as r:
            ledger.statuses[r.status] += 1
            body = await r.json()
        if r.status == 409:
            await asyncio.sleep(random.uniform(0.02, 0.1))
            continue
        assert r.status == 201, body
        key = f"{body['proxy']['namespace']}/{body['proxy']['name']}"
        ledger.holders[key] += 1
        ledger.grants[key] += 1
        if ledger.holders[key] > 1:
            ledger.overlaps.append(key)
        await asyncio.sleep(random.uniform(0.0, 0.05))
        ledger.holders[key] -= 1
        async with http.delete(f"{url}/v1/leases/{body['leaseId']}", headers=headers) as r:
            ledger.statuses[r.status] += 1
        granted += 1


async def test_two_replicas_never_grant_an_exclusive_proxy_twice(
    replicas: list[DiscoveryProcess],
    own_redis: RedisServer,
    token: tuple[Path, str],
    namespace: str,
) -> None:
    headers = {"Authorization": f"Bearer {token[1]}"}
    ledger = Ledger()
    store = open_lease_store(own_redis.url, prefix=PREFIX)
    store_maximum = 0
    done = asyncio.Event()

    async def watch_the_store() -> None:
        nonlocal store_maximum
        while not done.is_set():
            counts = await store.active_counts()
            store_maximum = max([store_maximum, *counts.values()])
            await asyncio.sleep(0.01)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        for replica in replicas:
            async with http.get(
                f"{replica.url}/v1/proxies", params={"attr.suite": namespace}, headers=headers
            ) as r:
                ledger.statuses[r.status] += 1
                assert (await r.json())["count"] == FLEET
        sampler = asyncio.create_task(watch_the_store())
        started = time.monotonic()
        await asyncio.gather(
            *(
                lease_and_release(http, replicas[i % 2].url, headers, ledger, namespace)
                for i in range(CLIENTS)
            )
        )
        elapsed = time.monotonic() - started
        done.set()
        await sampler
    await store.close()
    print(
        f"\nstatus histogram: {dict(sorted(ledger.statuses.items()))}; "
        f"{CLIENTS * ROUNDS} leases in {elapsed:.1f}s; "
        f"most active leases on one proxy seen in Redis: {store_maximum}"
    )
    assert ledger.overlaps == []
    assert store_maximum <= 1
    assert not [status for status in ledger.statuses if status >= 500]
    assert ledger.statuses[201] == ledger.statuses[204] == CLIENTS * ROUNDS
    assert ledger.statuses[409] > 0  # 200 clients on 40 proxies: contention really happened
    assert set(ledger.grants) == {f"{namespace}/px-{i:02d}" for i in range(FLEET)}


async def acquire(
    http: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    suite: str,
    target: str | None = None,
) -> tuple[int, dict[str, Any]]:
    request: dict[str, Any] = {"ttlSeconds": 600, "selector": {"suite": suite}}
    if target:
        request["target"] = target
    async with http.post(f"{url}/v1/leases", json=request, headers=headers) as r:
        return r.status, await r.json()


async def test_leases_and_cooldowns_survive_a_discovery_restart(
    replicas: list[DiscoveryProcess], token: tuple[Path, str], namespace: str
) -> None:
    headers = {"Authorization": f"Bearer {token[1]}"}
    restarted, other = replicas
    target = "shop.example"
    async with aiohttp.ClientSession() as http:
        held: dict[str, str] = {}
        for _ in range(10):  # each proxy carries one lease per target: ten for the target
            status, body = await acquire(http, restarted.url, headers, namespace, target)
            assert status == 201, body
            held[body["proxy"]["name"]] = body["leaseId"]
        # Three more held at once without a target (the three idle proxies), banned for the
        # target, released.
        banned = []
        for _ in range(3):
            status, body = await acquire(http, restarted.url, headers, namespace)
            assert status == 201, body
            banned.append(body)
        for body in banned:
            report = {"result": "banned", "target": target, "reason": "http_403"}
            path = f"{restarted.url}/v1/leases/{body['leaseId']}"
            async with http.post(f"{path}/report", json=report, headers=headers) as r:
                assert r.status == 200, await r.text()
            async with http.delete(path, headers=headers) as r:
                assert r.status == 204
        cooled = {body["proxy"]["name"] for body in banned}
        assert len(held) == 10 and len(cooled) == 3 and not cooled & set(held)

        restarted.stop()
        restarted.start()
        await restarted.ready()

        async with http.get(f"{restarted.url}/v1/proxies", headers=headers) as r:
            listed = {
                p["name"]: p["activeLeases"]
                for p in (await r.json())["proxies"]
                if p["namespace"] == namespace
            }
        assert {name for name, active in listed.items() if active} == set(held)

        granted_for_target: list[str] = []
        for i in range(FLEET):
            url = (restarted if i % 2 else other).url
            status, body = await acquire(http, url, headers, namespace, target)
            if status == 409:
                break
            assert status == 201, body
            granted_for_target.append(body["proxy"]["name"])
        assert len(granted_for_target) == len(set(granted_for_target))
        assert len(granted_for_target) == FLEET - len(held) - len(cooled)
        assert not set(granted_for_target) & (set(held) | cooled)
        # Only that target is blocked: another one gets exactly the three cooled proxies.
        rest = set()
        for _ in range(3):
            status, body = await acquire(http, restarted.url, headers, namespace, "other.example")
            assert status == 201, body
            rest.add(body["proxy"]["name"])
        assert rest == cooled

        # And the leases granted before the restart still renew on the restarted replica.
        lease_id = next(iter(held.values()))
        renew = {"ttlSeconds": 600}
        async with http.post(
            f"{restarted.url}/v1/leases/{lease_id}/renew", json=renew, headers=headers
        ) as r:
            assert r.status == 200, await r.text()
