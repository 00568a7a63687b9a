"""Pool and AsyncPool: lease a proxy, use it, report how it fared, always release it.

    pool = Pool("http://egress-proxies:8090", token)
    with pool.lease(selector={"region": "eu"}, target="example.com", ttl=300, wait=30) as lease:
        for url in urls:
            lease.wait_turn()                  # at the pace the server handed out
            response = httpx.get(url, proxy=lease.proxy_url)
            lease.observe(response.status_code, response.headers, response.content)

A crawler of many sites lets the pool pick the proxy: `turn` runs its block at the
turn of the pool's lease for the target whose turn comes first, and leases more
proxies for the target while every one is busy at its pace (every proxy of the
fleet, unless `leases_per_target` bounds it):

    with Pool(api_url, token) as pool:
        with pool.turn("example.com") as lease:
            response = clients[lease.proxy_url].get(url)  # one HTTP client per proxy
            lease.observe(response.status_code, response.headers, response.content)

`observe` counts accepted responses, reported in batches in the background (every
`report_interval` seconds or `report_batch` responses); a rate limit is reported
at once and pauses the lease for the site's Retry-After; a ban raises
ProxyBannedError. Every renewal and report answer brings the current pace.

One source, two faces: `_async/pool.py` is written once, and `_sync/pool.py`
is generated from it (unasync, as urllib3 and httpcore do), so the faces cannot
drift apart; a test fails when the generated file is stale. What is neither
async nor sync (the lease's view, pacing, wire format, ban policy, backoff)
lives in plain modules both import.
"""

from egress_proxies_client._async.pool import AsyncLease, AsyncPool
from egress_proxies_client._sync.pool import Lease, Pool
from egress_proxies_client.lease_view import (
    DEFAULT_REPORT_BATCH,
    DEFAULT_REPORT_INTERVAL,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    DEFAULT_WAIT,
    raise_refusal,
)

__all__ = [
    "DEFAULT_REPORT_BATCH",
    "DEFAULT_REPORT_INTERVAL",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "DEFAULT_WAIT",
    "AsyncLease",
    "AsyncPool",
    "Lease",
    "Pool",
    "raise_refusal",
]
