"""What crawler clients lean on: Retry-After on 409, renew, rate limits that are not bans,
report reasons in metrics and logs, and the ban-storm guard (real app, virtual clock)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.discovery.discovery_helpers import Api, record, serve_api

pytestmark = pytest.mark.integration

WINDOW = 300.0
RATE_WINDOW = 30.0


async def lease_response(api: Api, **body: Any) -> tuple[int, dict[str, str], dict[str, Any]]:
    body.setdefault("ttlSeconds", 60)
    response = await api.client.post("/v1/leases", json=body, headers=api.tokens.headers())
    return response.status, dict(response.headers), await response.json()


async def report(api: Api, lease_id: str, **body: Any) -> int:
    response = await api.client.post(
        f"/v1/leases/{lease_id}/report", json=body, headers=api.tokens.headers()
    )
    return response.status


async def renew(api: Api, lease_id: str, ttl: Any) -> tuple[int, dict[str, Any]]:
    response = await api.client.post(
        f"/v1/leases/{lease_id}/renew", json={"ttlSeconds": ttl}, headers=api.tokens.headers()
    )
    return response.status, await response.json() if response.status != 204 else {}


async def test_retry_after_is_the_earliest_lease_expiry_among_busy_proxies() -> None:
    async with serve_api(record("a"), record("b")) as api:
        await api.lease(ttlSeconds=90)
        await api.lease(ttlSeconds=40)
        api.clock.advance(10.5)
        status, headers, body = await lease_response(api)
        assert status == 409
        assert headers["Retry-After"] == "30", "40 s lease, 10.5 s gone: 29.5 s rounded up"
        assert body["retryAfterSeconds"] == 30
        api.clock.advance(29.5)
        await api.lease()


async def test_retry_after_counts_a_cooldown_end() -> None:
    async with serve_api(record("a")) as api:
        lease = await api.lease(target="t.example")
        assert await report(api, lease["leaseId"], result="banned", reason="http_403") == 200
        await api.release(lease["leaseId"])
        status, headers, body = await lease_response(api, target="t.example")
        assert (status, headers["Retry-After"], body["inCooldown"]) == (409, "300", 1)


async def test_no_retry_after_when_nothing_matching_is_healthy() -> None:
    async with serve_api(record("down", healthy=False)) as api:
        status, headers, body = await lease_response(api)
        assert status == 409
        assert "Retry-After" not in headers
        assert body["retryAfterSeconds"] is None
        status, headers, body = await lease_response(api, selector={"no": "such"})
        assert (status, body["considered"], "Retry-After" in headers) == (409, 0, False)


async def test_renew_extends_from_now_within_the_same_bounds_and_404s_once_ended() -> None:
    async with serve_api(record("a")) as api:
        lease = await api.lease(ttlSeconds=30)
        api.clock.advance(20)
        status, renewed = await renew(api, lease["leaseId"], 60)
        assert status == 200
        assert (renewed["leaseId"], renewed["ttlSeconds"]) == (lease["leaseId"], 60)
        api.clock.advance(59)
        await api.lease(status=409)
        assert (await renew(api, lease["leaseId"], 3601))[0] == 400
        assert (await renew(api, lease["leaseId"], 0))[0] == 400
        api.clock.advance(1)
        await api.lease()
        assert (await renew(api, lease["leaseId"], 60))[0] == 404


async def test_renew_of_a_released_lease_is_404() -> None:
    async with serve_api(record("a")) as api:
        lease = await api.lease()
        await api.release(lease["leaseId"])
        status, body = await renew(api, lease["leaseId"], 60)
        assert (status, body["error"]) == (404, "unknown_lease")


async def cooled_for(api: Api, **report_body: Any) -> float:
    """Lease, report, release; then how long until the target leases again (whole seconds)."""
    lease = await api.lease(target="t.example", ttlSeconds=1)
    assert await report(api, lease["leaseId"], **report_body) == 200
    await api.release(lease["leaseId"])
    status, headers, _ = await lease_response(api, target="t.example", ttlSeconds=1)
    assert status == 409
    waited = float(headers["Retry-After"])
    api.clock.advance(waited - 1)
    assert (await lease_response(api, target="t.example", ttlSeconds=1))[0] == 409
    api.clock.advance(1)
    again = await api.lease(target="t.example", ttlSeconds=1)
    await api.release(again["leaseId"])
    return waited


async def test_rate_limits_use_their_own_short_growing_window_and_the_site_s_retry_after() -> None:
    async with serve_api(record("a"), cooldown_window=WINDOW, rate_limit_window=RATE_WINDOW) as api:
        assert await cooled_for(api, result="rate_limited") == 30
        assert await cooled_for(api, result="rate_limited") == 60, "a repeat doubles"
        assert await cooled_for(api, result="rate_limited", retryAfterSeconds=7) == 7
        assert await cooled_for(api, result="rate_limited", retryAfterSeconds=9000) == WINDOW
        assert await cooled_for(api, result="banned") == WINDOW, "bans keep the long window"


async def test_an_ok_report_resets_the_rate_limit_growth() -> None:
    async with serve_api(record("a"), rate_limit_window=RATE_WINDOW) as api:
        assert await cooled_for(api, result="rate_limited") == 30
        lease = await api.lease(target="t.example")
        assert await report(api, lease["leaseId"], result="ok") == 200
        await api.release(lease["leaseId"])
        assert await cooled_for(api, result="rate_limited") == 30


async def test_reasons_are_counted_by_result_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="egress_proxies.discovery.handlers")
    async with serve_api(record("a", max_leases=5)) as api:
        lease = await api.lease(target="t.example")
        for reason in ("captcha", "captcha", "http_403"):
            assert await report(api, lease["leaseId"], result="banned", reason=reason) == 200
        assert await report(api, lease["leaseId"], result="ok") == 200
        assert await report(api, lease["leaseId"], result="ok", reason="Bad Reason!") == 400
        samples = {
            (labels["result"], labels["reason"]): value
            for family in api.registry.collect()
            if family.name == "egress_proxies_lease_reports"
            for name, labels, value, *_ in family.samples
            if name.endswith("_total")
        }
        assert samples == {("banned", "captcha"): 2, ("banned", "http_403"): 1, ("ok", ""): 1}
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("report ")]
    assert logged[0] == "report banned (reason captcha) on proxy crawl/a for target t.example"
    assert len(logged) == 4
    assert not any("p@ss" in message for message in caplog.messages)


async def test_a_ban_storm_pauses_the_target_and_other_targets_keep_leasing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = [record(f"p{i}", attributes={"pool": "x"}) for i in range(4)]
    async with serve_api(*fleet, storm_share=0.5, storm_window=60, storm_pause=120) as api:
        selector = {"pool": "x"}
        for reason, advance in (("http_403", 5), ("captcha", 5), ("http_403", 0)):
            lease = await api.lease(selector=selector, target="shop.example")
            assert await report(api, lease["leaseId"], result="banned", reason=reason) == 200
            await api.release(lease["leaseId"])
            api.clock.advance(advance)
        status, headers, body = await lease_response(api, selector=selector, target="shop.example")
        assert status == 409
        assert (body["error"], body["targetPaused"]) == ("target_paused", True)
        assert body["inCooldown"] == 4, "the 4th proxy is healthy and idle but paused too"
        assert headers["Retry-After"] == "120", "the pause's end, when the idle p3 may serve"
        assert api.registry.get_sample_value("egress_proxies_targets_paused") == 1
        assert api.registry.get_sample_value("egress_proxies_target_pauses_total") == 1
        other = await api.lease(selector=selector, target="news.example")
        assert other["proxy"]["name"] in {"p0", "p1", "p2", "p3"}
        api.clock.advance(120)
        resumed = await api.lease(selector=selector, target="shop.example")
        assert resumed["proxy"]["name"] not in {other["proxy"]["name"]}
        assert api.registry.get_sample_value("egress_proxies_targets_paused") == 0
    assert any("ban storm: target shop.example paused" in m for m in caplog.messages)


async def test_bans_from_a_minority_of_the_pool_do_not_pause() -> None:
    fleet = [record(f"p{i}") for i in range(4)]
    async with serve_api(*fleet, storm_share=0.5, storm_window=60, storm_pause=120) as api:
        for _ in range(2):
            lease = await api.lease(target="shop.example")
            assert await report(api, lease["leaseId"], result="banned") == 200
            api.clock.advance(61)
        status, _, body = await lease_response(api, target="shop.example")
        assert (status, body.get("targetPaused")) == (201, None)
