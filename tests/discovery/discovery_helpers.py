"""Shared pieces for lease and discovery tests: records, a virtual clock, a served app."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.clock import ManualClock
from egress_proxies.discovery import create_app
from egress_proxies.leases import LeaseLimits, MemoryLeaseStore
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials
from egress_proxies.telemetry.lease_metrics import LeaseMetrics
from tests.fakes import ListCatalog, serve_in_thread

START = 1_750_000_000.0


def virtual_clock() -> ManualClock:
    """A clock that moves only when a test says so, its wall time at START."""
    return ManualClock(wall=datetime.fromtimestamp(START, UTC))


def record(name: str, namespace: str = "crawl", **overrides: Any) -> ProxyRecord:
    """A healthy, managed, exclusive proxy on 127.0.0.1; override any field."""
    base = ProxyRecord(
        key=proxy_key(namespace, name),
        uid=f"uid-{name}",
        namespace=namespace,
        name=name,
        scheme="http",
        host="127.0.0.1",
        port=3128,
        health_check=HealthCheck(),
        attributes={},
        credentials=ProxyCredentials(username=f"user-{name}", password="p@ss:w/rd"),
        healthy=True,
        latency_millis=10,
    )
    return replace(base, **overrides)


@dataclass
class Tokens:
    """A token set the test can rotate between requests."""

    current: frozenset[str] = field(default_factory=lambda: frozenset({new_token()}))

    def __call__(self) -> frozenset[str]:
        return self.current

    @property
    def one(self) -> str:
        """Some valid token."""
        return next(iter(self.current))

    def headers(self, token: str | None = None) -> dict[str, str]:
        """An Authorization header for `token` (default: a valid one)."""
        return {"Authorization": f"Bearer {token or self.one}"}


def new_token() -> str:
    """A token long enough to be accepted from a Secret."""
    return secrets.token_urlsafe(24)


@dataclass
class Api:
    """A served discovery app and everything behind it."""

    client: TestClient[Any, Any]
    catalog: ListCatalog
    store: MemoryLeaseStore
    clock: ManualClock
    tokens: Tokens
    registry: CollectorRegistry

    async def lease(self, status: int = 201, **body: Any) -> dict[str, Any]:
        """POST /v1/leases with a valid token; assert the status, return the JSON body."""
        body.setdefault("ttlSeconds", 60)
        response = await self.client.post("/v1/leases", json=body, headers=self.tokens.headers())
        assert response.status == status, await response.text()
        payload: dict[str, Any] = await response.json()
        return payload

    async def report(self, lease_id: str, result: str, target: str | None = None) -> int:
        """POST a report; return the status."""
        body = {"result": result} | ({"target": target} if target else {})
        response = await self.client.post(
            f"/v1/leases/{lease_id}/report", json=body, headers=self.tokens.headers()
        )
        return response.status

    async def release(self, lease_id: str) -> int:
        """DELETE a lease; return the status."""
        response = await self.client.delete(f"/v1/leases/{lease_id}", headers=self.tokens.headers())
        return response.status


@asynccontextmanager
async def serve_api(
    *records: ProxyRecord,
    tokens: Tokens | None = None,
    allow_no_auth: bool = False,
    **store_settings: Any,
) -> AsyncIterator[Api]:
    """The discovery app on a loopback port over a list catalog and a virtual-clock store."""
    clock = virtual_clock()
    store = MemoryLeaseStore(LeaseLimits(**store_settings), clock=clock)
    catalog = ListCatalog(*records)
    tokens = tokens if tokens is not None else Tokens()
    registry = CollectorRegistry()
    app = create_app(
        catalog,
        store,
        tokens,
        metrics=LeaseMetrics(registry, store),
        allow_no_auth=allow_no_auth,
    )
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield Api(client, catalog, store, clock, tokens, registry)


@contextmanager
def serve_api_in_thread(*records: ProxyRecord, tokens: Tokens) -> Iterator[str]:
    """The app on its own event loop in a thread, for synchronous clients; yields the base URL."""
    with serve_in_thread(create_app(ListCatalog(*records), MemoryLeaseStore(), tokens)) as url:
        yield url
