"""A broad crawl: one real Scrapy process crawling three sites with distinct host names at
once through four proxies, on the middleware's defaults and Scrapy's.

A real squid (four ports, each leaving from its own loopback address, so a site
sees four clients) resolves the three names to three local sites, each allowing
its own pages/s per source address (429 with Retry-After above it, a ban after 20
429s within 10 s); the real API runs on the system clock. Every site is carried by
every proxy at once: capacity is per {proxy, target}, and the middleware spreads a
domain over as many leases as the fleet grants.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from harness.crawl_site import PAGES, Site, run_spider, serve_site
from harness.local_fleet import serve_fleet
from harness.squid import SquidProcess

pytestmark = pytest.mark.client

PROXIES = 4
# Pages/s each site allows one source address (the three sites).
RATES = {"slow.test": 2, "middle.test": 5, "fast.test": 10}
BAN_AFTER, BAN_WINDOW = 20, 10.0
STATS_SHOWN = ("egress", "retry", "ignored")  # the stats a missing page's message shows


async def test_one_scrapy_process_spreads_three_sites_over_every_proxy(tmp_path: Path) -> None:
    hosts = dict.fromkeys(RATES, "127.0.0.1")
    with SquidProcess(ports=PROXIES, own_sources=True, hosts=hosts) as squid:
        async with serve_fleet(squid) as (url, token, store), AsyncExitStack() as stack:
            sites: dict[str, Site] = {}
            for name, rate in RATES.items():
                # On loopback, where squid's names point, whether or not the
                # session's dev cluster moved the origins to its host address.
                sites[name] = await stack.enter_async_context(
                    serve_site(
                        rate=rate, ban_after=BAN_AFTER, ban_window=BAN_WINDOW, host="127.0.0.1"
                    )
                )
            start_urls = [site.url.replace("127.0.0.1", name, 1) for name, site in sites.items()]
            _, items, stats = await run_spider(
                (url, token),
                tmp_path,
                start_urls,
                CRAWL_CONCURRENCY="32",
                CRAWL_CONCURRENCY_PER_DOMAIN="8",
            )
            assert store.last_counts().leases == 0, "released on spider_closed"
    assert [item for item in items if "bad" in item] == [], "a refusal reached a callback"
    assert stats["finish_reason"] == "finished"
    for name, site in sites.items():
        pages = Counter(item["page"] for item in items if item["host"].startswith(name))
        counted = {k: v for k, v in stats.items() if any(w in k for w in STATS_SHOWN)}
        assert sorted(pages) == list(range(PAGES)), f"{name}: pages missing; stats {counted}"
        assert set(pages.values()) == {1}, f"{name}: a page was scraped twice"
        together = site.most_addresses_within_a_second()
        assert together >= 3, f"{name} was seen from {together} addresses within a second"
        share = site.share_of(429)
        assert share < 0.10, f"{name}: {share:.1%} of the answers were 429"
        assert site.victim is None, f"{name} banned {site.victim}"
        print(
            f"{name}: {len(site.answers)} addresses, {together} within one second, "
            f"429 share {share:.1%}"
        )
    expected = {squid.source_address(index) for index in range(PROXIES)}
    assert all(set(site.answers) == expected for site in sites.values())
