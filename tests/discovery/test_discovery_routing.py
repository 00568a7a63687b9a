"""How a request reaches its handler: authentication, JSON errors and the given middlewares
around every answer (404 and 405 included), and bodies however they arrive."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler

from egress_proxies.discovery import MAX_BODY_BYTES, create_app
from egress_proxies.leases import MemoryLeaseStore
from tests.discovery.discovery_helpers import Tokens, record, serve_api
from tests.fakes import ListCatalog

pytestmark = pytest.mark.integration


async def chunks(body: bytes, size: int = 7) -> AsyncIterator[bytes]:
    """The body in small pieces: sent chunked, so it is still arriving when the handler runs."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_body_sent_in_chunks_is_read_whole() -> None:
    async with serve_api(record("eu-1")) as api:
        body = json.dumps({"ttlSeconds": 60, "target": "example.com"}).encode()
        headers = api.tokens.headers() | {"Content-Type": "application/json"}
        response = await api.client.post("/v1/leases", data=chunks(body), headers=headers)
        assert response.status == 201, await response.text()
        assert (await response.json())["target"] == "example.com"


async def test_a_body_over_the_limit_is_a_json_413_however_it_is_sent() -> None:
    body = b" " * (MAX_BODY_BYTES + 1)
    async with serve_api(record("eu-1")) as api:
        headers = api.tokens.headers() | {"Content-Type": "application/json"}
        for data in (body, chunks(body, 4096)):
            response = await api.client.post("/v1/leases", data=data, headers=headers)
            assert response.status == 413
            assert (await response.json())["error"] == "body_too_large"
        assert api.store.last_counts().leases == 0


async def test_a_json_content_type_with_parameters_is_json() -> None:
    async with serve_api(record("eu-1")) as api:
        headers = api.tokens.headers() | {"Content-Type": "Application/JSON; charset=utf-8"}
        response = await api.client.post("/v1/leases", data=b'{"ttlSeconds": 5}', headers=headers)
        assert response.status == 201, await response.text()


async def test_405_lists_exactly_the_routes_methods_and_public_paths_need_no_token() -> None:
    async with serve_api(record("eu-1")) as api:
        response = await api.client.post("/healthz")
        assert (response.status, response.headers["Allow"]) == (405, "GET,HEAD")
        assert (await response.json())["error"] == "method_not_allowed"
        response = await api.client.put("/v1/leases")
        assert response.status == 401
        response = await api.client.put("/v1/leases", headers=api.tokens.headers())
        assert (response.status, response.headers["Allow"]) == (405, "POST")


async def test_the_given_middlewares_run_around_every_answer() -> None:
    seen: list[tuple[str, str, int]] = []

    @web.middleware
    async def record_answers(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        seen.append((request.method, request.path, response.status))
        return response

    tokens = Tokens()
    app = create_app(
        ListCatalog(record("eu-1")), MemoryLeaseStore(), tokens, middlewares=[record_answers]
    )
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/healthz", {}),
        ("GET", "/v1/proxies", {}),
        ("GET", "/v1/proxies", tokens.headers()),
        ("GET", "/nowhere", tokens.headers()),
        ("PUT", "/v1/leases", tokens.headers()),
    ]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        for method, path, headers in requests:
            await client.request(method, path, headers=headers)
    assert seen == [
        ("GET", "/healthz", 200),
        ("GET", "/v1/proxies", 401),
        ("GET", "/v1/proxies", 200),
        ("GET", "/nowhere", 404),
        ("PUT", "/v1/leases", 405),
    ]
