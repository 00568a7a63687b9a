"""Pool and AsyncPool: lease a proxy, use it, report how it fared, always release it.

    pool = Pool("http://egress-proxies:8090", token)
    with pool.lease(selector={"region": "eu"}, target="example.com", ttl=300, wait=30) as lease:
        for url in urls:
            lease.wait_turn()                  # at the pace the server handed out
            response = httpx.get(url, proxy=lease.proxy_url)
            lease.observe(response.status_code, response.headers, response.content)

`observe` counts accepted responses, reported in batches in the background (every
`report_interval` seconds or `report_batch` responses); a rate limit is reported
at once and pauses the lease for the site's Retry-After; a ban raises
ProxyBannedError. Every renewal and report answer brings the current pace.

The two faces share the wire format (`wire`), the wait planner (`backoff`), the
ban policy (`policy`) and the pacing (`pacing`); they differ only in how they
send requests and sleep.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

import httpx

from egress_proxies_client.backoff import Backoff
from egress_proxies_client.errors import (
    EgressProxiesError,
    LeaseEndedError,
    NoMatchCounts,
    NoProxyAvailableError,
    ProxyBannedError,
    ProxyRateLimitedError,
    TargetPausedError,
)
from egress_proxies_client.pacing import OkBatch, Pace, TokenBucket
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.reporting import TaskReporter, ThreadReporter
from egress_proxies_client.wire import (
    Grant,
    ProxyInfo,
    grant_of,
    lease_body,
    no_match_of,
    pace_of,
    proxies_of,
    raise_for,
    report_body,
    unavailable,
)

logger = logging.getLogger("egress_proxies_client")

DEFAULT_TTL = 300
DEFAULT_WAIT = 30.0
DEFAULT_TIMEOUT = 10.0
DEFAULT_REPORT_INTERVAL = 1.0
DEFAULT_REPORT_BATCH = 100


class _LeaseView:
    """What both lease faces show: the proxy to use, never the credentials in a repr;
    and what both keep: the token bucket of the lease's pace, the batch of ok counts."""

    def __init__(
        self, grant: Grant, policy: BanPolicy, clock: Callable[[], float], batch: OkBatch
    ) -> None:
        self._grant = grant
        self._policy = policy
        self._clock = clock
        self._bucket = TokenBucket(grant.pace, clock())
        self._batch = batch
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


def _give_up(counts: NoMatchCounts, attempts: int, waited: float) -> NoProxyAvailableError:
    kind = TargetPausedError if counts.target_paused else NoProxyAvailableError
    return kind(counts, attempts, waited)


class Lease(_LeaseView):
    """A proxy held from a Pool until released or expired."""

    def __init__(self, pool: Pool, grant: Grant) -> None:
        super().__init__(grant, pool.policy, pool._clock, pool._new_batch())
        self._pool = pool

    def renew(self, ttl: int) -> None:
        """Keep the proxy `ttl` seconds from now (sticky sessions); LeaseEndedError once over."""
        self._regranted(self._pool.renew(self._grant.lease_id, ttl))

    def wait_turn(self) -> None:
        """Sleep until this lease may send its next request at its pace (the pace as it is
        when the turn comes: a pace lowered meanwhile applies at once)."""
        with self._bucket.waiting():
            while (delay := self._bucket.take(self._clock())) > 0:
                self._pool._sleep(delay)

    def observe(
        self, status: int, headers: Mapping[str, str], body: str | bytes = b""
    ) -> Classification | None:
        """Count an accepted response (reported in a batch); report a rate limit at once.

        Returns None when accepted, the rate limit's classification when refused
        (send the request again after `wait_turn`); raises ProxyBannedError on a ban.
        """
        classification = self._policy.classify_response(status, headers, body)
        if classification is None:
            self.accepted()
        elif classification.verdict is Verdict.BANNED:
            raise ProxyBannedError(classification.reason)
        else:
            self.rate_limited(classification.reason, classification.retry_after)
        return classification

    def accepted(self, count: int = 1) -> None:
        """Count requests the site accepted; they are reported in the next batch."""
        self._pool._paced.add(self)
        if self._batch.add(count):
            self._pool._reporter.wake()
        else:
            self._pool._reporter.touch()

    def rate_limited(self, reason: str, retry_after: float | None = None) -> None:
        """The site rate-limited a request: wait out its Retry-After, report it at once."""
        if retry_after:
            self._bucket.pause(retry_after, self._clock())
        self.report(Verdict.RATE_LIMITED, reason, retry_after=retry_after)

    def _flush(self, *, force: bool = False) -> None:
        """Report the ok count if due (`force`: whatever is pending)."""
        count = self._batch.take(self._clock(), force=force)
        if count:
            try:
                self._repaced(self._pool.report(self._grant.lease_id, Verdict.OK, count=count))
            except LeaseEndedError:
                self._pool._paced.discard(self)
            except EgressProxiesError as error:
                self._batch.put_back(count)
                logger.warning("could not report %d ok on %s: %s", count, self.proxy_key, error)

    def report(
        self,
        result: Verdict | str,
        reason: str | None = None,
        *,
        target: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Tell the API how the proxy fared (ok, rate_limited, banned) and why."""
        self._repaced(self._pool.report(self._grant.lease_id, result, reason, target, retry_after))
        logger.info("reported %s (%s) on %s", Verdict(result).value, reason, self.proxy_key)

    def release(self) -> None:
        """Report the ok counts still pending, then end the lease now (idempotent)."""
        if not self.ended:
            self._pool._paced.discard(self)
            self._flush(force=True)
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
        report_interval: float = DEFAULT_REPORT_INTERVAL,
        report_batch: int = DEFAULT_REPORT_BATCH,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.policy = policy or BanPolicy()
        self.backoff = backoff or Backoff()
        self._report_interval, self._report_batch = report_interval, report_batch
        self._paced: set[Lease] = set()
        self._reporter = ThreadReporter(report_interval, self._flush_all)
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
        """Report pending ok counts, then close the connections (leases stay held to their TTL)."""
        self._reporter.stop()
        for lease in list(self._paced):
            lease._flush(force=True)
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
        *,
        count: int = 1,
    ) -> Pace | None:
        """Report on a lease by id; the lease's pace after it (None from an unpacing server)."""
        body = report_body(Verdict(result).value, reason, target, retry_after, count)
        return pace_of(self._send("POST", f"/v1/leases/{lease_id}/report", body, lease=True))

    def release(self, lease_id: str) -> None:
        """Release a lease by id (idempotent)."""
        self._send("DELETE", f"/v1/leases/{lease_id}", None, lease=True)

    def _new_batch(self) -> OkBatch:
        return OkBatch(self._report_interval, self._report_batch, self._clock())

    def _flush_all(self) -> None:
        for lease in list(self._paced):
            lease._flush()

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
        super().__init__(grant, pool.policy, pool._clock, pool._new_batch())
        self._pool = pool

    async def renew(self, ttl: int) -> None:
        """Keep the proxy `ttl` seconds from now (sticky sessions); LeaseEndedError once over."""
        self._regranted(await self._pool._renew(self._grant.lease_id, ttl))

    async def wait_turn(self) -> None:
        """Wait until this lease may send its next request at its pace, other tasks running
        (the pace as it is when the turn comes: a pace lowered meanwhile applies at once)."""
        with self._bucket.waiting():
            while (delay := self._bucket.take(self._clock())) > 0:
                await self._pool._sleep(delay)

    async def observe(
        self, status: int, headers: Mapping[str, str], body: str | bytes = b""
    ) -> Classification | None:
        """Count an accepted response (reported in a batch); report a rate limit at once.

        Returns None when accepted, the rate limit's classification when refused
        (send the request again after `wait_turn`); raises ProxyBannedError on a ban.
        """
        classification = self._policy.classify_response(status, headers, body)
        if classification is None:
            self.accepted()
        elif classification.verdict is Verdict.BANNED:
            raise ProxyBannedError(classification.reason)
        else:
            await self.rate_limited(classification.reason, classification.retry_after)
        return classification

    def accepted(self, count: int = 1) -> None:
        """Count requests the site accepted; they are reported in the next batch."""
        self._pool._paced.add(self)
        if self._batch.add(count):
            self._pool._reporter.wake()
        else:
            self._pool._reporter.touch()

    async def rate_limited(self, reason: str, retry_after: float | None = None) -> None:
        """The site rate-limited a request: wait out its Retry-After, report it at once."""
        if retry_after:
            self._bucket.pause(retry_after, self._clock())
        await self.report(Verdict.RATE_LIMITED, reason, retry_after=retry_after)

    async def _flush(self, *, force: bool = False) -> None:
        """Report the ok count if due (`force`: whatever is pending)."""
        count = self._batch.take(self._clock(), force=force)
        if count:
            body = report_body(Verdict.OK.value, None, None, None, count)
            path = f"/v1/leases/{self._grant.lease_id}/report"
            try:
                self._repaced(pace_of(await self._pool._send("POST", path, body, lease=True)))
            except LeaseEndedError:
                self._pool._paced.discard(self)
            except EgressProxiesError as error:
                self._batch.put_back(count)
                logger.warning("could not report %d ok on %s: %s", count, self.proxy_key, error)

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
        self._repaced(pace_of(await self._pool._send("POST", path, body, lease=True)))
        logger.info("reported %s (%s) on %s", Verdict(result).value, reason, self.proxy_key)

    async def release(self) -> None:
        """Report the ok counts still pending, then end the lease now (idempotent)."""
        if not self.ended:
            self._pool._paced.discard(self)
            await self._flush(force=True)
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
        report_interval: float = DEFAULT_REPORT_INTERVAL,
        report_batch: int = DEFAULT_REPORT_BATCH,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.policy = policy or BanPolicy()
        self.backoff = backoff or Backoff()
        self._report_interval, self._report_batch = report_interval, report_batch
        self._paced: set[AsyncLease] = set()
        self._reporter = TaskReporter(report_interval, self._flush_all)
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
        """Report pending ok counts, then close the connections (leases stay held to their TTL)."""
        await self._reporter.stop()
        for lease in list(self._paced):
            await lease._flush(force=True)
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

    def _new_batch(self) -> OkBatch:
        return OkBatch(self._report_interval, self._report_batch, self._clock())

    async def _flush_all(self) -> None:
        for lease in list(self._paced):
            await lease._flush()

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
