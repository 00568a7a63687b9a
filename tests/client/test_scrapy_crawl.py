"""Acceptance: real Scrapy crawls through managed squid pods and the real API. A site
that allows R pages/s per source address gets the fleet's pace, spread over several
proxies at once; three sites crawled at once by their own host names each get every
proxy; one that rate-limits a crawler starting too fast into a ban gets it reported,
and the banned proxy is never used again."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from egress_proxies_client import AsyncPool, ProxyInfo

from egress_proxies.kube import KubeClient
from harness.cluster import ClusterHandle, wait_for
from harness.crawl_site import PAGES, Site, serve_site
from harness.crawl_site import run_spider as crawl_sites
from harness.deploy import kubectl
from harness.operator import OperatorProcess, managed_proxy, proxy_path, wait_for_condition
from harness.origins import Origin, origin_host, serve_origin

pytestmark = pytest.mark.e2e

PROXIES = ("crawl-a", "crawl-b", "crawl-c")
PACED_PROXIES = ("pace-a", "pace-b", "pace-c", "pace-d")
CONCURRENCY = 8
# The site of the issue that asked for the pace: 5 pages/s per address, a ban after
# 20 429s within 10 s.
SITE_RATE, SITE_BAN_AFTER, SITE_BAN_WINDOW = 5, 20, 10.0

Crawl = tuple[str, list[dict[str, Any]], dict[str, Any], list[ProxyInfo]]


async def crawl(
    kube: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
    names: tuple[str, ...],
    site: Site,
    health_origin: Origin,
    **env: str,
) -> Crawl:
    """Create healthy managed proxies `names`, crawl `site` through them with Scrapy."""
    await healthy_proxies(kube, namespace, names, health_origin)
    log, items, stats = await run_spider(operator, tmp_path, site, **env)
    async with AsyncPool(operator.discovery_url, operator.discovery_token) as pool:
        proxies = await pool.proxies({"pool": "crawl"})
    return log, items, stats, proxies


async def healthy_proxies(
    kube: KubeClient, namespace: str, names: tuple[str, ...], health_origin: Origin
) -> None:
    """Create managed proxies `names` in the crawl pool, and wait until they are healthy."""
    health = {
        "url": health_origin.url,
        "expectedStatus": 200,
        "intervalSeconds": 5,
        "timeoutSeconds": 2,
    }
    for name in names:
        body = managed_proxy(name, attributes={"pool": "crawl"}, healthCheck=health)
        await kube.create(proxy_path(namespace), body)
    for name in names:
        await wait_for_condition(kube, namespace, name, "Healthy", "True", timeout=120)


async def run_spider(
    operator: OperatorProcess, tmp_path: Path, site: Site, **env: str
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """One `scrapy runspider` of the crawl spider over the crawl pool: its log, items, stats."""
    api = (operator.discovery_url, operator.discovery_token)
    selector = json.dumps({"pool": "crawl"})
    return await crawl_sites(api, tmp_path, [site.url], EGRESS_PROXIES_SELECTOR=selector, **env)


@asynccontextmanager
async def paced_site() -> AsyncIterator[tuple[Origin, Site]]:
    """The proxies' health origin, and the site of the issue that asked for the pace."""
    async with (
        serve_origin() as health_origin,
        serve_site(rate=SITE_RATE, ban_after=SITE_BAN_AFTER, ban_window=SITE_BAN_WINDOW) as site,
    ):
        yield health_origin, site


def assert_every_page_once_and_nothing_refused(items: list[dict[str, Any]]) -> None:
    bad = [item for item in items if "bad" in item]
    assert bad == [], f"refused responses reached the callback: {bad[:5]}"
    pages = Counter(item["page"] for item in items)
    assert sorted(pages) == list(range(PAGES)), f"missing {set(range(PAGES)) - set(pages)}"
    assert set(pages.values()) == {1}, "a page was scraped twice"


async def test_a_paced_crawl_spreads_one_domain_over_the_fleet(
    kube: KubeClient, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    async with paced_site() as (health_origin, site):
        _, items, stats, proxies = await crawl(
            kube,
            namespace,
            operator,
            tmp_path,
            PACED_PROXIES,
            site,
            health_origin,
            CRAWL_CONCURRENCY="16",
        )
    assert_every_page_once_and_nothing_refused(items)
    assert len(site.answers) == len(PACED_PROXIES), sorted(site.answers)
    together = site.most_addresses_within_a_second()
    assert together >= 2, "one proxy at a time carried the domain"
    share = site.share_of(429)
    assert share < 0.10, f"{share:.1%} of the answers were 429"
    assert stats["finish_reason"] == "finished"
    assert [p.active_leases for p in proxies] == [0] * len(PACED_PROXIES)
    times = sorted(at for replies in site.answers.values() for at, _ in replies)
    rate = PAGES / (times[-1] - times[0])
    print(
        f"paced crawl: {PAGES} pages in {times[-1] - times[0]:.1f} s = {rate:.1f} pages/s, "
        f"efficiency {rate / (SITE_RATE * len(PACED_PROXIES)):.2f} of R x N, "
        f"429 share {share:.1%}, banned {site.victim}, {together} addresses within one second, "
        f"{stats['egress_proxies/leases']} leases; "
        f"{ {a: Counter(s for _, s in r) for a, r in site.answers.items()} }"
    )


async def test_two_crawlers_of_one_site_share_the_fleet(
    kube: KubeClient, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    # Each may lease the whole fleet (4 leases per domain). The second starts once the
    # first sends through three proxies or more: the first then holds more than its
    # share, gives leases back as the second waits, and both finish.
    async with paced_site() as (health_origin, site):
        await healthy_proxies(kube, namespace, PACED_PROXIES, health_origin)
        first = asyncio.create_task(
            run_spider(operator, tmp_path / "first", site, CRAWL_CONCURRENCY="16")
        )

        async def spread_over_three() -> bool:
            if first.done():
                first.result()  # a crawl that failed says why
                raise AssertionError("the first crawl ended before it used three proxies")
            return len(site.answers) >= 3

        await wait_for(spread_over_three, timeout=120)
        second = await run_spider(operator, tmp_path / "second", site, CRAWL_CONCURRENCY="16")
        crawls = [await first, second]
    for _, items, stats in crawls:
        assert_every_page_once_and_nothing_refused(items)
        assert stats["finish_reason"] == "finished"
        assert len({item["proxy"] for item in items}) >= 2, "one proxy carried a crawler"
    yielded = [stats.get("egress_proxies/leases_yielded", 0) for _, _, stats in crawls]
    assert sum(yielded) >= 1, "no crawler gave a lease back to the other"
    share = site.share_of(429)
    assert share < 0.10, f"{share:.1%} of the answers were 429"
    print(
        f"two crawlers: leases {[stats['egress_proxies/leases'] for _, _, stats in crawls]}, "
        f"given back {yielded}, 429 share {share:.1%}, "
        f"proxies per crawler {[len({i['proxy'] for i in items}) for _, items, _ in crawls]}"
    )


# The three sites, each by its own host name: pages/s allowed per source address.
BROAD_RATES = {"site-slow": 2, "site-middle": 5, "site-fast": 10}


async def site_name(kube: KubeClient, namespace: str, name: str, site: Site) -> str:
    """A cluster DNS name for the site, and its URL by that name: a headless Service whose
    one endpoint is the site's address, so squid pods resolve the name and connect to
    the site from their own addresses."""
    host = site.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
    await kube.create(
        f"/api/v1/namespaces/{namespace}/services",
        {"metadata": {"name": name}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}},
    )
    await kube.create(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
        {
            "metadata": {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host]}],
            "ports": [{"port": 80, "protocol": "TCP"}],
        },
    )
    return site.url.replace(host, f"{name}.{namespace}.svc.cluster.local", 1)


async def test_one_scrapy_process_crawls_three_sites_through_every_proxy(
    kube: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
    dev_cluster: ClusterHandle,
) -> None:
    # Default settings: maxLeases 1 (per target), no bound on leases per domain,
    # CONCURRENT_REQUESTS 32 and 8 per domain, as the issue tried them.
    async with AsyncExitStack() as stack:
        health_origin = await stack.enter_async_context(serve_origin())
        sites = {
            name: await stack.enter_async_context(
                serve_site(rate=rate, ban_after=SITE_BAN_AFTER, ban_window=SITE_BAN_WINDOW)
            )
            for name, rate in BROAD_RATES.items()
        }
        # Named before any squid runs, so none caches a name the cluster DNS lacked.
        urls = {name: await site_name(kube, namespace, name, site) for name, site in sites.items()}
        await healthy_proxies(kube, namespace, PACED_PROXIES, health_origin)
        await resolvable_in_every_squid(dev_cluster, namespace, list(urls.values()))
        api = (operator.discovery_url, operator.discovery_token)
        _, items, stats = await crawl_sites(
            api,
            tmp_path,
            list(urls.values()),
            EGRESS_PROXIES_SELECTOR=json.dumps({"pool": "crawl"}),
            CRAWL_CONCURRENCY="32",
            CRAWL_CONCURRENCY_PER_DOMAIN="8",
        )
    assert [item for item in items if "bad" in item] == [], "a refusal reached a callback"
    assert stats["finish_reason"] == "finished"
    for name, site in sites.items():
        pages = Counter(item["page"] for item in items if item["host"].startswith(f"{name}."))
        assert sorted(pages) == list(range(PAGES)), f"{name}: pages missing"
        assert set(pages.values()) == {1}, f"{name}: a page was scraped twice"
        together = site.most_addresses_within_a_second()
        share = site.share_of(429)
        print(
            f"{name}: {len(site.answers)} addresses, {together} within one second, "
            f"429 share {share:.1%}, banned {site.victim}"
        )
        assert together >= 3, f"{name} was seen from {together} addresses within a second"
        assert share < 0.10, f"{name}: {share:.1%} of the answers were 429"


async def resolvable_in_every_squid(
    cluster: ClusterHandle, namespace: str, urls: list[str]
) -> None:
    """Until every squid pod of the namespace resolves every URL's host (the cluster DNS
    learns of a Service from its watch, within moments)."""
    names = [url.split("//", 1)[1].split(":", 1)[0] for url in urls]
    address = origin_host()
    pods = kubectl(cluster.kubeconfig, "get", "pods", "-n", namespace, "-o", "name").split()
    assert pods, "no squid pod runs"

    async def resolved() -> bool:
        for pod in pods:
            for name in names:
                answer = await asyncio.to_thread(
                    kubectl,
                    cluster.kubeconfig,
                    *("exec", "-n", namespace, pod, "--", "getent", "hosts", name),
                    check=False,
                )
                if answer.split()[:1] != [address]:
                    return False
        return True

    await wait_for(resolved, timeout=60, interval=1.0)


# Starting above the site's rate, the first proxies collect 429s until one is banned.
@pytest.mark.operator_env(EGRESS_PROXIES_LEASE_PACE_START="12")
async def test_scrapy_crawls_every_page_once_around_rate_limits_and_a_ban(
    kube: KubeClient, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    # The pace keeps a crawl under a limit once it has found it, so the site is
    # strict: 4 pages/s per address, and an address is banned at its first 429
    # (the slow start's overshoot finds it).
    async with serve_origin() as health_origin, serve_site(rate=4, ban_after=1) as site:
        log, items, stats, proxies = await crawl(
            kube, namespace, operator, tmp_path, PROXIES, site, health_origin
        )

    assert_every_page_once_and_nothing_refused(items)
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
