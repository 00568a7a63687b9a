"""Pool and AsyncPool: lease a proxy, use it, report how it fared, always release it.

    pool = Pool("http://egress-proxies:8090", token)
    with pool.lease(selector={"region": "eu"}, target="example.com", ttl=300, wait=30) as lease:
        httpx.get("https://example.com/", proxy=lease.proxy_url)

The two faces share the wire format (`wire`), the wait planner (`backoff`) and the
ban policy (`policy`); they differ only in how they send requests and sleep.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any

import httpx

from egress_proxies_client.backoff import Backoff
from egress_proxies_client.errors import (
    NoMatchCounts,
    NoProxyAvailableError,
    ProxyBannedError,
    ProxyRateLimitedError,
    TargetPausedError,
)
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.wire import (
    Grant,
    ProxyInfo,
    grant_of,
    lease_body,
    no_match_of,
    proxies_of,
    raise_for,
    report_body,
    unavailable,
)

logger = logging.getLogger("egress_proxies_client")

DEFAULT_TTL = 300
DEFAULT_WAIT = 30.0
DEFAULT_TIMEOUT = 10.0


class _LeaseView:
    """What both lease faces show: the proxy to use, never the credentials in a repr."""

    def __init__(self, grant: Grant, policy: BanPolicy) -> None:
        self._grant = grant
        self._policy = policy
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


def _give_up(counts: NoMatchCounts, attempts: int, waited: float) -> NoProxyAvailableError:
    kind = TargetPausedError if counts.target_paused else NoProxyAvailableError
    return kind(counts, attempts, waited)


class Lease(_LeaseView):
    """A proxy held from a Pool until released or expired."""

    def __init__(self, pool: Pool, grant: Grant) -> None:
        super().__init__(grant, pool.policy)
        self._pool = pool

    def renew(self, ttl: int) -> None:
        """Keep the proxy `ttl` seconds from now (sticky sessions); LeaseEndedError once over."""
        self._grant = self._pool.renew(self._grant.lease_id, ttl)

    def report(
        self,
        result: Verdict | str,
        reason: str | None = None,
        *,
        target: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Tell the API how the proxy fared (ok, rate_limited, banned) and why."""
        self._pool.report(self._grant.lease_id, result, reason, target, retry_after)
        logger.info("reported %s (%s) on %s", Verdict(result).value, reason, self.proxy_key)

    def release(self) -> None:
        """End the lease now (idempotent)."""
        if not self.ended:
            self._pool.release(self._grant.lease_id)
            self.ended = True
            self._pool._held -= 1


class Pool:
    """The synchronous face of the discovery API for one token."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        policy: BanPolicy | None = None,
        backoff: Backoff | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.policy = policy or BanPolicy()
        self.backoff = backoff or Backoff()
        self._http = httpx.Client(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
        )
        self._sleep, self._clock = sleep, clock
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not a secret)
        self._held = 0

    def proxies(
        self, selector: Mapping[str, str] | None = None, healthy: bool | None = None
    ) -> list[ProxyInfo]:
        """GET /v1/proxies filtered by attributes and health."""
        return proxies_of(self._send("GET", "/v1/proxies", None, params=_query(selector, healthy)))

    def acquire(
        self,
        selector: Mapping[str, str] | None = None,
        target: str | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ) -> Lease:
        """Lease a proxy, waiting on 409s as the server's Retry-After says, up to `wait`."""
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            response = self._request("POST", "/v1/leases", lease_body(selector or {}, target, ttl))
            if response.status_code != 409:
                raise_for(response)
                self._held += 1
                lease = Lease(self, grant_of(response.json()))
                logger.info("leased %r", lease)
                return lease
            counts = no_match_of(response)
            elapsed = self._clock() - started
            delay = self.backoff.next_wait(
                counts.retry_after, attempt - 1, wait - elapsed, self._rng
            )
            if delay is None:
                raise _give_up(counts, attempt, elapsed)
            self._sleep(delay)

    @contextmanager
    def lease(
        self,
        selector: Mapping[str, str] | None = None,
        target: str | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ) -> Iterator[Lease]:
        """A lease for the `with` block: a ban raised inside is reported, then always released."""
        held = self.acquire(selector, target, ttl, wait)
        try:
            yield held
        except BaseException as error:
            classification = self.policy.classify_exception(error)
            if classification is not None:
                _report_quietly(held, classification)
            raise
        finally:
            held.release()

    def close(self) -> None:
        """Close the HTTP connections (leases still held stay held until their TTL)."""
        self._http.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Pool {self.api_url} [leases: {self._held} held]>"

    def renew(self, lease_id: str, ttl: int) -> Grant:
        """Renew a lease by id (the CLI's; code holding a Lease calls `lease.renew`)."""
        body = {"ttlSeconds": ttl}
        return grant_of(self._send("POST", f"/v1/leases/{lease_id}/renew", body, lease=True))

    def report(
        self,
        lease_id: str,
        result: Verdict | str,
        reason: str | None = None,
        target: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Report on a lease by id."""
        body = report_body(Verdict(result).value, reason, target, retry_after)
        self._send("POST", f"/v1/leases/{lease_id}/report", body, lease=True)

    def release(self, lease_id: str) -> None:
        """Release a lease by id (idempotent)."""
        self._send("DELETE", f"/v1/leases/{lease_id}", None, lease=True)

    def _send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        lease: bool = False,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        response = self._request(method, path, body, params)
        raise_for(response, lease_route=lease)
        return response.json() if response.content else None

    def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            return self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as error:
            raise unavailable(error) from None


def _report_quietly(lease: Lease, classification: Classification) -> None:
    try:
        lease.report(
            classification.verdict,
            classification.reason,
            retry_after=classification.retry_after,
        )
    except Exception:  # the crawler's own exception is the one to surface
        logger.warning("could not report %s on %s", classification.reason, lease.proxy_key)


def _query(selector: Mapping[str, str] | None, healthy: bool | None) -> dict[str, str]:
    query = {f"attr.{key}": value for key, value in (selector or {}).items()}
    if healthy is not None:
        query["healthy"] = "true" if healthy else "false"
    return query


class AsyncLease(_LeaseView):
    """A proxy held from an AsyncPool until released or expired."""

    def __init__(self, pool: AsyncPool, grant: Grant) -> None:
        super().__init__(grant, pool.policy)
        self._pool = pool

    async def renew(self, ttl: int) -> None:
        """Keep the proxy `ttl` seconds from now (sticky sessions); LeaseEndedError once over."""
        self._grant = await self._pool._renew(self._grant.lease_id, ttl)

    async def report(
        self,
        result: Verdict | str,
        reason: str | None = None,
        *,
        target: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Tell the API how the proxy fared (ok, rate_limited, banned) and why."""
        body = report_body(Verdict(result).value, reason, target, retry_after)
        path = f"/v1/leases/{self._grant.lease_id}/report"
        await self._pool._send("POST", path, body, lease=True)
        logger.info("reported %s (%s) on %s", Verdict(result).value, reason, self.proxy_key)

    async def release(self) -> None:
        """End the lease now (idempotent)."""
        if not self.ended:
            await self._pool._send("DELETE", f"/v1/leases/{self._grant.lease_id}", None, lease=True)
            self.ended = True
            self._pool._held -= 1


class AsyncPool:
    """The asyncio face of the discovery API for one token."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        policy: BanPolicy | None = None,
        backoff: Backoff | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.policy = policy or BanPolicy()
        self.backoff = backoff or Backoff()
        self._http = httpx.AsyncClient(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
        )
        self._sleep, self._clock = sleep, clock
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not a secret)
        self._held = 0

    async def proxies(
        self, selector: Mapping[str, str] | None = None, healthy: bool | None = None
    ) -> list[ProxyInfo]:
        """GET /v1/proxies filtered by attributes and health."""
        payload = await self._send("GET", "/v1/proxies", None, params=_query(selector, healthy))
        return proxies_of(payload)

    async def acquire(
        self,
        selector: Mapping[str, str] | None = None,
        target: str | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ) -> AsyncLease:
        """Lease a proxy, waiting on 409s as the server's Retry-After says, up to `wait`."""
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            body = lease_body(selector or {}, target, ttl)
            response = await self._request("POST", "/v1/leases", body)
            if response.status_code != 409:
                raise_for(response)
                self._held += 1
                lease = AsyncLease(self, grant_of(response.json()))
                logger.info("leased %r", lease)
                return lease
            counts = no_match_of(response)
            elapsed = self._clock() - started
            delay = self.backoff.next_wait(
                counts.retry_after, attempt - 1, wait - elapsed, self._rng
            )
            if delay is None:
                raise _give_up(counts, attempt, elapsed)
            await self._sleep(delay)

    @asynccontextmanager
    async def lease(
        self,
        selector: Mapping[str, str] | None = None,
        target: str | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ) -> AsyncIterator[AsyncLease]:
        """A lease for the `async with` block: a ban raised inside is reported, then released."""
        held = await self.acquire(selector, target, ttl, wait)
        try:
            yield held
        except BaseException as error:
            classification = self.policy.classify_exception(error)
            if classification is not None:
                try:
                    await held.report(
                        classification.verdict,
                        classification.reason,
                        retry_after=classification.retry_after,
                    )
                except Exception:
                    logger.warning(
                        "could not report %s on %s", classification.reason, held.proxy_key
                    )
            raise
        finally:
            await held.release()

    async def aclose(self) -> None:
        """Close the HTTP connections (leases still held stay held until their TTL)."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncPool {self.api_url} [leases: {self._held} held]>"

    async def _renew(self, lease_id: str, ttl: int) -> Grant:
        body = {"ttlSeconds": ttl}
        return grant_of(await self._send("POST", f"/v1/leases/{lease_id}/renew", body, lease=True))

    async def _send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        lease: bool = False,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        response = await self._request(method, path, body, params)
        raise_for(response, lease_route=lease)
        return response.json() if response.content else None

    async def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            return await self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as error:
            raise unavailable(error) from None
