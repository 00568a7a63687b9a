"""The client on a proxy that checks lease credentials: a real squid with the lease helper,
the real API on the real clock. A renewal hands the lease new credentials, which the
client uses from then on, while a request still carrying the old ones goes through."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from egress_proxies_client import AsyncPool

from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore
from egress_proxies.stacks.inputs import ProxyCredentials
from harness.origins import serve_origin
from harness.squid import SquidProcess, free_ports
from tests.conftest import wait_for
from tests.fakes import ListCatalog
from tests.integration.discovery_helpers import Tokens, record

OPERATOR = ProxyCredentials("crawler", secrets.token_urlsafe(16), secrets.token_hex(32))


@asynccontextmanager
async def api_on(port: int, catalog: ListCatalog, tokens: Tokens) -> AsyncIterator[str]:
    runner = web.AppRunner(create_app(catalog, MemoryLeaseStore(), tokens))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def fetch_status(proxy_url: str, url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url, proxy=proxy_url) as response:
        return response.status


async def test_a_renewal_hands_out_new_credentials_and_the_old_ones_last_the_lease() -> None:
    [api_port] = free_ports(1)
    revocations = f"http://127.0.0.1:{api_port}/v1/proxies/crawl/door/revocations"
    tokens = Tokens()
    with SquidProcess(
        credentials=OPERATOR, lease_proxy="crawl/door", revocations_url=revocations
    ) as squid:
        catalog = ListCatalog(record("door", port=squid.ports[0], credentials=OPERATOR))
        async with (
            api_on(api_port, catalog, tokens) as api,
            serve_origin() as origin,
            AsyncPool(api, tokens.one) as pool,
        ):
            lease = await pool.acquire(ttl=5)
            first_end = lease.grant.expires_at.timestamp()
            first = lease.proxy_url
            assert OPERATOR.password not in first
            assert await fetch_status(first, origin.url) == 200
            await lease.renew(60)
            renewed = lease.proxy_url
            assert renewed != first
            assert await fetch_status(renewed, origin.url) == 200

            # The first credentials said 5 s; the proxy learns the renewed end and
            # keeps taking them (a request sent before the renewal, an older client).
            async def past_the_first_end() -> bool:
                return time.time() > first_end + 3  # and squid's cache of the first OK

            await wait_for(past_the_first_end, timeout=15, interval=0.2)
            assert await fetch_status(first, origin.url) == 200

            await lease.release()

            async def both_refused() -> bool:
                statuses = {await fetch_status(url, origin.url) for url in (first, renewed)}
                return statuses == {407}

            await wait_for(both_refused, timeout=8, interval=0.2)
