"""A discovery-tier replica's console, on the dev cluster: read-only, what this replica served."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.kube import KubeClient
from egress_proxies.leases import MemoryLeaseStore
from egress_proxies.settings import DiscoverySettings
from egress_proxies.tier.app import DiscoveryTier
from harness.cluster import ClusterHandle
from harness.operator import proxy_path
from harness.tier import external_proxy, report_healthy
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

API = "/console/api/v1"


@dataclass
class Replica:
    """A tier replica served in this test's loop, and the tokens it takes."""

    discovery: str
    console: str
    crawler: str
    actor: str

    async def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return await self.call("GET", path)

    async def call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method,
                f"{self.console}{path}",
                json=body,
                headers={"Authorization": f"Bearer {self.actor}"},
            ) as response,
        ):
            return response.status, await response.json()


@pytest.fixture
async def replica(
    dev_cluster: ClusterHandle, kube: KubeClient, tmp_path: Path
) -> AsyncIterator[Replica]:
    crawler, actor = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    for directory, key, token in (
        (tmp_path / "tokens", "crawler", crawler),
        (tmp_path / "console-users", "alice.act", actor),
    ):
        directory.mkdir()
        (directory / key).write_text(token)
    discovery_port, console_port = free_port(), free_port()
    settings = DiscoverySettings(
        lease_store="memory",
        kubeconfig=dev_cluster.kubeconfig,
        discovery_host="127.0.0.1",
        discovery_port=discovery_port,
        discovery_tokens_dir=tmp_path / "tokens",
        console_tokens_dir=tmp_path / "console-users",
        console_host="127.0.0.1",
        console_port=console_port,
    )
    tier = DiscoveryTier(settings, kube, MemoryLeaseStore())
    stop = asyncio.Event()
    serving = asyncio.create_task(tier.serve(stop))
    served = Replica(
        f"http://127.0.0.1:{discovery_port}", f"http://127.0.0.1:{console_port}", crawler, actor
    )
    try:
        await wait_for(lambda: _answers(served), timeout=30)
        yield served
    finally:
        stop.set()
        await serving


async def _answers(replica: Replica) -> bool:
    try:
        status, _ = await replica.get(f"{API}/session")
    except aiohttp.ClientConnectionError:
        return False
    return status == 200


async def test_a_tier_console_shows_its_leases_and_offers_no_action(
    kube: KubeClient, namespace: str, replica: Replica
) -> None:
    status, who = await replica.get(f"{API}/session")
    assert (status, who["user"], who["mayAct"], who["pools"]) == (
        200,
        "alice",
        False,
        False,
    )
    await kube.create(
        proxy_path(namespace), external_proxy("ext", 3128, attributes={"test": namespace})
    )
    await report_healthy(kube, namespace, "ext", latency=7)
    key = f"{namespace}/ext"

    async def listed() -> bool:
        _, fleet = await replica.get(f"{API}/fleet")
        return any(row["key"] == key and row["healthy"] == "True" for row in fleet["proxies"])

    await wait_for(listed, timeout=30)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{replica.discovery}/v1/leases",
            json={"ttlSeconds": 60, "target": "tier.example", "selector": {"test": namespace}},
            headers={"Authorization": f"Bearer {replica.crawler}"},
        ) as granted,
    ):
        assert granted.status == 201, await granted.text()

    _, leases = await replica.get(f"{API}/leases")
    assert [(lease["proxy"], lease["target"]) for lease in leases["leases"]] == [
        (key, "tier.example")
    ]
    _, sites = await replica.get(f"{API}/sites")
    assert [site["target"] for site in sites["sites"]] == ["tier.example"]
    assert await replica.get(f"{API}/pools") == (
        404,
        {
            "error": "no_pools",
            "detail": "this process does not watch pools; open the operator's console",
        },
    )
    refused = await replica.call(
        "POST", f"{API}/proxies/{namespace}/ext/cordon", {"cordoned": True}
    )
    assert refused[0] == 403
    assert not (await kube.get(proxy_path(namespace, "ext")))["spec"].get("cordoned")
