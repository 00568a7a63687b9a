"""Under 200 concurrent lease requests no proxy ever holds more leases than its capacity."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from tests.discovery.discovery_helpers import Api, record, serve_api

pytestmark = pytest.mark.integration

CAPACITIES = {f"p{index}": index % 4 + 1 for index in range(12)}


async def lease_once(api: Api) -> tuple[int, dict[str, Any]]:
    response = await api.client.post(
        "/v1/leases", json={"ttlSeconds": 60}, headers=api.tokens.headers()
    )
    return response.status, await response.json()


async def test_200_concurrent_acquires_respect_every_capacity() -> None:
    records = [record(name, max_leases=capacity) for name, capacity in CAPACITIES.items()]
    async with serve_api(*records) as api:
        outcomes = await asyncio.gather(*(lease_once(api) for _ in range(200)))
        statuses = Counter(status for status, _ in outcomes)
        per_proxy = Counter(body["proxy"]["name"] for status, body in outcomes if status == 201)
        capacity = sum(CAPACITIES.values())
        assert statuses == {201: capacity, 409: 200 - capacity}
        assert per_proxy == CAPACITIES
        assert (await api.store.active_counts()) == {f"crawl/{n}": c for n, c in CAPACITIES.items()}


async def test_leasing_and_releasing_concurrently_never_overbooks() -> None:
    async with serve_api(*(record(f"p{index}") for index in range(5))) as api:
        peak = 0

        async def crawler() -> None:
            nonlocal peak
            for _ in range(5):
                status, body = await lease_once(api)
                counts = await api.store.active_counts()
                assert max(counts.values(), default=0) <= 1
                peak = max(peak, sum(counts.values()))
                if status == 201:
                    assert await api.release(body["leaseId"]) == 204

        await asyncio.gather(*(crawler() for _ in range(40)))
        assert peak == 5
        assert api.store.last_counts().leases == 0
