"""Acceptance: a real Scrapy crawl through three managed proxies of a site that
rate-limits and then bans one of them by its source address."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path

from egress_proxies_client import AsyncPool

from egress_proxies.kube import KubeClient
from harness.origins import serve_origin
from tests.e2e.conftest import OperatorProcess, managed_proxy, proxy_path, wait_for_condition
from tests.e2e.crawl_site import PAGES, serve_site

SPIDER = Path(__file__).with_name("crawl_spider.py")
PROXIES = ("crawl-a", "crawl-b", "crawl-c")
CONCURRENCY = 8


async def test_scrapy_crawls_every_page_once_around_rate_limits_and_a_ban(
    kube: KubeClient, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    async with serve_origin() as health_origin, serve_site() as site:
        health = {
            "url": health_origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 5,
            "timeoutSeconds": 2,
        }
        for name in PROXIES:
            body = managed_proxy(name, attributes={"pool": "crawl"}, healthCheck=health)
            await kube.create(proxy_path(namespace), body)
        for name in PROXIES:
            await wait_for_condition(kube, namespace, name, "Healthy", "True", timeout=120)

        env = os.environ | {
            "EGRESS_PROXIES_API_URL": operator.discovery_url,
            "EGRESS_PROXIES_TOKEN": operator.discovery_token,
            "EGRESS_PROXIES_SELECTOR": json.dumps({"pool": "crawl"}),
            "CRAWL_OUT": str(tmp_path),
        }
        crawl = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "scrapy", "runspider", str(SPIDER)),
            *("-a", f"start_url={site.url}"),
            env=env,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(crawl.communicate(), timeout=300)
        log = output.decode()
        (tmp_path / "scrapy.log").write_text(log)
        assert crawl.returncode == 0, log[-4000:]

        items = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
        stats = json.loads((tmp_path / "stats.json").read_text())
        async with AsyncPool(operator.discovery_url, operator.discovery_token) as pool:
            proxies = await pool.proxies({"pool": "crawl"})

    bad = [item for item in items if "bad" in item]
    assert bad == [], f"refused responses reached the callback: {bad[:5]}"
    pages = Counter(item["page"] for item in items)
    assert sorted(pages) == list(range(PAGES)), f"missing {set(range(PAGES)) - set(pages)}"
    assert set(pages.values()) == {1}, "a page was scraped twice"

    # The site saw three distinct source addresses (one per proxy pod) and banned one.
    assert site.victim is not None, "no proxy was rate-limited into a ban"
    assert len(site.answers) == 3, sorted(site.answers)
    victim_statuses = site.statuses_from(site.victim)
    assert 429 in victim_statuses and 403 in victim_statuses
    first_ban = victim_statuses.index(403)
    after_ban = victim_statuses[first_ban:]
    assert len(after_ban) <= CONCURRENCY, (
        f"the banned proxy was used again after its ban: {len(after_ban)} requests"
    )
    banned_proxy = next(p for p in proxies if p.url.split("//")[1].startswith(site.victim + ":"))
    assert f"reported banned (http_403) on {banned_proxy.key}" in log

    # Scrapy's stats show the refusals; every lease was released at close.
    assert stats["egress_proxies/bans/http_403"] >= 1
    assert stats["egress_proxies/bans/http_429"] >= 1
    assert stats["egress_proxies/retries"] >= stats["egress_proxies/bans/http_403"]
    assert stats.get("egress_proxies/gave_up", 0) == 0
    assert stats["egress_proxies/leases"] >= 3
    assert stats["item_scraped_count"] == PAGES
    assert [p.active_leases for p in proxies] == [0, 0, 0]
    print(
        f"crawl: {PAGES} pages, {stats['egress_proxies/leases']} leases, "
        f"{stats['egress_proxies/retries']} retries, "
        f"bans { ({k: v for k, v in stats.items() if '/bans/' in k}) }, "
        f"victim {site.victim} got {Counter(victim_statuses)}; "
        f"{ {a: len(s) for a, s in site.answers.items()} } requests per address"
    )
