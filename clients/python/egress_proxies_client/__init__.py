"""A light client for the egress-proxies discovery API (httpx only; Scrapy as an extra).

from egress_proxies_client import Pool
with Pool(api_url, token).lease(selector={"region": "eu"}, target="example.com") as lease:
    lease.wait_turn()  # at the lease's pace; then use lease.proxy_url
    lease.observe(response.status_code, response.headers)  # ok counted, refusals reported
"""

from egress_proxies_client.backoff import Backoff
from egress_proxies_client.errors import (
    ApiError,
    ApiUnavailableError,
    AuthenticationError,
    EgressProxiesError,
    LeaseEndedError,
    NoMatchCounts,
    NoProxyAvailableError,
    ProxyBannedError,
    ProxyRateLimitedError,
    ProxyRefusedError,
    TargetPausedError,
)
from egress_proxies_client.pacing import Pace, TokenBucket
from egress_proxies_client.policy import BanPolicy, Classification, Verdict, parse_retry_after
from egress_proxies_client.pool import AsyncLease, AsyncPool, Lease, Pool
from egress_proxies_client.wire import Grant, ProxyInfo

__all__ = [
    "ApiError",
    "ApiUnavailableError",
    "AsyncLease",
    "AsyncPool",
    "AuthenticationError",
    "Backoff",
    "BanPolicy",
    "Classification",
    "EgressProxiesError",
    "Grant",
    "Lease",
    "LeaseEndedError",
    "NoMatchCounts",
    "NoProxyAvailableError",
    "Pace",
    "Pool",
    "ProxyBannedError",
    "ProxyInfo",
    "ProxyRateLimitedError",
    "ProxyRefusedError",
    "TargetPausedError",
    "TokenBucket",
    "Verdict",
    "parse_retry_after",
]
