"""A Scrapy downloader middleware that sends each domain's requests through a leased proxy.

    DOWNLOADER_MIDDLEWARES = {
        "egress_proxies_client.scrapy_middleware.EgressProxiesMiddleware": 740,
    }
    EGRESS_PROXIES_API_URL = "http://egress-proxies.egress-proxies.svc:8090"
    EGRESS_PROXIES_TOKEN = "..."            # or EGRESS_PROXIES_TOKEN_FILE
    EGRESS_PROXIES_SELECTOR = {"region": "eu"}

A domain's requests are spread over as many leases as the fleet grants for it
(one per proxy by default), or at most EGRESS_PROXIES_LEASES_PER_DOMAIN when set:
the spread grows while every lease is busy at its pace and the site accepts the
load, and gives a lease back after EGRESS_PROXIES_IDLE seconds unused, or when
another crawler waiting for the domain holds fewer (crawlers sharing a fleet
settle at equal shares); each lease is renewed while in use.
Each request awaits its lease's turn at the pace the server hands out, without
blocking the reactor, and counts meanwhile among its download slot's active
requests: Scrapy's default scheduler queue (DownloaderAwarePriorityQueue) then
hands the next request to the domain with the fewest, so requests waiting for a
slow site's turn never take every one of CONCURRENT_REQUESTS from the others.
Accepted responses are counted and reported in batches. A
rate-limited response is reported at once (the lease slows down and waits out
the site's Retry-After) and the request goes back to the scheduler; a ban (the
ban policy, or the spider's `response_is_ban` / `exception_is_ban`) is
reported, its lease dropped, and the request retried through another proxy, up
to EGRESS_PROXIES_MAX_RETRIES times: a refused response never reaches the
callback. A request that gets no proxy within EGRESS_PROXIES_WAIT is re-queued,
up to EGRESS_PROXIES_MAX_REQUEUES times; then the spider closes with the reason
`egress_proxies_unavailable` and a warning counting the requests not sent.
`request.meta["egress_proxies_session"] = key` keeps a request on its own sticky
lease (paced too). Every lease is released when the spider closes. Needs the
asyncio reactor (Scrapy's default since 2.13).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

from egress_proxies_client.errors import (
    EgressProxiesError,
    LeaseEndedError,
    NoProxyAvailableError,
)
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.pool import AsyncLease, AsyncPool
from egress_proxies_client.spread import DomainSpread

logger = logging.getLogger(__name__)

LEASE_META = "egress_proxies_lease"  # the lease id a request was sent under
PROXY_META = "egress_proxies_proxy"  # namespace/name of the proxy, for spiders and logs
RETRIES_META = "egress_proxies_retries"
SKIP_META = "egress_proxies_skip"  # True: leave this request alone
SESSION_META = "egress_proxies_session"  # a key: the requests sharing it keep one lease
REQUEUES_META = "egress_proxies_requeues"
STATS_PREFIX = "egress_proxies"
UNAVAILABLE_REASON = "egress_proxies_unavailable"
# After a refusal, or a 409 without Retry-After, a domain leases no more for this long.
GROW_PAUSE = 5.0


class _Stats(Protocol):
    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None: ...


@dataclass(frozen=True)
class Settings:
    """The EGRESS_PROXIES_* settings."""

    api_url: str
    token: str
    selector: dict[str, str]
    ttl: int
    wait: float
    max_retries: int
    leases_per_domain: int | None  # None: as many as the fleet grants
    idle: float
    max_requeues: int

    @classmethod
    def of(cls, crawler: Crawler) -> Settings:
        """Read them from the crawler; NotConfigured without an API URL."""
        settings = crawler.settings
        if not settings.getbool("EGRESS_PROXIES_ENABLED", True):
            raise NotConfigured("EGRESS_PROXIES_ENABLED is off")
        api_url = settings.get("EGRESS_PROXIES_API_URL")
        if not api_url:
            raise NotConfigured("set EGRESS_PROXIES_API_URL")
        token_file = settings.get("EGRESS_PROXIES_TOKEN_FILE")
        token = (
            Path(token_file).read_text().strip()
            if token_file
            else settings.get("EGRESS_PROXIES_TOKEN")
        )
        if not token:
            raise NotConfigured("set EGRESS_PROXIES_TOKEN or EGRESS_PROXIES_TOKEN_FILE")
        selector = settings.get("EGRESS_PROXIES_SELECTOR") or {}
        if isinstance(selector, str):
            selector = json.loads(selector)
        return cls(
            api_url=str(api_url),
            token=str(token),
            selector={str(k): str(v) for k, v in dict(selector).items()},
            ttl=settings.getint("EGRESS_PROXIES_TTL", 300),
            wait=settings.getfloat("EGRESS_PROXIES_WAIT", 60.0),
            max_retries=settings.getint("EGRESS_PROXIES_MAX_RETRIES", 5),
            leases_per_domain=_positive_or_none(
                settings.getint("EGRESS_PROXIES_LEASES_PER_DOMAIN", 0)
            ),
            idle=settings.getfloat("EGRESS_PROXIES_IDLE", 30.0),
            max_requeues=settings.getint("EGRESS_PROXIES_MAX_REQUEUES", 3),
        )


class EgressProxiesMiddleware:
    """Leases spread per domain and paced, ban detection, retries through another proxy,
    re-queueing when no proxy is free, release on close."""

    def __init__(self, crawler: Crawler, settings: Settings, policy: BanPolicy) -> None:
        self._crawler = crawler
        self._settings = settings
        self._pool = AsyncPool(settings.api_url, settings.token, policy=policy)
        self._policy = policy
        self._spreads: dict[str, DomainSpread[AsyncLease]] = {}
        self._sessions: dict[tuple[str, str], AsyncLease] = {}
        self._by_id: dict[str, AsyncLease] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._clock = time.monotonic
        self._unsent = 0
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> EgressProxiesMiddleware:
        """Build from EGRESS_PROXIES_* settings; EGRESS_PROXIES_BAN_POLICY may be a BanPolicy."""
        policy = crawler.settings.get("EGRESS_PROXIES_BAN_POLICY") or BanPolicy()
        middleware = cls(crawler, Settings.of(crawler), policy)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def __repr__(self) -> str:
        return (
            f"<EgressProxiesMiddleware {self._settings.api_url} [leases: {len(self._by_id)} | "
            f"domains: {len(self._spreads)} | sessions: {len(self._sessions)}]>"
        )

    async def process_request(self, request: Request) -> Request | None:
        """Send the request through one of its domain's leases, at that lease's pace.

        Without a proxy within EGRESS_PROXIES_WAIT the request is re-queued (returned
        to the scheduler), then, past EGRESS_PROXIES_MAX_REQUEUES, the spider closes.
        """
        if request.meta.get(SKIP_META):
            return None
        domain = _domain(request)
        session = request.meta.get(SESSION_META)
        while True:
            try:
                lease = await self._lease_for(domain, None if session is None else str(session))
            except EgressProxiesError as error:
                return self._unavailable(request, domain, error)
            with self._waiting_in_slot(request):
                await lease.wait_turn()
            if not lease.ended:
                break  # else it was given back to a waiting crawler meanwhile: another one
        proxy_url = lease.proxy_url_without_credentials
        request.meta["proxy"] = proxy_url
        request.meta["_auth_proxy"] = proxy_url  # HttpProxyMiddleware keeps our header
        request.meta[LEASE_META] = lease.lease_id
        request.meta[PROXY_META] = lease.proxy_key
        authorization = _basic_authorization(lease.proxy_url)
        if authorization is not None:
            request.headers[b"Proxy-Authorization"] = authorization
        elif b"Proxy-Authorization" in request.headers:
            del request.headers[b"Proxy-Authorization"]
        return None

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        """A banned or rate-limited response goes back as a retry, never to the callback."""
        if LEASE_META not in request.meta:
            return response
        classification = self._judge_response(request, response)
        if classification is None:
            lease = self._by_id.get(str(request.meta[LEASE_META]))
            if lease is not None:
                lease.accepted()
            return response
        return await self._refused(request, classification)

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        """A tunnel failure (or what the spider calls a ban) is retried through another proxy."""
        if LEASE_META not in request.meta or isinstance(exception, IgnoreRequest):
            return None
        classification = self._judge_exception(request, exception)
        if classification is None:
            return None
        return await self._refused(request, classification)

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        """Release every lease (reporting pending counts), close the API connections, and
        say loudly when requests were not sent."""
        leases = list(self._by_id.values())
        self._by_id.clear()
        self._spreads.clear()
        self._sessions.clear()
        for lease in leases:
            await self._release(lease)
        await self._pool.aclose()
        logger.info("released %d egress-proxies leases", len(leases))
        if self._unsent:
            logger.warning(
                "egress-proxies: %d requests were not sent: no proxy became free within "
                "EGRESS_PROXIES_WAIT after %d re-queues each (spider closed: %s); "
                "the crawl is incomplete",
                self._unsent,
                self._settings.max_requeues,
                reason,
            )
        gave_up = (
            self._crawler.stats.get_value(f"{STATS_PREFIX}/gave_up")
            if self._crawler.stats
            else None
        )
        if gave_up:
            logger.warning(
                "egress-proxies: %d requests were refused through %d proxies each and dropped",
                gave_up,
                self._settings.max_retries + 1,
            )

    async def _lease_for(self, domain: str, session: str | None) -> AsyncLease:
        """The lease a request for `domain` goes through (a session's own, if it names one)."""
        if session is not None:
            return await self._session_lease(domain, session)
        async with self._lock(domain):
            now = self._clock()
            await self._give_back_idle(now)
            spread = self._spreads.get(domain)
            if spread is None:
                spread = self._spreads[domain] = DomainSpread(
                    most=self._settings.leases_per_domain, idle=self._settings.idle
                )
            yielded = spread.yielded(now)
            if yielded is not None:
                self._by_id.pop(yielded.lease_id, None)
                logger.info("gave %r back: another crawler waits for %s", yielded, domain)
                self._stats.inc_value(f"{STATS_PREFIX}/leases_yielded")
                await self._release(yielded)
            while True:
                best = spread.best()
                if spread.should_grow(best, now):
                    grown = await self._grow(spread, domain, now, must=best is None)
                    if grown is not None and (
                        best is None or grown.next_turn() <= best.next_turn()
                    ):
                        best = grown
                assert best is not None, "_grow raises when the domain has no lease"
                if await self._renewed(best):
                    spread.used(best, now)
                    return best
                spread.remove(best.lease_id)
                self._by_id.pop(best.lease_id, None)

    async def _grow(
        self, spread: DomainSpread[AsyncLease], domain: str, now: float, *, must: bool
    ) -> AsyncLease | None:
        """One more lease for the domain; waits EGRESS_PROXIES_WAIT only when it has none."""
        try:
            lease = await self._pool.acquire(
                self._settings.selector,
                domain,
                self._settings.ttl,
                self._settings.wait if must else 0.0,
                held=len(spread.leases),
            )
        except NoProxyAvailableError as error:
            if must:
                raise
            spread.hold_back(now + (error.counts.retry_after or GROW_PAUSE))
            return None
        self._stats.inc_value(f"{STATS_PREFIX}/leases")
        spread.add(lease, now)
        self._by_id[lease.lease_id] = lease
        logger.info("leased %r (%d for %s)", lease, len(spread.leases), domain)
        return lease

    async def _session_lease(self, domain: str, session: str) -> AsyncLease:
        async with self._lock(f"{domain}\n{session}"):
            lease = self._sessions.get((domain, session))
            if lease is not None and not lease.ended and await self._renewed(lease):
                return lease
            lease = await self._pool.acquire(
                self._settings.selector, domain, self._settings.ttl, self._settings.wait
            )
            self._stats.inc_value(f"{STATS_PREFIX}/leases")
            self._sessions[(domain, session)] = lease
            self._by_id[lease.lease_id] = lease
            logger.info("leased %r for session %s", lease, session)
            return lease

    async def _give_back_idle(self, now: float) -> None:
        for spread in self._spreads.values():
            for lease in spread.idle_leases(now):
                self._by_id.pop(lease.lease_id, None)
                await self._release(lease)

    @contextmanager
    def _waiting_in_slot(self, request: Request) -> Iterator[None]:
        """Count the request among its download slot's active ones while it waits for a
        turn, as the downloader does once it is sent (the slot exists from the domain's
        first request on): the scheduler's downloader-aware queue balances on that count."""
        downloader: Any = getattr(self._crawler.engine, "downloader", None)
        slots = getattr(downloader, "slots", None)
        slot_key = getattr(downloader, "get_slot_key", None)  # absent from older Scrapy
        slot = None if slots is None or slot_key is None else slots.get(slot_key(request))
        if slot is None:
            yield
            return
        slot.active.add(request)
        try:
            yield
        finally:
            slot.active.discard(request)

    def _unavailable(self, request: Request, domain: str, error: EgressProxiesError) -> Request:
        """Re-queue a request that got no proxy; past the re-queue limit, close the spider."""
        self._stats.inc_value(f"{STATS_PREFIX}/no_proxy")
        requeues = int(request.meta.get(REQUEUES_META, 0)) + 1
        if self._closing is not None:
            # In flight when the spider began to close: a re-queued copy would never be sent.
            self._unsent += 1
            self._stats.inc_value(f"{STATS_PREFIX}/unsent")
            raise IgnoreRequest(f"no egress proxy for {domain}: {error}")
        if requeues <= self._settings.max_requeues:
            self._stats.inc_value(f"{STATS_PREFIX}/requeued")
            logger.info("no egress proxy for %s (%s): re-queued %s", domain, error, request.url)
            retry = request.replace(dont_filter=True)
            retry.meta[REQUEUES_META] = requeues
            return retry
        self._unsent += 1
        self._stats.inc_value(f"{STATS_PREFIX}/unsent")
        if self._closing is None:
            logger.warning(
                "no egress proxy for %s after %d re-queues (%s): closing the spider",
                domain,
                self._settings.max_requeues,
                error,
            )
            # Whatever is still queued will never be sent either: count it now.
            engine: Any = self._crawler.engine
            queued = len(engine.scheduler or ()) if hasattr(engine, "scheduler") else 0
            self._unsent += queued
            self._stats.inc_value(f"{STATS_PREFIX}/unsent", queued)
            self._closing = asyncio.get_running_loop().create_task(
                engine.close_spider_async(reason=UNAVAILABLE_REASON)
            )
        raise IgnoreRequest(f"no egress proxy for {domain}: {error}")

    async def _renewed(self, lease: AsyncLease) -> bool:
        """Renew a lease past half its TTL; False when it already ended."""
        remaining = (lease.grant.expires_at - datetime.now(UTC)).total_seconds()
        if remaining > self._settings.ttl / 2:
            return True
        try:
            await lease.renew(self._settings.ttl)
        except LeaseEndedError:
            return False
        return True

    def _judge_response(self, request: Request, response: Response) -> Classification | None:
        hook = getattr(self._crawler.spider, "response_is_ban", None)
        if hook is not None:
            decided = hook(request, response)
            if decided is not None:
                return Classification(Verdict.BANNED, "spider") if decided else None
        headers = {}
        retry_after = response.headers.get(b"Retry-After")
        if retry_after is not None:
            headers["Retry-After"] = retry_after.decode("latin-1")
        return self._policy.classify_response(response.status, headers, response.body)

    def _judge_exception(self, request: Request, error: Exception) -> Classification | None:
        hook = getattr(self._crawler.spider, "exception_is_ban", None)
        if hook is not None:
            decided = hook(request, error)
            if decided is not None:
                return Classification(Verdict.BANNED, "spider") if decided else None
        return self._policy.classify_exception(error)

    async def _refused(self, request: Request, refusal: Classification) -> Request:
        domain = _domain(request)
        self._stats.inc_value(f"{STATS_PREFIX}/bans/{refusal.reason}")
        lease = self._by_id.get(str(request.meta.get(LEASE_META)))
        if lease is not None and refusal.verdict is Verdict.RATE_LIMITED:
            # Slower, not elsewhere: the lease waits out Retry-After at its lowered pace.
            spread = self._spreads.get(domain)
            if spread is not None:
                spread.hold_back(self._clock() + max(refusal.retry_after or 0.0, GROW_PAUSE))
            try:
                await lease.rate_limited(refusal.reason, refusal.retry_after)
            except EgressProxiesError as error:
                logger.warning(
                    "could not report %s on %s: %s", refusal.reason, lease.proxy_key, error
                )
        elif lease is not None:
            # Concurrent requests on the same lease see the same refusal: report it once.
            self._drop(lease)
            await self._report_and_release(lease, refusal)
        retries = int(request.meta.get(RETRIES_META, 0)) + 1
        if retries > self._settings.max_retries:
            self._stats.inc_value(f"{STATS_PREFIX}/gave_up")
            raise IgnoreRequest(f"{request.url}: refused {retries} times")
        self._stats.inc_value(f"{STATS_PREFIX}/retries")
        retry = request.replace(dont_filter=True)
        retry.meta[RETRIES_META] = retries
        for key in ("proxy", "_auth_proxy", LEASE_META, PROXY_META):
            retry.meta.pop(key, None)
        if b"Proxy-Authorization" in retry.headers:
            del retry.headers[b"Proxy-Authorization"]
        return retry

    def _drop(self, lease: AsyncLease) -> None:
        """Take a refused lease out of every spread and session (once)."""
        self._by_id.pop(lease.lease_id, None)
        for spread in self._spreads.values():
            spread.remove(lease.lease_id)
        for key in [key for key, held in self._sessions.items() if held is lease]:
            del self._sessions[key]

    async def _release(self, lease: AsyncLease) -> None:
        try:
            await lease.release()
        except EgressProxiesError as error:
            logger.warning("could not release %r: %s", lease, error)

    async def _report_and_release(self, lease: AsyncLease, refusal: Classification) -> None:
        try:
            await lease.report(refusal.verdict, refusal.reason, retry_after=refusal.retry_after)
        except EgressProxiesError as error:
            logger.warning("could not report %s on %s: %s", refusal.reason, lease.proxy_key, error)
        await self._release(lease)

    def _lock(self, domain: str) -> asyncio.Lock:
        lock = self._locks.get(domain)
        if lock is None:
            lock = self._locks[domain] = asyncio.Lock()
        return lock

    @property
    def _stats(self) -> _Stats:
        stats: Any = self._crawler.stats
        return stats  # type: ignore[no-any-return]


def _positive_or_none(value: int) -> int | None:
    return value if value > 0 else None


def _domain(request: Request) -> str:
    return urlparse_cached(request).hostname or ""


def _basic_authorization(proxy_url: str) -> bytes | None:
    parts = urlsplit(proxy_url)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return b"Basic " + base64.b64encode(pair.encode("latin-1"))
