"""A fleet for the console to show: proxies in two pools, sites, crawlers leasing and reporting.

    with served_console(users, crawlers) as site:
        stock(site, proxies=24)
        with crawling(site, crawler_token, sites=4):   # leases and reports in a thread
            ...

Everything goes through the real discovery API over HTTP, as crawlers would
send it: the pace, cooldowns, bans and leases the console shows are the
store's answers, not numbers made up for a picture.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from harness.console import ConsoleSite, pool_body, proxy_body

SITES = ("shop.example", "news.example", "maps.example", "api.example", "docs.example")


def stock(site: ConsoleSite, proxies: int, *, pools: tuple[str, ...] = ("eu", "us")) -> None:
    """`proxies` Proxies spread over `pools`: one still provisioning, one unhealthy."""
    for pool in pools:
        site.put_pool(pool_body(pool, replicas=proxies // len(pools)))
    for index in range(proxies):
        pool = pools[index % len(pools)]
        name = f"{pool}-{index:04d}"
        address = (f"10.244.{index // 250}.{index % 250 + 2}", 3128)
        attributes = {"region": pool, "tier": "premium" if index % 3 == 0 else "standard"}
        if index == 1:
            body = proxy_body(
                name,
                pool=pool,
                phase="Provisioning",
                healthy=None,
                address=None,
                latency_millis=None,
            )
        elif index == 2:
            body = proxy_body(name, pool=pool, phase="Unhealthy", healthy=False, address=address)
        else:
            body = proxy_body(
                name,
                pool=pool,
                address=address,
                attributes=attributes,
                latency_millis=8 + (index * 7) % 40,
                max_leases=2,
            )
        site.put(body)


def crawl_round(client: httpx.Client, sites: tuple[str, ...], round_: int) -> None:
    """One round of crawling: a lease per site, ok reports, now and then a rate limit or ban."""
    for index, target in enumerate(sites):
        granted = client.post("/v1/leases", json={"ttlSeconds": 10, "target": target})
        if granted.status_code != 201:
            continue
        lease = granted.json()["leaseId"]
        report = f"/v1/leases/{lease}/report"
        client.post(report, json={"result": "ok", "count": 10 + index})
        if target == sites[0] and round_ % 7 == 3:
            client.post(report, json={"result": "rate_limited", "retryAfterSeconds": 4})
        if len(sites) > 1 and target == sites[1] and round_ % 11 == 5:
            client.post(report, json={"result": "banned"})
        if (round_ + index) % 10:
            client.delete(f"/v1/leases/{lease}")


def probe_round(site: ConsoleSite, round_: int) -> None:
    """New probe latencies, as the health engine would write them, so sparklines move."""
    for body in site.call(site.fleet.proxies):
        status = dict(body["status"])
        if status.get("latencyMillis") is None:
            continue
        name = body["metadata"]["name"]
        base = 8 + sum(map(ord, name)) % 40
        status["latencyMillis"] = base + (round_ // 5 + len(name) * base) % 9
        site.put({**body, "status": status})


@contextmanager
def crawling(
    site: ConsoleSite, token: str, sites: tuple[str, ...] = SITES, pause: float = 0.2
) -> Iterator[threading.Event]:
    """Crawl rounds in a thread until the block ends; yields an Event set after each round."""
    stop, rounded = threading.Event(), threading.Event()

    def crawl() -> None:
        with httpx.Client(
            base_url=site.discovery, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            round_ = 0
            while not stop.is_set():
                crawl_round(client, sites, round_)
                if round_ % 5 == 0:
                    probe_round(site, round_)
                round_ += 1
                rounded.set()
                stop.wait(pause)

    thread = threading.Thread(target=crawl, name="demo crawler", daemon=True)
    thread.start()
    try:
        yield rounded
    finally:
        stop.set()
        thread.join(timeout=30)
