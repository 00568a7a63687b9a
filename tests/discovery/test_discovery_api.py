"""Every route of the discovery API on a real loopback server, and how it refuses bad input."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from egress_proxies.catalog import ProxyRecord
from egress_proxies.discovery import MAX_BODY_BYTES
from tests.discovery.discovery_helpers import START, Api, record, serve_api

pytestmark = pytest.mark.integration

EU = {"region": "eu", "tier": "gold"}


@pytest.fixture
async def api() -> Any:
    async with serve_api(
        record("eu-1", attributes=EU, latency_millis=20),
        record("eu-2", attributes=EU, latency_millis=5, max_leases=2),
        record("us-1", attributes={"region": "us"}, healthy=False),
        record("ext", attributes={"region": "us"}, credentials=None, managed=False),
        record("new", attributes=EU, healthy=None),
        record("v6", host="::1", attributes={"region": "v6"}),
    ) as served:
        yield served


async def get_json(api: Api, path: str, status: int = 200) -> Any:
    response = await api.client.get(path, headers=api.tokens.headers())
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


async def test_healthz(api: Api) -> None:
    response = await api.client.get("/healthz")
    assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_readyz_answers_without_a_token_while_the_store_answers(api: Api) -> None:
    response = await api.client.get("/readyz")
    assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_openapi_document_is_served(api: Api) -> None:
    document = await (await api.client.get("/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/v1/proxies",
        "/v1/proxies/{namespace}/{name}/revocations",
        "/v1/leases",
        "/v1/leases/{leaseId}",
        "/v1/leases/{leaseId}/report",
        "/v1/leases/{leaseId}/renew",
    }


async def test_list_filters_by_attributes_and_health(api: Api) -> None:
    everything = await get_json(api, "/v1/proxies")
    assert everything["count"] == 6
    assert [p["name"] for p in everything["proxies"]] == [
        "eu-1",
        "eu-2",
        "ext",
        "new",
        "us-1",
        "v6",
    ]
    gold = await get_json(api, "/v1/proxies?attr.region=eu&attr.tier=gold")
    assert [p["name"] for p in gold["proxies"]] == ["eu-1", "eu-2", "new"]
    healthy = await get_json(api, "/v1/proxies?attr.region=eu&healthy=true")
    assert [p["name"] for p in healthy["proxies"]] == ["eu-1", "eu-2"]
    unhealthy = await get_json(api, "/v1/proxies?healthy=false")
    assert [p["name"] for p in unhealthy["proxies"]] == ["new", "us-1"]
    assert await get_json(api, "/v1/proxies?attr.region=mars") == {"proxies": [], "count": 0}


async def test_list_shows_active_leases_but_no_credentials(api: Api) -> None:
    await api.lease(selector={"region": "eu"})
    listed = {p["name"]: p for p in (await get_json(api, "/v1/proxies"))["proxies"]}
    assert listed["eu-2"] == {
        "namespace": "crawl",
        "name": "eu-2",
        "scheme": "http",
        "host": "127.0.0.1",
        "port": 3128,
        "url": "http://127.0.0.1:3128",
        "attributes": EU,
        "healthy": True,
        "deleting": False,
        "draining": False,
        "latencyMillis": 5,
        "maxLeases": 2,
        "maxTargets": None,
        "activeLeases": 1,
        "managed": True,
    }
    assert listed["v6"]["url"] == "http://[::1]:3128"


async def test_lease_carries_everything_a_client_needs(api: Api) -> None:
    lease = await api.lease(selector={"region": "eu"}, ttlSeconds=300, target="example.com")
    assert lease["proxy"] == {
        "namespace": "crawl",
        "name": "eu-2",
        "scheme": "http",
        "host": "127.0.0.1",
        "port": 3128,
        "url": "http://127.0.0.1:3128",
        "credentials": {"username": "user-eu-2", "password": "p@ss:w/rd"},
        "urlWithCredentials": "http://user-eu-2:p%40ss%3Aw%2Frd@127.0.0.1:3128",
        "attributes": EU,
        "latencyMillis": 5,
    }
    assert (lease["target"], lease["ttlSeconds"]) == ("example.com", 300)
    expires_at = datetime.fromtimestamp(START + 300, UTC)
    assert lease["expiresAt"] == expires_at.isoformat().replace("+00:00", "Z")


async def test_unauthenticated_proxies_lease_without_credentials(api: Api) -> None:
    api.catalog.replace(record("ext", credentials=None, managed=False))
    lease = await api.lease()
    assert lease["proxy"]["credentials"] is None
    assert lease["proxy"]["urlWithCredentials"] == lease["proxy"]["url"]


async def test_no_match_is_a_409_with_counts(api: Api) -> None:
    await api.lease(selector={"region": "us"})
    body = await api.lease(status=409, selector={"region": "us"})
    assert body == {
        "error": "no_match",
        "detail": "no proxy matching the selector is free for this target",
        "considered": 2,
        "atCapacity": 1,
        "inCooldown": 0,
        "unhealthy": 1,
        "targetPaused": False,
        "targetFull": False,
        "retryAfterSeconds": 60,
    }


async def test_release_and_report(api: Api) -> None:
    lease = await api.lease()
    assert await api.report(lease["leaseId"], "ok", "example.com") == 200
    assert await api.release(lease["leaseId"]) == 204
    assert await api.release(lease["leaseId"]) == 204
    assert await api.release("A" * 22) == 204
    assert await api.report("A" * 22, "ok") == 404


def lease_path(suffix: str = "") -> str:
    return "/v1/leases/" + "A" * 22 + suffix


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "error"),
    [
        ("POST", "/v1/leases", {"data": b"{", "ct": "application/json"}, 400, "invalid_json"),
        ("POST", "/v1/leases", {"data": b"", "ct": "application/json"}, 400, "invalid_json"),
        ("POST", "/v1/leases", {"json": []}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": "60"}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 60.5}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 0}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": True}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 3601}}, 400, "ttl_too_long"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 10**400}}, 400, "ttl_too_long"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 6, "ttl": 1}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttl_seconds": 6}}, 400, "invalid_request"),
        ("POST", "/v1/leases", {"json": {"ttlSeconds": 6, "target": ""}}, 400, "invalid_request"),
        (
            "POST",
            "/v1/leases",
            {"json": {"ttlSeconds": 6, "selector": {"a": 1}}},
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/leases",
            {"data": b'{"ttlSeconds": 6}', "ct": "text/plain"},
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/leases",
            {"data": b'{"ttlSeconds": 6}', "ct": None},
            415,
            "unsupported_media_type",
        ),
        ("POST", "/v1/leases?ttlSeconds=6", {"json": {"ttlSeconds": 6}}, 400, "unknown_parameter"),
        (
            "POST",
            "/v1/leases",
            {"data": b" " * (MAX_BODY_BYTES + 1), "ct": "application/json"},
            413,
            "body_too_large",
        ),
        ("POST", lease_path("/report"), {"json": {"result": "great"}}, 400, "invalid_result"),
        ("POST", lease_path("/report"), {"json": {}}, 400, "invalid_result"),
        ("POST", lease_path("/report"), {"json": {"result": "ok", "x": 1}}, 400, "invalid_request"),
        ("POST", "/v1/leases/short/report", {"json": {"result": "ok"}}, 400, "invalid_lease_id"),
        ("DELETE", "/v1/leases/short", {}, 400, "invalid_lease_id"),
        ("DELETE", lease_path("?force=1"), {}, 400, "unknown_parameter"),
        ("GET", "/v1/proxies?region=eu", {}, 400, "unknown_parameter"),
        ("GET", "/v1/proxies?healthy=yes", {}, 400, "invalid_parameter"),
        ("GET", "/v1/proxies?attr.=eu", {}, 400, "invalid_parameter"),
        ("GET", "/v1/proxies?attr.a=1&attr.a=2", {}, 400, "invalid_parameter"),
        ("GET", "/v1/proxies?attr.a=" + "x" * 254, {}, 400, "invalid_parameter"),
        ("GET", "/v1/nothing", {}, 404, "not_found"),
        ("PUT", "/v1/leases", {}, 405, "method_not_allowed"),
        ("GET", lease_path(), {}, 405, "method_not_allowed"),
    ],
)
async def test_malformed_requests_get_a_json_4xx_and_change_nothing(
    api: Api, method: str, path: str, kwargs: dict[str, Any], status: int, error: str
) -> None:
    headers = api.tokens.headers()
    if "ct" in kwargs:
        content_type = kwargs.pop("ct")
        headers["Content-Type"] = content_type or ""
        if content_type is None:
            del headers["Content-Type"]
    response = await api.client.request(method, path, headers=headers, **kwargs)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert body["error"] == error
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in body["detail"]
    assert api.store.last_counts().leases == 0
    assert api.store.last_counts().cooldowns == 0


async def test_405_says_what_is_allowed(api: Api) -> None:
    response = await api.client.put("/v1/leases", headers=api.tokens.headers())
    assert "POST" in response.headers["Allow"]


async def test_lease_outcomes_are_counted(api: Api) -> None:
    await api.lease()
    await api.lease(status=409, selector={"region": "mars"})
    await api.lease(status=400, ttlSeconds=99_999)
    total = "egress_proxies_lease_requests_total"
    for outcome in ("granted", "no_match", "rejected"):
        assert api.registry.get_sample_value(total, {"outcome": outcome}) == 1
    assert api.registry.get_sample_value("egress_proxies_leases_active") == 1


async def test_a_changed_catalog_is_seen_at_once(api: Api) -> None:
    eu = [record("eu-9", attributes={"region": "eu"})]
    api.catalog.replace(*eu)
    listed = await get_json(api, "/v1/proxies")
    assert [p["name"] for p in listed["proxies"]] == ["eu-9"]


async def test_a_forgotten_proxy_loses_its_leases(api: Api) -> None:
    lease = await api.lease(selector={"region": "eu"})
    gone: ProxyRecord = record("eu-2")
    await api.store.forget_proxy(gone.key)
    assert await api.report(lease["leaseId"], "banned") == 404
    listed = {p["name"]: p for p in (await get_json(api, "/v1/proxies"))["proxies"]}
    assert listed["eu-2"]["activeLeases"] == 0
