"""A local site of PAGES (200) pages that rate-limits each client address and then bans one of them.

Pages form a binary tree (page n links to 2n+1 and 2n+2), so every page is reached
from exactly one parent. Above `rate` (RATE) pages per second from one source address
the site answers 429 with `Retry-After: 1`; the first address to collect `ban_after`
(BAN_AFTER) 429s (within `ban_window` seconds, if set) is banned: once its
Retry-After has passed (so requests already in flight during the rate limit still
get 429s), it gets a 403 captcha page, for good.
Every answer is logged per address, so a test can tell which proxy was banned and
whether it came back.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from harness.origins import origin_host

PAGES = 200
# The Scrapy spider that crawls it (`scrapy runspider`), configured by its environment.
SPIDER = Path(__file__).with_name("crawl_spider.py")
RATE = 10
BAN_AFTER = 3
CAPTCHA = '<html><div class="g-recaptcha" data-sitekey="x"></div></html>'


@dataclass
class Site:
    """The running site and what it saw."""

    url: str = ""
    pages: int = PAGES
    rate: float = RATE  # may change while the site runs (a site halving its limit)
    ban_after: int = BAN_AFTER
    ban_window: float | None = None  # count 429s this many seconds back; None: all of them
    victim: str | None = None
    banned_from: float = 0.0
    answers: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    _recent: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))
    _rate_limited: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))

    def answer(self, address: str, now: float) -> int:
        """The status for one request from `address`."""
        if address == self.victim and now >= self.banned_from:
            return 403
        recent = self._recent[address]
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        if len(recent) >= self.rate:
            refusals = self._rate_limited[address]
            refusals.append(now)
            while self.ban_window is not None and refusals[0] <= now - self.ban_window:
                refusals.popleft()
            if self.victim is None and len(refusals) >= self.ban_after:
                self.victim, self.banned_from = address, now + 1.0
            return 429
        recent.append(now)
        return 200

    def statuses_from(self, address: str) -> list[int]:
        """What one address got, in order."""
        return [status for _, status in self.answers[address]]

    def share_of(self, status: int) -> float:
        """The share of all answers that had `status`."""
        answers = [s for replies in self.answers.values() for _, s in replies]
        return answers.count(status) / max(len(answers), 1)

    def most_addresses_within_a_second(self) -> int:
        """The most source addresses the site saw pages go to within one second."""
        served = sorted(
            (at, address)
            for address, replies in self.answers.items()
            for at, status in replies
            if status == 200
        )
        return max(
            (len({a for at, a in served if start <= at < start + 1.0}) for start, _ in served),
            default=0,
        )

    async def handle(self, request: web.Request) -> web.Response:
        """One page, or a refusal."""
        address = request.remote or ""
        now = time.monotonic()
        status = self.answer(address, now)
        self.answers[address].append((now, status))
        if status == 429:
            return web.Response(status=429, text="slow down", headers={"Retry-After": "1"})
        if status == 403:
            return web.Response(status=403, text=CAPTCHA, content_type="text/html")
        page = int(request.match_info["n"])
        if not 0 <= page < self.pages:
            raise web.HTTPNotFound()
        links = "".join(
            f'<a href="/page/{child}">page {child}</a>'
            for child in (2 * page + 1, 2 * page + 2)
            if child < self.pages
        )
        body = f'<html><h1 data-n="{page}">Page {page}</h1>{links}</html>'
        return web.Response(text=body, content_type="text/html")


@asynccontextmanager
async def serve_site(
    rate: float = RATE,
    ban_after: int = BAN_AFTER,
    pages: int = PAGES,
    ban_window: float | None = None,
    host: str | None = None,
) -> AsyncIterator[Site]:
    """Serve the site on `host` (default: where the dev cluster's pods reach this machine)."""
    site = Site(pages=pages, rate=rate, ban_after=ban_after, ban_window=ban_window)
    app = web.Application()
    app.router.add_get("/page/{n}", site.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host = host or origin_host()
    await web.TCPSite(runner, host, 0).start()
    site.url = f"http://{host}:{runner.addresses[0][1]}/page/0"
    try:
        yield site
    finally:
        await runner.cleanup()


async def run_spider(
    api: tuple[str, str], out: Path, start_urls: list[str], **env: str
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """One `scrapy runspider` of SPIDER crawling `start_urls` through the API at `api` (URL,
    token), to its end: its log, items and stats (written under `out`). `env`: the
    spider's CRAWL_* and EGRESS_PROXIES_* settings."""
    out.mkdir(parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
        *("-a", f"start_url={' '.join(start_urls)}"),
        env=os.environ
        | {"EGRESS_PROXIES_API_URL": api[0], "EGRESS_PROXIES_TOKEN": api[1], "CRAWL_OUT": str(out)}
        | env,
        cwd=out,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    log = output.decode()
    (out / "scrapy.log").write_text(log)
    assert process.returncode == 0, log[-4000:]
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    stats = json.loads((out / "stats.json").read_text())
    return log, items, stats
