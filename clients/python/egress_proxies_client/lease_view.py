"""What the two faces of the client share: the lease's view and state, and the rules around it.

`_async/pool.py` is the one source of `AsyncPool`/`AsyncLease`; `_sync/pool.py`
(`Pool`/`Lease`) is generated from it (`scripts/generate_sync.py`). Everything here
is neither async nor sync.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from egress_proxies_client.errors import (
    NoMatchCounts,
    NoProxyAvailableError,
    ProxyBannedError,
    ProxyRateLimitedError,
    TargetPausedError,
)
from egress_proxies_client.pacing import OkBatch, Pace, RecentAccepts, TokenBucket
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.wire import Grant

logger = logging.getLogger("egress_proxies_client")

DEFAULT_TTL = 300
DEFAULT_WAIT = 30.0
DEFAULT_TIMEOUT = 10.0
DEFAULT_REPORT_INTERVAL = 1.0
DEFAULT_REPORT_BATCH = 100
# A pool's leases for a target unused this long are given back (Pool.turn).
DEFAULT_IDLE = 30.0
# After a 409 without Retry-After, a target is leased no more for this long (Pool.turn).
GROW_PAUSE = 5.0

# How each face sleeps by default (the generator maps the async names to these).
Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]
SLEEP: Sleep = time.sleep
ASYNC_SLEEP: AsyncSleep = asyncio.sleep
# How each face serialises the decisions about one target's leases.
Lock = threading.Lock
AsyncLock = asyncio.Lock


class LeaseView:
    """What both lease faces show: the proxy to use, never the credentials in a repr;
    and what both keep: the token bucket of the lease's pace, the batch of ok counts,
    when the site accepted the latest requests."""

    def __init__(
        self, grant: Grant, policy: BanPolicy, clock: Callable[[], float], batch: OkBatch
    ) -> None:
        self._grant = grant
        self._policy = policy
        self._clock = clock
        self._bucket = TokenBucket(grant.pace, clock())
        self._batch = batch
        self._recent = RecentAccepts()
        self.ended = False

    @property
    def lease_id(self) -> str:
        """The id the API issued (a capability: whoever holds it may release the lease)."""
        return self._grant.lease_id

    @property
    def proxy_url(self) -> str:
        """The proxy URL with its credentials embedded, ready for an HTTP client."""
        return self._grant.proxy_url_with_credentials

    @property
    def proxy_url_without_credentials(self) -> str:
        """scheme://host:port."""
        return self._grant.proxy_url

    @property
    def proxy_key(self) -> str:
        """The proxy's namespace/name."""
        return self._grant.proxy_key

    @property
    def grant(self) -> Grant:
        """Everything the API returned for this lease."""
        return self._grant

    @property
    def pace(self) -> Pace | None:
        """The pace last handed out (grant, renewal or report); None from an unpacing server."""
        return self._grant.pace

    def _regranted(self, grant: Grant) -> None:
        self._grant = grant
        self._bucket.set_pace(grant.pace, self._clock())

    def _repaced(self, pace: Pace | None) -> None:
        if pace is not None:
            self._grant = replace(self._grant, pace=pace)
            self._bucket.set_pace(pace, self._clock())

    def waiting_held(self) -> int | None:
        """The leases held for the target by a crawler refused one lately (None: nobody
        waits), as the last pace said."""
        pace = self._grant.pace
        return None if pace is None else pace.waiting_held

    def next_turn(self) -> float:
        """Seconds until this lease's next turn, without taking it (0: now)."""
        return self._bucket.next_turn(self._clock())

    def check(self, status: int, headers: Mapping[str, str], body: str | bytes = b"") -> None:
        """Raise ProxyBannedError or ProxyRateLimitedError when the policy says the site refused."""
        raise_refusal(self._policy.classify_response(status, headers, body))

    def __repr__(self) -> str:
        state = "ended" if self.ended else f"until {self._grant.expires_at:%H:%M:%S}"
        return (
            f"<{type(self).__name__} {self._grant.lease_id[:6]}… on {self._grant.proxy_key} "
            f"({self._grant.proxy_url}) for {self._grant.target or 'any target'}, {state}>"
        )


def raise_refusal(classification: Classification | None) -> None:
    """Turn a classification into the exception a lease reports on exit."""
    if classification is None:
        return
    if classification.verdict is Verdict.BANNED:
        raise ProxyBannedError(classification.reason)
    if classification.verdict is Verdict.RATE_LIMITED:
        raise ProxyRateLimitedError(classification.reason, classification.retry_after)


def give_up(counts: NoMatchCounts, attempts: int, waited: float) -> NoProxyAvailableError:
    """The error `acquire` raises when `wait` is spent: a paused target is said so."""
    kind = TargetPausedError if counts.target_paused else NoProxyAvailableError
    return kind(counts, attempts, waited)


def query_of(selector: Mapping[str, str] | None, healthy: bool | None) -> dict[str, str]:
    """GET /v1/proxies' query: attributes as `attr.NAME`, and health."""
    query = {f"attr.{key}": value for key, value in (selector or {}).items()}
    if healthy is not None:
        query["healthy"] = "true" if healthy else "false"
    return query
