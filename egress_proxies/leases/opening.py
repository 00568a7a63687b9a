"""Choosing the lease store from a URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from egress_proxies.clock import Clock
from egress_proxies.leases.limits import LeaseLimits
from egress_proxies.leases.memory_store import MemoryLeaseStore
from egress_proxies.leases.store import LeaseStore
from egress_proxies.leases.urls import redact_url

MEMORY = "memory"
REDIS_SCHEMES = ("redis", "rediss", "unix")
DEFAULT_PREFIX = "egress-proxies"
DEFAULT_TIMEOUT = 1.0


def check_store_url(url: str) -> None:
    """ValueError unless `url` names a store; the error names the scheme, or the URL redacted."""
    if url == MEMORY:
        return
    scheme = urlsplit(url).scheme
    if scheme not in REDIS_SCHEMES:
        named = f"scheme {scheme!r}" if scheme else f"URL {redact_url(url)!r} without a scheme"
        raise ValueError(
            f"lease store {named}: expected 'memory' or a redis://, rediss:// or unix:// URL"
        )


def open_lease_store(
    url: str | None,
    *,
    prefix: str = DEFAULT_PREFIX,
    timeout: float = DEFAULT_TIMEOUT,
    limits: LeaseLimits | None = None,
    clock: Clock | None = None,
) -> LeaseStore:
    """The store `url` names: memory for None or "memory", Redis for redis://, rediss://, unix://.

    ValueError for any other URL, naming its scheme or, without one, the URL redacted.
    Opening connects to nothing: a Redis store connects on first use.
    """
    limits = limits or LeaseLimits()
    if url is None or url == MEMORY:
        return MemoryLeaseStore(limits, clock=clock)
    check_store_url(url)
    if timeout <= 0:
        raise ValueError("the lease store timeout must be positive")
    # Imported here: redis-py costs about 6 MiB an operator on the memory store never uses.
    from egress_proxies.leases.redis_store import RedisLeaseStore  # noqa: PLC0415

    return RedisLeaseStore(url, prefix=prefix, timeout=timeout, limits=limits, clock=clock)
