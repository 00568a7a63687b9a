"""A broad crawl at the fleet's capacity: K sites at once, by one Scrapy process and by the SDK.

    python -m bench.broad_crawl [--sites 3 30] [--proxies 4] [--seconds 40] [--fastest 20]
                                [--smoke]

bench.crawl's companion for many sites. The N proxies are one local squid on N
ports, each leaving from its own loopback address (127.0.0.2, .3, ...), so a site
limiting each source address sees N clients, as it sees N squid pods; squid
resolves the K sites' names (site-1.test, ...) to K local sites. Site i allows R_i
pages/s per source address (R from 1 to 20, or `--fastest`, across the sites; 429
with `Retry-After: 1` above it, a ban after 20 429s within 10 s) and has R_i x N x
`--seconds` pages (at least 30), so at the sites' pace every site takes as long.
The real API (memory store, system clock) grants the leases, anew for each crawl,
so each crawl finds the sites' limits itself. For each K: one Scrapy process on
the middleware's defaults (CONCURRENT_REQUESTS 16 + 4 per site), then an SDK
crawler (`AsyncPool.turn`, a few tasks per site), each on fresh sites. Printed per
crawl: total efficiency = pages/s / sum(R x N), the least site efficiency
(pages/s / (R x N) over the site's own crawl), the share of answers that were 429,
bans; and per site, besides those, pages/s / (R x N) from its first 429 on (how
close the leases held the limit they found). `--sites 1 --proxies 1`: one lease.
`--smoke`: 2 proxies, 3 sites for 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
from egress_proxies_client import AsyncPool, ProxyBannedError

from harness.crawl_site import Site, run_spider, serve_site
from harness.local_fleet import serve_fleet
from harness.squid import SquidProcess

FIGURES = ("total efficiency", "least site efficiency", "429 share", "bans")
BAN_AFTER, BAN_WINDOW = 20, 10.0
SLOWEST, FASTEST = 1, 20
LEAST_PAGES = 30
LINK = re.compile(r'href="/page/(\d+)"')

Crawl = Callable[[tuple[str, str], dict[str, Site], Path], Awaitable[None]]


@dataclass(frozen=True)
class Sites:
    """K site names and the pages/s each allows one source address."""

    rates: dict[str, float]

    @classmethod
    def spread(cls, count: int, fastest: float = FASTEST) -> Sites:
        """`count` sites with rates spread evenly from SLOWEST to `fastest`."""
        if count == 1:
            return cls({"site-1.test": 5.0})
        step = (fastest - SLOWEST) / (count - 1)
        return cls({f"site-{i + 1}.test": float(round(SLOWEST + i * step)) for i in range(count)})


async def scrapy_crawl(api: tuple[str, str], sites: dict[str, Site], out: Path) -> None:
    """One `scrapy runspider` crawling every site at once, on the middleware's defaults."""
    start_urls = [site.url.replace("127.0.0.1", name, 1) for name, site in sites.items()]
    _, _, stats = await run_spider(api, out, start_urls, CRAWL_CONCURRENCY=str(16 + 4 * len(sites)))
    leases = stats.get("egress_proxies/leases", 0)
    print(f"  scrapy: finish reason {stats['finish_reason']}, {leases} leases")


async def sdk_crawl(api: tuple[str, str], sites: dict[str, Site], out: Path) -> None:
    """Tasks per site (a few, more for faster sites), each sending through `AsyncPool.turn`."""
    clients: dict[str, httpx.AsyncClient] = {}
    async with AsyncPool(*api) as pool:
        try:
            await asyncio.gather(
                *(_crawl_one(pool, clients, name, site) for name, site in sites.items())
            )
        finally:
            for client in clients.values():
                await client.aclose()


async def _crawl_one(
    pool: AsyncPool, clients: dict[str, httpx.AsyncClient], name: str, site: Site
) -> None:
    base = site.url.replace("127.0.0.1", name, 1).rsplit("/page/", 1)[0]
    queue: asyncio.Queue[int] = asyncio.Queue()
    queue.put_nowait(0)
    done: set[int] = set()

    async def work() -> None:
        while len(done) < site.pages:
            try:
                page = await asyncio.wait_for(queue.get(), 1.0)
            except TimeoutError:
                continue
            links = await _fetch(pool, clients, name, f"{base}/page/{page}")
            if links is None:
                queue.put_nowait(page)  # refused: again, at the lowered pace or elsewhere
            elif page not in done:
                done.add(page)
                for child in links:
                    queue.put_nowait(child)

    workers = 2 + math.ceil(site.rate * 4 / 10)
    await asyncio.gather(*(work() for _ in range(workers)))


async def _fetch(
    pool: AsyncPool, clients: dict[str, httpx.AsyncClient], target: str, url: str
) -> list[int] | None:
    """The page's links, or None when it was refused or failed."""
    try:
        async with pool.turn(target, ttl=600, wait=120) as lease:
            client = clients.get(lease.proxy_url)
            if client is None:
                client = clients[lease.proxy_url] = httpx.AsyncClient(
                    proxy=lease.proxy_url, trust_env=False
                )
            response = await client.get(url)
            if await lease.observe(response.status_code, response.headers) is not None:
                return None
    except (ProxyBannedError, httpx.HTTPError):
        return None
    return [int(child) for child in LINK.findall(response.text)]


def report(name: str, rates: dict[str, float], sites: dict[str, Site], proxies: int) -> None:
    """The crawl's total line, then one line per site."""
    everything = [
        (at, status) for site in sites.values() for r in site.answers.values() for at, status in r
    ]
    if not everything:
        print(f"{name}: no answers")
        return
    times = [at for at, _ in everything]
    pages = sum(1 for _, status in everything if status == 200)
    allowed = sum(rates.values()) * proxies
    total = pages / max(max(times) - min(times), 1e-9) / allowed
    lines, least = [], math.inf
    for host, site in sites.items():
        answers = sorted(at for r in site.answers.values() for at, status in r if status == 200)
        span = max(answers[-1] - answers[0], 1e-9) if answers else math.inf
        efficiency = len(answers) / span / (rates[host] * proxies)
        least = min(least, efficiency)
        lines.append(
            f"  {host} (R = {rates[host]:g}/s): efficiency {efficiency:.2f} "
            f"({len(answers)} pages in {span:.1f} s), {_after_the_limit(site, proxies)}, "
            f"429 share {site.share_of(429):.1%}, bans {1 if site.victim else 0}"
        )
    answers_429 = sum(1 for _, status in everything if status == 429)
    bans = sum(1 for site in sites.values() if site.victim)
    print(
        f"{name}: total efficiency {total:.2f} ({pages} pages in {max(times) - min(times):.0f} s; "
        f"sum(R x N) = {allowed:g}/s); least site efficiency {least:.2f}; "
        f"429 share {answers_429 / len(everything):.1%} ({len(everything)} answers); bans {bans}"
    )
    print("\n".join(lines))


def _after_the_limit(site: Site, proxies: int) -> str:
    """Pages/s / (R x N) from the site's first 429 (its limit found) to its last page."""
    refused = [at for r in site.answers.values() for at, status in r if status == 429]
    if not refused:
        return "no limit found"
    found = min(refused)
    after = sorted(at for r in site.answers.values() for at, status in r if status == 200)
    after = [at for at in after if at > found]
    if len(after) < 2:
        return "no page after the limit was found"
    held = len(after) / (after[-1] - found) / (site.rate * proxies)
    return f"{held:.2f} of R x N once the limit was found"


async def crawl_sites(
    name: str, crawl: Crawl, rates: dict[str, float], args: argparse.Namespace, out: Path
) -> None:
    """Fresh sites, a fresh API over the squid's ports; crawl them all with `crawl`; report."""
    with SquidProcess(
        ports=args.proxies, own_sources=True, hosts=dict.fromkeys(rates, "127.0.0.1")
    ) as squid:
        async with serve_fleet(squid) as (url, token, _), AsyncExitStack() as stack:
            sites = {
                host: await stack.enter_async_context(
                    serve_site(
                        rate=rate,
                        ban_after=BAN_AFTER,
                        ban_window=BAN_WINDOW,
                        pages=max(LEAST_PAGES, round(rate * args.proxies * args.seconds)),
                    )
                )
                for host, rate in rates.items()
            }
            started = time.monotonic()
            await crawl((url, token), sites, out)
            print(f"  {name}: {time.monotonic() - started:.0f} s")
    report(name, rates, sites, args.proxies)


async def measure(args: argparse.Namespace, root: Path) -> None:
    """For each K: Scrapy, then the SDK."""
    for count in args.sites:
        rates = Sites.spread(count, args.fastest).rates
        await crawl_sites(f"scrapy, {count} sites", scrapy_crawl, rates, args, root / f"s{count}")
        await crawl_sites(f"sdk, {count} sites", sdk_crawl, rates, args, root / f"k{count}")


def main() -> None:
    """Parse, run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 30], help="K sites at once")
    parser.add_argument("--proxies", type=int, default=4, help="N proxies")
    parser.add_argument("--seconds", type=float, default=40.0, help="each site's crawl at pace")
    parser.add_argument("--fastest", type=float, default=FASTEST, help="the fastest site's R")
    parser.add_argument("--smoke", action="store_true", help="a quick run for the test suite")
    args = parser.parse_args()
    if args.smoke:
        args.sites, args.proxies, args.seconds = [3], 2, 3.0
    if args.proxies < 1 or args.seconds <= 0 or min(args.sites) < 1:
        parser.error("need --proxies >= 1, --seconds > 0 and --sites >= 1")
    with tempfile.TemporaryDirectory(prefix="bench-broad-crawl-") as root:
        asyncio.run(measure(args, Path(root)))


if __name__ == "__main__":
    main()
