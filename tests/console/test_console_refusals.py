"""Bad input to the console: refused with a JSON error, nothing changed, no secret logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from egress_proxies.console.app import SECURITY_HEADERS
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.vocabulary import DRAINING_ANNOTATION
from harness.console import ConsoleSite, pool_body, proxy_body
from tests.console.conftest import Tokens

pytestmark = pytest.mark.integration

API = "/console/api/v1"
CORDON = f"{API}/proxies/crawl/a/cordon"
SCALE = f"{API}/pools/crawl/eu/scale"
CLEAR = f"{API}/proxies/crawl/a/clear-cooldown"


@pytest.fixture
def http(site: ConsoleSite) -> Iterator[httpx.Client]:
    site.put(proxy_body("a"))
    site.put_pool(pool_body("eu"))
    with httpx.Client(base_url=site.console) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(response: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert body["error"] == error and body["detail"]
    return body


def unchanged(site: ConsoleSite) -> bool:
    cordoned = site.call(lambda: site.fleet.proxy("crawl", "a"))
    assert cordoned is not None
    return (
        site.objects.patches == []
        and site.events.events == []
        and ("cordoned" not in cordoned["spec"])
    )


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-console-token-at-all"},
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer ünïcode-tøken-ünïcode".encode()},
    ],
)
def test_a_wrong_or_missing_token_is_refused(
    http: httpx.Client, site: ConsoleSite, headers: dict[str, Any]
) -> None:
    refused(http.get(f"{API}/fleet", headers=headers), 401, "unauthorized")
    answer = http.post(CORDON, json={"cordoned": True}, headers=headers)
    refused(answer, 401, "unauthorized")
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert unchanged(site)


def test_a_crawler_token_opens_nothing(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    for path in ("session", "fleet", "sites", "cooldowns", "pools", "leases"):
        refused(http.get(f"{API}/{path}", headers=bearer(tokens.crawler)), 401, "unauthorized")
    refused(
        http.post(CORDON, json={"cordoned": True}, headers=bearer(tokens.crawler)),
        401,
        "unauthorized",
    )
    assert unchanged(site)


def test_forged_actions_from_a_viewer_are_refused(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    viewer = bearer(tokens.viewer)
    assert http.get(f"{API}/session", headers=viewer).json()["mayAct"] is False
    refused(http.post(CORDON, json={"cordoned": True}, headers=viewer), 403, "forbidden")
    refused(http.post(SCALE, json={"replicas": 9}, headers=viewer), 403, "forbidden")
    refused(http.post(f"{API}/proxies/crawl/a/drain", json={}, headers=viewer), 403, "forbidden")
    refused(http.post(CLEAR, json={"target": "a.example"}, headers=viewer), 403, "forbidden")
    assert unchanged(site)


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        (f"{API}/proxies/crawl/nobody/cordon", {"cordoned": True}, "unknown_proxy"),
        (f"{API}/proxies/elsewhere/a/cordon", {"cordoned": True}, "unknown_proxy"),
        (f"{API}/pools/crawl/nopool/scale", {"replicas": 1}, "unknown_pool"),
        (f"{API}/proxies/crawl/nobody/drain", {}, "unknown_proxy"),
        (f"{API}/proxies/crawl/nobody/clear-cooldown", {"target": None}, "unknown_proxy"),
    ],
)
def test_unknown_proxies_and_pools_are_404(
    http: httpx.Client,
    site: ConsoleSite,
    tokens: Tokens,
    path: str,
    body: dict[str, Any],
    error: str,
) -> None:
    refused(http.post(path, json=body, headers=bearer(tokens.actor)), 404, error)
    assert unchanged(site)


@pytest.mark.parametrize(
    ("content", "headers", "status", "error"),
    [
        (b"{not json", {"Content-Type": "application/json"}, 400, "invalid_json"),
        (b'{"cordoned": true}', {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        (b'{"cordoned": "yes"}', {"Content-Type": "application/json"}, 400, "invalid_request"),
        (b'{"cordoned": 1}', {"Content-Type": "application/json"}, 400, "invalid_request"),
        (
            b'{"cordoned": true, "spec": {"maxLeases": 9}}',
            {"Content-Type": "application/json"},
            400,
            "invalid_request",
        ),
        (b"[]", {"Content-Type": "application/json"}, 400, "invalid_request"),
        (b'{"cordoned": true, "x": "' + b"y" * 8000 + b'"}', {}, 413, "body_too_large"),
    ],
)
def test_malformed_action_bodies_are_400(
    http: httpx.Client,
    site: ConsoleSite,
    tokens: Tokens,
    content: bytes,
    headers: dict[str, str],
    status: int,
    error: str,
) -> None:
    answer = http.post(
        CORDON,
        content=content,
        headers=bearer(tokens.actor) | {"Content-Type": "application/json"} | headers,
    )
    refused(answer, status, error)
    assert unchanged(site)


@pytest.mark.parametrize(
    "body", [{}, {"target": 3}, {"target": "x" * 2049}, {"target": None, "all": True}, []]
)
def test_a_malformed_clear_cooldown_is_400(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens, body: object
) -> None:
    refused(http.post(CLEAR, json=body, headers=bearer(tokens.actor)), 400, "invalid_request")
    assert unchanged(site)


def test_clearing_a_pair_that_does_not_cool_writes_nothing(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    answer = http.post(CLEAR, json={"target": "a.example"}, headers=bearer(tokens.actor))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "namespace": "crawl",
        "name": "a",
        "target": "a.example",
        "cleared": False,
    }
    assert unchanged(site)


@pytest.mark.parametrize("replicas", [-1, 1001, 2.5, "3", None])
def test_a_scale_outside_the_pool_bounds_is_400(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens, replicas: object
) -> None:
    refused(
        http.post(SCALE, json={"replicas": replicas}, headers=bearer(tokens.actor)),
        400,
        "invalid_request",
    )
    assert unchanged(site)


@pytest.mark.parametrize(
    "path",
    [
        f"{API}/proxies/Crawl/a/cordon",
        f"{API}/proxies/crawl/a_b/cordon",
        f"{API}/proxies/crawl/{'a' * 300}/cordon",
    ],
)
def test_names_that_are_not_kubernetes_names_are_400(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens, path: str
) -> None:
    refused(
        http.post(path, json={"cordoned": True}, headers=bearer(tokens.actor)),
        400,
        "invalid_name",
    )
    assert unchanged(site)


@pytest.mark.parametrize(
    "query",
    ["?all=true", "?" + "x" * 20_000, "?%zz=%%", "?a=1&a=2", "?" + "&".join(["k=v"] * 2000)],
)
def test_huge_or_malformed_query_strings_are_400(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens, query: str
) -> None:
    for method, path in (("GET", f"{API}/fleet"), ("POST", CORDON)):
        answer = http.request(
            method, path + query, json={"cordoned": True}, headers=bearer(tokens.actor)
        )
        refused(answer, 400, "unknown_parameter")
    assert unchanged(site)


def test_unknown_routes_and_sites_are_404(http: httpx.Client, tokens: Tokens) -> None:
    refused(http.get(f"{API}/nothing", headers=bearer(tokens.actor)), 404, "not_found")
    refused(http.get("/console/static/../app.py"), 404, "not_found")
    refused(http.get("/elsewhere"), 404, "not_found")
    refused(
        http.get(f"{API}/sites/unseen.example", headers=bearer(tokens.actor)), 404, "unknown_target"
    )
    refused(
        http.get(f"{API}/sites/{'x' * 3000}", headers=bearer(tokens.actor)), 400, "invalid_target"
    )


def test_every_answer_carries_the_security_headers(http: httpx.Client, tokens: Tokens) -> None:
    answers = [
        http.get("/console/"),
        http.get("/console/static/console.js"),
        http.get(f"{API}/fleet", headers=bearer(tokens.viewer)),
        http.get(f"{API}/fleet"),
        http.get("/nowhere"),
    ]
    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers[name] == value, (answer.url, name)
    assert "script-src 'self';" in SECURITY_HEADERS["Content-Security-Policy"]
    assert "unsafe" not in SECURITY_HEADERS["Content-Security-Policy"]


def test_an_actor_scales_a_pool_and_the_event_names_them(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    answer = http.post(SCALE, json={"replicas": 3}, headers=bearer(tokens.actor))
    assert answer.status_code == 200, answer.text
    assert site.objects.patches == [(PROXY_POOLS.path("crawl", "eu"), {"spec": {"replicas": 3}})]
    [(regarding, kind, reason, message)] = site.events.events
    assert (regarding.kind, regarding.name, kind, reason) == (
        "ProxyPool",
        "eu",
        "Normal",
        "ScaledFromConsole",
    )
    assert message == "replicas 2 -> 3, set from the console by alice"
    [pool] = http.get(f"{API}/pools", headers=bearer(tokens.viewer)).json()["pools"]
    assert pool["replicas"] == 3
    assert pool["events"][0]["reason"] == "ScaledFromConsole"


def test_no_token_is_ever_logged(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for token in (tokens.actor, tokens.viewer, tokens.crawler, "Bearer-ish-wrong-token-xyz"):
        http.get(f"{API}/fleet", headers=bearer(token))
        http.post(CORDON, json={"cordoned": True}, headers=bearer(token))
        http.post(CORDON, json={"cordoned": False}, headers=bearer(token))
        http.get(f"{API}/fleet?token={token}", headers=bearer(token))
    assert [reason for _, _, reason, _ in site.events.events] == ["Cordoned", "Uncordoned"]
    # What the servers logged (the test's own HTTP client logs its URLs; it is not the product).
    served = "\n".join(
        record.getMessage()
        for record in caplog.records
        if record.name.startswith(("egress_proxies", "aiohttp"))
    )
    assert "cordoned by console user alice" in served
    assert "console GET /console/api/v1/fleet 400" in served
    for token in (tokens.actor, tokens.viewer, tokens.crawler, "Bearer-ish-wrong-token-xyz"):
        assert token not in served


def test_a_proxy_in_no_pool_is_not_drained(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    answer = http.post(f"{API}/proxies/crawl/a/drain", json={}, headers=bearer(tokens.actor))
    refused(answer, 400, "not_in_pool")
    refused(
        http.post(f"{API}/proxies/crawl/a/drain", json={"now": True}, headers=bearer(tokens.actor)),
        400,
        "invalid_request",
    )
    assert unchanged(site)


def test_an_actor_drains_a_pool_member_once_and_the_lease_api_stops_offering_it(
    http: httpx.Client, site: ConsoleSite, tokens: Tokens
) -> None:
    site.put(proxy_body("member", pool="eu"))
    drain = f"{API}/proxies/crawl/member/drain"
    first = http.post(drain, json={}, headers=bearer(tokens.actor))
    assert (first.status_code, first.json()["drained"]) == (200, True)
    [(path, patch)] = site.objects.patches
    assert path == PROXIES.path("crawl", "member")
    assert list(patch["metadata"]["annotations"]) == [DRAINING_ANNOTATION]
    [(regarding, _, reason, message)] = site.events.events
    assert (regarding.name, reason) == ("member", "DrainedFromConsole")
    assert "by alice" in message

    again = http.post(drain, json={}, headers=bearer(tokens.actor))
    assert (again.status_code, again.json()["drained"]) == (200, False)
    assert len(site.objects.patches) == 1 and len(site.events.events) == 1
    listed = httpx.get(
        f"{site.discovery}/v1/proxies",
        params={"healthy": "true"},
        headers=bearer(tokens.crawler),
    ).json()
    assert [proxy["name"] for proxy in listed["proxies"]] == ["a"]
