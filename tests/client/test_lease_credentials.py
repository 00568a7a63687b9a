"""The client on a proxy that checks lease credentials: a real squid with the lease helper,
the real API on the real clock. A renewal hands the lease new credentials, which the
client uses from then on, while a request still carrying the old ones goes through."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from egress_proxies_client import AsyncPool

from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore
from egress_proxies.stacks.inputs import ProxyCredentials
from harness.origins import serve_origin
from harness.squid import SquidProcess, free_ports
from tests.conftest import wait_for
from tests.discovery.discovery_helpers import Tokens, record
from tests.fakes import ListCatalog

pytestmark = pytest.mark.client

SPIDER = Path(__file__).with_name("hook_spider.py")
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


@asynccontextmanager
async def slow_site(pause: float) -> AsyncIterator[str]:
    """Pages that take `pause` seconds each, so a short lease is renewed mid-crawl."""

    async def page(request: web.Request) -> web.Response:
        await asyncio.sleep(pause)  # the site's slowness, not a wait of the test
        return web.Response(text=f"page {request.match_info['n']}")

    app = web.Application()
    app.router.add_get("/page/{n}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_scrapys_proxy_header_follows_the_lease_through_renewals(tmp_path: Path) -> None:
    [api_port] = free_ports(1)
    revocations = f"http://127.0.0.1:{api_port}/v1/proxies/crawl/door/revocations"
    tokens = Tokens()
    pages = 10
    with SquidProcess(
        credentials=OPERATOR, lease_proxy="crawl/door", revocations_url=revocations
    ) as squid:
        catalog = ListCatalog(record("door", port=squid.ports[0], credentials=OPERATOR))
        async with api_on(api_port, catalog, tokens) as api, slow_site(0.5) as site:
            env = os.environ | {
                "EGRESS_PROXIES_API_URL": api,
                "EGRESS_PROXIES_TOKEN": tokens.one,
                "CRAWL_OUT": str(tmp_path),
            }
            crawl = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
                *("-a", f"base_url={site}", "-a", f"pages={pages}"),
                *("-s", "EGRESS_PROXIES_TTL=3"),
                env=env,
                cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            output, _ = await asyncio.wait_for(crawl.communicate(), timeout=120)
            assert crawl.returncode == 0, output.decode()[-3000:]
        access = squid.access_log.read_text().splitlines()

    items = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert sorted(item["url"] for item in items) == sorted(f"{site}/page/{n}" for n in range(pages))
    assert all(item["status"] == 200 for item in items)
    # One lease, renewed along the way: its handle under more than one expiry, each
    # request with the credentials current when it was sent, none refused.
    users = {line.split()[7] for line in access if "/page/" in line}
    handles = {user.split(".")[0] for user in users}
    assert len(handles) == 1 and len(users) > 1, users
    assert not [line for line in access if "/407 " in line or " 407 " in line]
