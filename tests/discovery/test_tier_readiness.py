"""/readyz of the separate tier: 503 not_synced until the fleet is listed, then 200."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore

pytestmark = pytest.mark.integration


async def test_readyz_is_503_not_synced_until_the_fleet_is_listed() -> None:
    synced = False
    app = create_app(Fleet(), MemoryLeaseStore(), frozenset, synced=lambda: synced)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/readyz")
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        assert (await response.json())["error"] == "not_synced"
        assert (await client.get("/healthz")).status == 200
        synced = True
        response = await client.get("/readyz")
        assert response.status == 200
        assert await response.json() == {"status": "ok"}


async def test_leases_and_listings_are_503_not_synced_while_the_fleet_is_partial() -> None:
    """A lease from a partial fleet could miss every free proxy and count as pool demand."""
    synced = False
    app = create_app(
        Fleet(), MemoryLeaseStore(), frozenset, synced=lambda: synced, allow_no_auth=True
    )
    async with TestClient(TestServer(app)) as client:
        lease = {"selector": {}, "target": "example.com", "ttlSeconds": 60}
        for response in (
            await client.post("/v1/leases", json=lease),
            await client.get("/v1/proxies"),
        ):
            assert response.status == 503
            assert response.headers["Retry-After"] == "1"
            assert (await response.json())["error"] == "not_synced"
        bad = await client.post("/v1/leases", json={**lease, "ttlSeconds": -1})
        assert bad.status == 400  # bad input is still named first
        synced = True
        response = await client.post("/v1/leases", json=lease)
        assert response.status == 409  # whole, and empty: no proxy to lease
        assert (await client.get("/v1/proxies")).status == 200
