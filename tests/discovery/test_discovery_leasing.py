"""Lease lifecycles over HTTP in virtual time: expiry, cooldowns, backoff, late reports."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from tests.discovery.discovery_helpers import Api, record, serve_api

pytestmark = pytest.mark.integration

WINDOW = 60.0
CAP = 480.0


def leasing_api(*names: str, max_leases: int = 1) -> AbstractAsyncContextManager[Api]:
    return serve_api(
        *(record(name, max_leases=max_leases) for name in names),
        cooldown_window=WINDOW,
        ban_backoff_cap=CAP,
    )


async def test_a_lease_expires_after_its_ttl() -> None:
    async with leasing_api("only") as api:
        lease = await api.lease(ttlSeconds=30)
        await api.lease(status=409)
        api.clock.advance(30)
        again = await api.lease(ttlSeconds=30)
        assert again["proxy"]["name"] == "only"
        assert again["leaseId"] != lease["leaseId"]


async def test_release_is_idempotent_and_frees_the_proxy() -> None:
    async with leasing_api("only") as api:
        lease = await api.lease()
        for _ in range(3):
            assert await api.release(lease["leaseId"]) == 204
        await api.lease()
        assert api.store.last_counts().leases == 1


async def test_cooldowns_are_per_target() -> None:
    async with leasing_api("only", max_leases=5) as api:
        lease = await api.lease(target="a.example")
        assert await api.report(lease["leaseId"], "rate_limited") == 200
        cooling = await api.lease(status=409, target="a.example")
        assert (cooling["considered"], cooling["inCooldown"]) == (1, 1)
        await api.lease(target="b.example")
        api.clock.advance(WINDOW)
        await api.lease(target="a.example")


async def lease_status(api: Api) -> int:
    response = await api.client.post(
        "/v1/leases", json={"target": "t.example", "ttlSeconds": 1}, headers=api.tokens.headers()
    )
    return response.status


async def test_repeated_bans_back_off_exponentially_up_to_a_cap() -> None:
    async with leasing_api("only") as api:
        for cooldown in (60, 120, 240, 480, 480):
            lease = await api.lease(target="t.example", ttlSeconds=1)
            assert await api.report(lease["leaseId"], "banned") == 200
            assert await api.release(lease["leaseId"]) == 204
            api.clock.advance(cooldown - 0.001)
            assert await lease_status(api) == 409
            api.clock.advance(0.001)
            assert await lease_status(api) == 201
            api.clock.advance(1)


async def test_a_late_report_still_puts_the_proxy_on_cooldown() -> None:
    async with leasing_api("only") as api:
        lease = await api.lease(target="t.example", ttlSeconds=30)
        api.clock.advance(30 + WINDOW - 1)
        assert await api.report(lease["leaseId"], "banned") == 200
        await api.lease(status=409, target="t.example")
        api.clock.advance(1)
        assert await api.report(lease["leaseId"], "banned") == 404


async def test_no_match_counts_add_up() -> None:
    async with serve_api(
        record("busy"),
        record("cooling"),
        record("down", healthy=False),
        record("unprobed", healthy=None),
        record("leaving", deleting=True),
    ) as api:
        busy = await api.lease(target="t.example")
        cooling = await api.lease()
        await api.report(cooling["leaseId"], "banned", "t.example")
        await api.release(cooling["leaseId"])
        body = await api.lease(status=409, target="t.example")
        assert {busy["proxy"]["name"], cooling["proxy"]["name"]} == {"busy", "cooling"}
        assert (body["atCapacity"], body["inCooldown"], body["unhealthy"]) == (1, 1, 3)
        assert (
            body["considered"] == 5 == body["atCapacity"] + body["inCooldown"] + body["unhealthy"]
        )
