"""The real discovery app for client tests: in this loop (async) or in a thread (sync),
over a virtual clock the client's sleeps advance, so waits cost no wall time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyRecord
from egress_proxies.clock import ManualClock
from egress_proxies.discovery import create_app
from egress_proxies.leases import LeaseLimits, MemoryLeaseStore
from egress_proxies.telemetry.lease_metrics import LeaseMetrics
from tests.discovery.discovery_helpers import Tokens, virtual_clock
from tests.fakes import ListCatalog
from tests.fakes import serve_in_thread as app_in_thread


@dataclass
class Served:
    """A running app: where it listens and what is behind it."""

    url: str
    store: MemoryLeaseStore
    clock: ManualClock
    tokens: Tokens
    registry: CollectorRegistry
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        """The client's sleep: virtual time passes, and the wait is recorded."""
        self.sleeps.append(seconds)
        self.clock.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        """The async client's sleep."""
        self.sleep(seconds)

    def lease_requests(self, outcome: str) -> int:
        """POST /v1/leases the server answered with `outcome` (granted, no_match, rejected)."""
        value = self.registry.get_sample_value(
            "egress_proxies_lease_requests_total", {"outcome": outcome}
        )
        return int(value or 0)

    def reports(self, result: str, reason: str) -> int:
        """Reports the server counted with this result and reason."""
        value = self.registry.get_sample_value(
            "egress_proxies_lease_reports_total", {"result": result, "reason": reason}
        )
        return int(value or 0)


def _app(records: tuple[ProxyRecord, ...], **store_settings: Any) -> tuple[web.Application, Served]:
    clock = virtual_clock()
    store = MemoryLeaseStore(LeaseLimits(**store_settings), clock=clock)
    tokens, registry = Tokens(), CollectorRegistry()
    app = create_app(ListCatalog(*records), store, tokens, metrics=LeaseMetrics(registry, store))
    return app, Served("", store, clock, tokens, registry)


@contextmanager
def serve_in_thread(*records: ProxyRecord, **store_settings: Any) -> Iterator[Served]:
    """The app on its own loop in a thread, for the synchronous Pool."""
    app, served = _app(records, **store_settings)
    with app_in_thread(app) as served.url:
        yield served


@asynccontextmanager
async def serve_async(*records: ProxyRecord, **store_settings: Any) -> AsyncIterator[Served]:
    """The app on the test's own loop, for the AsyncPool."""
    app, served = _app(records, **store_settings)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    served.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield served
    finally:
        await runner.cleanup()
