"""The Scrapy middleware in a real Scrapy process, through a real squid, against the real
API: a dead proxy's connect failures and a spider-defined ban are retried elsewhere."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from egress_proxies.stacks.inputs import ProxyCredentials
from harness.squid import SquidProcess, free_ports
from tests.client.served import serve_async
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

SPIDER = Path(__file__).with_name("hook_spider.py")
CREDENTIALS = ProxyCredentials(username="crawler", password="p@ss:w/rd")
PAGES = 6
# One per lease: a second ban would make 3 of the 4 proxies banned, and the server's
# ban-storm guard would rightly pause the site.
SOFT_BLOCKS = 1


@asynccontextmanager
async def soft_blocking_site() -> AsyncIterator[tuple[str, list[int]]]:
    """Pages whose first SOFT_BLOCKS answers are 200 "soft-block" pages."""
    answered = [0]

    async def page(request: web.Request) -> web.Response:
        answered[0] += 1
        if answered[0] <= SOFT_BLOCKS:
            return web.Response(text="soft-block: please verify you are human")
        return web.Response(text=f"page {request.match_info['n']}")

    app = web.Application()
    app.router.add_get("/page/{n}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", answered
    finally:
        await runner.cleanup()


async def test_connect_failures_and_spider_bans_are_retried_through_other_proxies(
    tmp_path: Path,
) -> None:
    [dead_port] = free_ports(1)
    with SquidProcess(ports=3, credentials=CREDENTIALS) as squid:
        live = [
            record(f"live-{i}", port=port, credentials=CREDENTIALS, latency_millis=20)
            for i, port in enumerate(squid.ports)
        ]
        dead = record("dead", port=dead_port, credentials=CREDENTIALS, latency_millis=1)
        async with serve_async(dead, *live) as served, soft_blocking_site() as (site, answered):
            env = os.environ | {
                "EGRESS_PROXIES_API_URL": served.url,
                "EGRESS_PROXIES_TOKEN": served.tokens.one,
                "CRAWL_OUT": str(tmp_path),
            }
            crawl = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
                *("-a", f"base_url={site}", "-a", f"pages={PAGES}"),
                env=env,
                cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            output, _ = await asyncio.wait_for(crawl.communicate(), timeout=120)
            log = output.decode()
            assert crawl.returncode == 0, log[-3000:]
            (tmp_path / "scrapy.log").write_text(log)
            assert served.store.last_counts().leases == 0, "released on spider_closed"
            assert served.reports("banned", "tunnel_failed") == 1
            assert served.reports("banned", "spider") == SOFT_BLOCKS

    items = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert sorted(item["url"] for item in items) == sorted(f"{site}/page/{n}" for n in range(PAGES))
    assert all(item["status"] == 200 and "soft-block" not in item["body"] for item in items)
    assert {item["proxy"] for item in items} <= {"crawl/live-1", "crawl/live-2"}
    assert answered[0] == PAGES + SOFT_BLOCKS
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["egress_proxies/bans/tunnel_failed"] == 1
    assert stats["egress_proxies/bans/spider"] == SOFT_BLOCKS
    assert stats["egress_proxies/retries"] == 1 + SOFT_BLOCKS
    assert stats["egress_proxies/leases"] == 3
    assert "p@ss" not in log and "p%40ss" not in log
