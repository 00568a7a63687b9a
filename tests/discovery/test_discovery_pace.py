"""The pace on the wire: every lease, renewal and report carries it; reports teach it."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.leases import PaceLimits, TargetBounds
from tests.discovery.discovery_helpers import Api, record, serve_api

pytestmark = pytest.mark.integration

SITE = "shop.example"


async def post(api: Api, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await api.client.post(path, json=body, headers=api.tokens.headers())
    return response.status, await response.json()


async def report(api: Api, lease_id: str, **body: Any) -> tuple[int, dict[str, Any]]:
    return await post(api, f"/v1/leases/{lease_id}/report", body)


async def test_a_lease_carries_its_pace_and_reports_move_it() -> None:
    async with serve_api(record("a"), pace=PaceLimits(start=1.0, decrease=0.5)) as api:
        lease = await api.lease(target=SITE)
        assert lease["pace"] == {
            "requestsPerSecond": 1.0,
            "burst": 1,
            "lastLoweredAt": None,
            "waitingHeld": None,
        }
        status, body = await report(api, lease["leaseId"], result="ok", count=1)
        assert status == 200
        assert body == {
            "pace": {
                "requestsPerSecond": 4.0,
                "burst": 1,
                "lastLoweredAt": None,
                "waitingHeld": None,
            }
        }
        status, renewed = await post(
            api, f"/v1/leases/{lease['leaseId']}/renew", {"ttlSeconds": 60}
        )
        assert (status, renewed["pace"]["requestsPerSecond"]) == (200, 4.0)
        api.clock.advance(1.0)
        status, body = await report(
            api, lease["leaseId"], result="rate_limited", retryAfterSeconds=2
        )
        assert status == 200
        assert body["pace"]["requestsPerSecond"] == 2.0
        assert body["pace"]["lastLoweredAt"] == "2025-06-15T15:06:41Z"


async def test_an_old_clients_one_result_report_still_works() -> None:
    async with serve_api(record("a"), pace=PaceLimits(start=2.0)) as api:
        lease = await api.lease(target=SITE)
        status, body = await report(api, lease["leaseId"], result="ok", target=SITE)
        assert (status, body["pace"]["requestsPerSecond"]) == (200, 4.0)
        assert await api.report(lease["leaseId"], "banned") == 200


async def test_a_rate_limit_report_says_what_the_site_accepted() -> None:
    async with serve_api(record("a"), pace=PaceLimits(start=8.0, cruise=0.95)) as api:
        lease = await api.lease(target=SITE)
        status, body = await report(
            api, lease["leaseId"], result="rate_limited", acceptedLastSecond=3
        )
        assert (status, body["pace"]["requestsPerSecond"]) == (200, 2.85)


@pytest.mark.parametrize("accepted", [-1, "3", 1.5, True, 1_000_001])
async def test_a_bad_accepted_count_is_a_400(accepted: Any) -> None:
    async with serve_api(record("a")) as api:
        lease = await api.lease(target=SITE)
        status, body = await report(
            api, lease["leaseId"], result="rate_limited", acceptedLastSecond=accepted
        )
        assert (status, body["error"]) == (400, "invalid_request")
        assert "acceptedLastSecond" in body["detail"]


async def test_a_refused_crawler_says_what_it_holds_and_holders_hear_it() -> None:
    async with serve_api(record("a"), record("b")) as api:
        first = await api.lease(target=SITE)
        await api.lease(target=SITE, held=1)
        response = await api.client.post(
            "/v1/leases",
            json={"ttlSeconds": 60, "target": SITE, "held": 0},
            headers=api.tokens.headers(),
        )
        assert (response.status, response.headers["Retry-After"]) == (409, "2")
        status, body = await report(api, first["leaseId"], result="ok", count=1)
        assert (status, body["pace"]["waitingHeld"]) == (200, 0)


@pytest.mark.parametrize("held", [-1, "1", 1.5, True, 1_000_001])
async def test_a_bad_held_count_is_a_400(held: Any) -> None:
    async with serve_api(record("a")) as api:
        response = await api.client.post(
            "/v1/leases",
            json={"ttlSeconds": 60, "target": SITE, "held": held},
            headers=api.tokens.headers(),
        )
        body = await response.json()
        assert (response.status, body["error"]) == (400, "invalid_request")
        assert "held" in body["detail"]


@pytest.mark.parametrize("count", [0, -1, "4", 1.5, True, 1_000_001])
async def test_a_bad_count_is_a_400(count: Any) -> None:
    async with serve_api(record("a")) as api:
        lease = await api.lease(target=SITE)
        status, body = await report(api, lease["leaseId"], result="ok", count=count)
        assert (status, body["error"]) == (400, "invalid_request")
        assert "count" in body["detail"]


async def test_a_full_target_answers_409_until_its_first_lease_ends() -> None:
    bounds = PaceLimits(targets=(TargetBounds(SITE, max_leases=1),))
    async with serve_api(record("a"), record("b"), pace=bounds) as api:
        await api.lease(target=SITE, ttlSeconds=42)
        response = await api.client.post(
            "/v1/leases", json={"ttlSeconds": 60, "target": SITE}, headers=api.tokens.headers()
        )
        body = await response.json()
        assert response.status == 409
        assert response.headers["Retry-After"] == "42"
        assert body["error"] == "target_full" and body["targetFull"] is True
        assert (body["considered"], body["atCapacity"], body["retryAfterSeconds"]) == (2, 2, 42)
        await api.lease(target="other.example")


async def test_the_fleet_bound_is_split_between_the_targets_leases() -> None:
    bounds = PaceLimits(start=4.0, targets=(TargetBounds("*.example", max_rate=4.0),))
    async with serve_api(record("a"), record("b"), pace=bounds) as api:
        first = await api.lease(target=SITE)
        second = await api.lease(target=SITE)
        assert [first["pace"]["requestsPerSecond"], second["pace"]["requestsPerSecond"]] == [
            4.0,
            2.0,
        ]
        status, body = await report(api, first["leaseId"], result="ok", count=1)
        assert (status, body["pace"]["requestsPerSecond"]) == (200, 2.0)
