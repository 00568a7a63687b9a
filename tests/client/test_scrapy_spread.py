"""The Scrapy middleware spreads a domain over several paced leases, keeps sticky
sessions, never lets a 429 reach a callback, and never drops a request silently.

A real Scrapy process, a real squid (four ports, four proxies) and the real API.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from egress_proxies.leases import PaceLimits
from harness.squid import SquidProcess
from tests.client.served import Served, serve_async
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

SPIDER = Path(__file__).with_name("paced_spider.py")
PAGES = 40
LIMITED_PAGE = 6  # its first answer is a 429 with Retry-After: 1


@asynccontextmanager
async def site() -> AsyncIterator[tuple[str, list[str]]]:
    """Pages that answer 200, except LIMITED_PAGE's first answer, a 429."""
    answered: list[str] = []

    async def page(request: web.Request) -> web.Response:
        number = request.match_info["n"]
        answered.append(number)
        if number == str(LIMITED_PAGE) and answered.count(number) == 1:
            return web.Response(status=429, headers={"Retry-After": "1"}, text="slow down")
        return web.Response(text=f"page {number}")

    app = web.Application()
    app.router.add_get("/page/{n}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", answered
    finally:
        await runner.cleanup()


async def crawl(served: Served, base_url: str, out: Path, **env: str) -> str:
    """Run the paced spider to its end; its log."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
        *("-a", f"base_url={base_url}", "-a", f"pages={PAGES}"),
        env=os.environ
        | {
            "EGRESS_PROXIES_API_URL": served.url,
            "EGRESS_PROXIES_TOKEN": served.tokens.one,
            "CRAWL_OUT": str(out),
        }
        | env,
        cwd=out,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    log = output.decode()
    (out / "scrapy.log").write_text(log)
    assert process.returncode == 0, log[-3000:]
    return log


def results(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    items_file = out / "items.jsonl"
    lines = items_file.read_text().splitlines() if items_file.exists() else []
    return [json.loads(line) for line in lines], json.loads((out / "stats.json").read_text())


async def test_a_domain_is_spread_over_paced_leases_and_sessions_stick(tmp_path: Path) -> None:
    with SquidProcess(ports=4) as squid:
        proxies = [
            record(f"p{i}", port=port, credentials=None) for i, port in enumerate(squid.ports)
        ]
        pace = PaceLimits(start=5.0, ceiling=5.0)
        async with serve_async(*proxies, pace=pace) as served, site() as (base_url, answered):
            log = await crawl(served, base_url, tmp_path)
            assert served.store.last_counts().leases == 0, "released on spider_closed"
            assert served.reports("rate_limited", "http_429") == 1
            assert served.reports("ok", "") >= 1, "accepted responses are reported in batches"
    items, stats = results(tmp_path)
    urls = sorted(item["url"] for item in items)
    assert urls == sorted(f"{base_url}/page/{n}" for n in range(PAGES)), "every page exactly once"
    assert all(item["status"] == 200 for item in items), "no 429 reached a callback"
    assert len(answered) == PAGES + 1, "the one rate-limited page was fetched again, once"
    assert stats["reason"] == "finished"
    odd = {item["proxy"] for item in items if int(item["url"].rsplit("/", 1)[1]) % 2}
    assert len(odd) == 1, f"the sticky session kept one proxy: {odd}"
    even = sorted((item["at"], item["proxy"]) for item in items if item["proxy"] not in odd)
    together = max(
        len({proxy for at, proxy in even if start <= at < start + 1.0}) for start, _ in even
    )
    print(f"proxies carrying the domain within one second: {together}")
    assert together >= 2, "more than one lease carried the domain at the same time"
    assert "p@ss" not in log


async def test_without_a_proxy_requests_are_requeued_then_the_spider_closes_saying_so(
    tmp_path: Path,
) -> None:
    async with serve_async(record("down", healthy=False)) as served, site() as (base_url, answered):
        log = await crawl(served, base_url, tmp_path, EGRESS_PROXIES_WAIT="0.2")
    items, stats = results(tmp_path)
    assert (items, answered) == ([], [])
    assert stats["reason"] == "egress_proxies_unavailable"
    assert stats["egress_proxies/requeued"] >= 2
    assert stats["egress_proxies/unsent"] == PAGES, "counted, whether refused or still queued"
    assert f"{PAGES} requests were not sent" in log and "the crawl is incomplete" in log
