"""A Scrapy downloader middleware that sends each domain's requests through a leased proxy.

    DOWNLOADER_MIDDLEWARES = {
        "egress_proxies_client.scrapy_middleware.EgressProxiesMiddleware": 740,
    }
    EGRESS_PROXIES_API_URL = "http://egress-proxies.egress-proxies.svc:8090"
    EGRESS_PROXIES_TOKEN = "..."            # or EGRESS_PROXIES_TOKEN_FILE
    EGRESS_PROXIES_SELECTOR = {"region": "eu"}

One lease per target domain, shared by that domain's requests and renewed while in
use. A response or exception the ban policy (or the spider's `response_is_ban` /
`exception_is_ban`) calls a ban or a rate limit is reported with its reason, the
lease is dropped, and the request goes back to the scheduler to be sent through
another proxy, up to EGRESS_PROXIES_MAX_RETRIES times: the refused response never
reaches the callback. Every lease is released when the spider closes. Needs the
asyncio reactor (Scrapy's default since 2.13).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
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

from egress_proxies_client.errors import EgressProxiesError, LeaseEndedError
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.pool import AsyncLease, AsyncPool

logger = logging.getLogger(__name__)

LEASE_META = "egress_proxies_lease"  # the lease id a request was sent under
PROXY_META = "egress_proxies_proxy"  # namespace/name of the proxy, for spiders and logs
RETRIES_META = "egress_proxies_retries"
SKIP_META = "egress_proxies_skip"  # True: leave this request alone
STATS_PREFIX = "egress_proxies"


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
        )


class EgressProxiesMiddleware:
    """Leases per domain, ban detection, retries through another proxy, release on close."""

    def __init__(self, crawler: Crawler, settings: Settings, policy: BanPolicy) -> None:
        self._crawler = crawler
        self._settings = settings
        self._pool = AsyncPool(settings.api_url, settings.token, policy=policy)
        self._policy = policy
        self._leases: dict[str, AsyncLease] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> EgressProxiesMiddleware:
        """Build from EGRESS_PROXIES_* settings; EGRESS_PROXIES_BAN_POLICY may be a BanPolicy."""
        policy = crawler.settings.get("EGRESS_PROXIES_BAN_POLICY") or BanPolicy()
        middleware = cls(crawler, Settings.of(crawler), policy)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def __repr__(self) -> str:
        return f"<EgressProxiesMiddleware {self._settings.api_url} [leases: {len(self._leases)}]>"

    async def process_request(self, request: Request) -> None:
        """Send the request through its domain's lease (leasing one first if needed)."""
        if request.meta.get(SKIP_META):
            return
        domain = _domain(request)
        lease = await self._lease_for(domain)
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

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        """A banned or rate-limited response goes back as a retry, never to the callback."""
        if LEASE_META not in request.meta:
            return response
        classification = self._judge_response(request, response)
        if classification is None:
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

    async def spider_closed(self, spider: Spider) -> None:
        """Release every lease, then close the connections to the API."""
        leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            try:
                await lease.release()
            except EgressProxiesError as error:
                logger.warning("could not release %r: %s", lease, error)
        await self._pool.aclose()
        logger.info("released %d egress-proxies leases", len(leases))

    async def _lease_for(self, domain: str) -> AsyncLease:
        async with self._lock(domain):
            lease = self._leases.get(domain)
            if lease is not None and not lease.ended:
                if await self._renewed(lease):
                    return lease
                self._leases.pop(domain, None)
            try:
                lease = await self._pool.acquire(
                    self._settings.selector, domain, self._settings.ttl, self._settings.wait
                )
            except EgressProxiesError as error:
                self._stats.inc_value(f"{STATS_PREFIX}/no_proxy")
                raise IgnoreRequest(f"no egress proxy for {domain}: {error}") from error
            self._stats.inc_value(f"{STATS_PREFIX}/leases")
            self._leases[domain] = lease
            logger.info("leased %r", lease)
            return lease

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
        async with self._lock(domain):
            lease = self._leases.get(domain)
            # Concurrent requests on the same lease see the same refusal: report it once.
            if lease is not None and lease.lease_id == request.meta.get(LEASE_META):
                del self._leases[domain]
                await self._report_and_release(lease, refusal)
        retries = int(request.meta.get(RETRIES_META, 0)) + 1
        if retries > self._settings.max_retries:
            self._stats.inc_value(f"{STATS_PREFIX}/gave_up")
            raise IgnoreRequest(f"{request.url}: refused through {retries} proxies")
        self._stats.inc_value(f"{STATS_PREFIX}/retries")
        retry = request.replace(dont_filter=True)
        retry.meta[RETRIES_META] = retries
        for key in ("proxy", "_auth_proxy", LEASE_META, PROXY_META):
            retry.meta.pop(key, None)
        if b"Proxy-Authorization" in retry.headers:
            del retry.headers[b"Proxy-Authorization"]
        return retry

    async def _report_and_release(self, lease: AsyncLease, refusal: Classification) -> None:
        try:
            await lease.report(refusal.verdict, refusal.reason, retry_after=refusal.retry_after)
        except EgressProxiesError as error:
            logger.warning("could not report %s on %s: %s", refusal.reason, lease.proxy_key, error)
        try:
            await lease.release()
        except EgressProxiesError as error:
            logger.warning("could not release %r: %s", lease, error)

    def _lock(self, domain: str) -> asyncio.Lock:
        lock = self._locks.get(domain)
        if lock is None:
            lock = self._locks[domain] = asyncio.Lock()
        return lock

    @property
    def _stats(self) -> _Stats:
        stats: Any = self._crawler.stats
        return stats  # type: ignore[no-any-return]


def _domain(request: Request) -> str:
    return urlparse_cached(request).hostname or ""


def _basic_authorization(proxy_url: str) -> bytes | None:
    parts = urlsplit(proxy_url)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return b"Basic " + base64.b64encode(pair.encode("latin-1"))
