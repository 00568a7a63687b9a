"""A local fleet for crawls without a cluster: one squid whose ports are the proxies, each
leaving from its own loopback address, and the real discovery API on the system clock.

    with SquidProcess(ports=4, own_sources=True, hosts=...) as squid:
        async with serve_fleet(squid) as (url, token, store):
            ...  # a crawler leases squid's ports through the API at url

The API runs on the caller's event loop with the memory store, so a crawler in
another process (Scrapy) learns paces, holds and probes in real time.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.discovery import create_app
from egress_proxies.leases import LeaseLimits, MemoryLeaseStore
from egress_proxies.model import HealthCheck
from harness.squid import SquidProcess


@dataclass(frozen=True)
class _Fixed:
    """A catalog that never changes."""

    snapshot: tuple[ProxyRecord, ...]

    def records(self) -> Sequence[ProxyRecord]:
        return self.snapshot


def squid_records(squid: SquidProcess, **overrides: Any) -> tuple[ProxyRecord, ...]:
    """One healthy open proxy record per port of `squid` (`p0`, `p1`, ...)."""
    return tuple(
        ProxyRecord(
            key=proxy_key("local", f"p{index}"),
            uid=f"uid-p{index}",
            namespace="local",
            name=f"p{index}",
            scheme="http",
            host=squid.host,
            port=port,
            health_check=HealthCheck(),
            healthy=True,
            latency_millis=1,
            **overrides,
        )
        for index, port in enumerate(squid.ports)
    )


@asynccontextmanager
async def serve_fleet(
    squid: SquidProcess, **store_settings: Any
) -> AsyncIterator[tuple[str, str, MemoryLeaseStore]]:
    """The API over `squid`'s ports on this loop: its URL, a token, its store."""
    store = MemoryLeaseStore(LeaseLimits(**store_settings))
    token = secrets.token_urlsafe(24)
    app = create_app(_Fixed(squid_records(squid)), store, lambda: frozenset({token}))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", token, store
    finally:
        await runner.cleanup()
