"""Pool and Lease, the synchronous face: generated from `_async/pool.py` by
`clients/python/scripts/generate_sync.py`. Do not edit: edit the source and run it.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import httpx

from egress_proxies_client.backoff import Backoff
from egress_proxies_client.errors import (
    EgressProxiesError,
    LeaseEndedError,
    NoProxyAvailableError,
    ProxyBannedError,
)
from egress_proxies_client.lease_view import (
    DEFAULT_IDLE,
    DEFAULT_REPORT_BATCH,
    DEFAULT_REPORT_INTERVAL,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    DEFAULT_WAIT,
    GROW_PAUSE,
    SLEEP,
    LeaseView,
    Lock,
    Sleep,
    give_up,
    logger,
    query_of,
)
from egress_proxies_client.pacing import OkBatch, Pace
from egress_proxies_client.policy import BanPolicy, Classification, Verdict
from egress_proxies_client.reporting import ThreadReporter
from egress_proxies_client.spread import DomainSpread
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
    unknown_optional_field,
)


class Lease(LeaseView):
    """A proxy held from its pool until released or expired."""

    def __init__(self, pool: Pool, grant: Grant) -> None:
        super().__init__(grant, pool.policy, pool._clock, pool._new_batch())
        self._pool = pool

    def renew(self, ttl: int) -> None:
        """Keep the proxy `ttl` seconds from now (sticky sessions); LeaseEndedError once over."""
        self._regranted(self._pool.renew(self._grant.lease_id, ttl))

    def wait_turn(self) -> None:
        """Wait until this lease may send its next request at its pace (the pace as it is
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
        self._recent.add(self._clock(), count)
        self._pool._paced.add(self)
        if self._batch.add(count):
            self._pool._reporter.wake()
        else:
            self._pool._reporter.touch()

    def rate_limited(self, reason: str, retry_after: float | None = None) -> None:
        """The site rate-limited a request: wait out its Retry-After, report it at once with
        what the site accepted in the second before (the limit it keeps to)."""
        now = self._clock()
        if retry_after:
            self._bucket.pause(retry_after, now)
        self.report(
            Verdict.RATE_LIMITED,
            reason,
            retry_after=retry_after,
            accepted_last_second=self._recent.last_second(now),
        )

    def _flush(self, *, force: bool = False) -> None:
        """Report the ok count if due (`force`: whatever is pending)."""
        count = self._batch.take(self._clock(), force=force)
        if count:
            try:
                pace = self._pool.report(self._grant.lease_id, Verdict.OK, count=count)
                self._repaced(pace)
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
        accepted_last_second: int | None = None,
    ) -> None:
        """Tell the API how the proxy fared (ok, rate_limited, banned) and why
        (`accepted_last_second`: on a rate limit, what the site accepted in the second before)."""
        pace = self._pool.report(
            self._grant.lease_id,
            result,
            reason,
            target,
            retry_after,
            accepted_last_second=accepted_last_second,
        )
        self._repaced(pace)
        counted = "" if accepted_last_second is None else f", {accepted_last_second} accepted"
        logger.info(
            "reported %s (%s%s) on %s", Verdict(result).value, reason, counted, self.proxy_key
        )

    def release(self) -> None:
        """Report the ok counts still pending, then end the lease now (idempotent)."""
        if not self.ended:
            self._pool._paced.discard(self)
            self._flush(force=True)
            self._pool.release(self._grant.lease_id)
            self.ended = True
            self._pool._held -= 1


# The pool's own leases for one target and selector (`turn`).
_SpreadKey = tuple[str, tuple[tuple[str, str], ...]]


class Pool:
    """The discovery API for one token: leases, reports, the pace of each lease.

    `turn(target)` sends through the pool's own leases for a target, as many as the
    fleet grants (or `leases_per_target`), each request at its lease's pace.
    """

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        policy: BanPolicy | None = None,
        backoff: Backoff | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        sleep: Sleep = SLEEP,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        report_interval: float = DEFAULT_REPORT_INTERVAL,
        report_batch: int = DEFAULT_REPORT_BATCH,
        leases_per_target: int | None = None,
        idle: float = DEFAULT_IDLE,
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
        self._unknown_fields: set[str] = set()
        self._leases_per_target, self._idle = leases_per_target, idle
        self._spreads: dict[_SpreadKey, DomainSpread[Lease]] = {}
        self._spread_locks: dict[_SpreadKey, Lock] = {}

    def proxies(
        self, selector: Mapping[str, str] | None = None, healthy: bool | None = None
    ) -> list[ProxyInfo]:
        """GET /v1/proxies filtered by attributes and health."""
        payload = self._send("GET", "/v1/proxies", None, params=query_of(selector, healthy))
        return proxies_of(payload)

    def acquire(
        self,
        selector: Mapping[str, str] | None = None,
        target: str | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
        held: int = 0,
    ) -> Lease:
        """Lease a proxy, waiting on 409s as the server's Retry-After says, up to `wait`.

        `held`: the leases the caller already holds for `target`; a refusal tells their
        holders that it waits (`Pace.waiting_held`), and holders above their share give
        one back.
        """
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            body = lease_body(selector or {}, target, ttl, held)
            response = self._request("POST", "/v1/leases", body)
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
                raise give_up(counts, attempt, elapsed)
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

    @contextmanager
    def turn(
        self,
        target: str,
        selector: Mapping[str, str] | None = None,
        ttl: int = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
    ) -> Iterator[Lease]:
        """Send one request to `target` through any proxy, at its pace: the block runs at
        the turn of the pool's lease for the target whose turn comes first.

        The pool leases another proxy for the target while every lease it holds is busy
        at its pace (up to `leases_per_target`, else as many as the fleet grants),
        gives back a lease unused for `idle` seconds, and one to another crawler that
        waits for the target holding fewer. Call the lease's `observe` with the answer;
        a refusal raised in the block (`check`'s, or `observe`'s ProxyBannedError) is
        reported, and a banned lease given up. Leases `turn` took are released by
        `aclose`. Waits up to `wait` for a first lease, then raises
        NoProxyAvailableError.
        """
        key = (target, tuple(sorted((selector or {}).items())))
        while True:
            with self._spread_lock(key):
                held = self._next_lease(key, selector, ttl, wait)
            held.wait_turn()
            if not held.ended:
                break  # else it was given back meanwhile: take another
        try:
            yield held
        except BaseException as error:
            classification = self.policy.classify_exception(error)
            if classification is not None and classification.verdict is Verdict.BANNED:
                with self._spread_lock(key):
                    self._spreads[key].remove(held.lease_id)
                _report_quietly(held, classification)
                held.release()
            elif classification is not None:  # rate limited: wait out Retry-After, slower
                with contextlib.suppress(EgressProxiesError):
                    held.rate_limited(classification.reason, classification.retry_after)
            raise

    def _next_lease(
        self, key: _SpreadKey, selector: Mapping[str, str] | None, ttl: int, wait: float
    ) -> Lease:
        """The target's lease whose turn comes first, leasing another while all are busy."""
        now = self._clock()
        spread = self._spreads.get(key)
        if spread is None:
            spread = self._spreads[key] = DomainSpread(self._leases_per_target, self._idle)
        gone = spread.idle_leases(now)
        yielded = spread.yielded(now)
        for lease in [*gone, *([] if yielded is None else [yielded])]:
            lease.release()
        while True:
            best = spread.best()
            if spread.should_grow(best, now):
                try:
                    grown = self.acquire(
                        selector, key[0], ttl, wait if best is None else 0.0, len(spread.leases)
                    )
                except NoProxyAvailableError as error:
                    if best is None:
                        raise
                    spread.hold_back(now + (error.counts.retry_after or GROW_PAUSE))
                else:
                    spread.add(grown, now)
                    if best is None or grown.next_turn() <= best.next_turn():
                        best = grown
            assert best is not None, "acquire raises when the target has no lease"
            if _renewed(best, ttl):
                spread.used(best, now)
                return best
            spread.remove(best.lease_id)

    def _spread_lock(self, key: _SpreadKey) -> Lock:
        lock = self._spread_locks.get(key)
        if lock is None:
            lock = self._spread_locks[key] = Lock()
        return lock

    def close(self) -> None:
        """Report pending ok counts and release the leases `turn` took, then close the
        connections (other leases stay held to their TTL)."""
        for spread in self._spreads.values():
            for lease in list(spread.leases):
                _release_quietly(lease)
        self._spreads.clear()
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
        return f"<{type(self).__name__} {self.api_url} [leases: {self._held} held]>"

    def renew(self, lease_id: str, ttl: int) -> Grant:
        """Renew a lease by id (the CLI's; code holding a lease calls its `renew`)."""
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
        accepted_last_second: int | None = None,
    ) -> Pace | None:
        """Report on a lease by id; the lease's pace after it (None from an unpacing server).

        `count`: the requests an ok report counts; `accepted_last_second`: on a rate
        limit, the requests the site accepted in the second before it refused one.
        """
        body = report_body(
            Verdict(result).value, reason, target, retry_after, count, accepted_last_second
        )
        path = f"/v1/leases/{lease_id}/report"
        return pace_of(self._send("POST", path, body, lease=True))

    def release(self, lease_id: str) -> None:
        """Release a lease by id (idempotent)."""
        self._send("DELETE", f"/v1/leases/{lease_id}", None, lease=True)

    def _new_batch(self) -> OkBatch:
        return OkBatch(self._report_interval, self._report_batch)

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
        """The response; a body field an older server refused is dropped from then on."""
        while True:
            if body is not None and self._unknown_fields:
                body = {k: v for k, v in body.items() if k not in self._unknown_fields}
            try:
                response = self._http.request(method, path, json=body, params=params)
            except httpx.HTTPError as error:
                raise unavailable(error) from None
            unknown = unknown_optional_field(response, body)
            if unknown is None:
                return response
            logger.warning("the API is older than this client: it does not take %r", unknown)
            self._unknown_fields.add(unknown)


def _renewed(lease: Lease, ttl: int) -> bool:
    """Renew a lease past half its TTL; False when it already ended."""
    remaining = (lease.grant.expires_at - datetime.now(UTC)).total_seconds()
    if remaining > ttl / 2:
        return True
    try:
        lease.renew(ttl)
    except LeaseEndedError:
        return False
    return True


def _release_quietly(lease: Lease) -> None:
    try:
        lease.release()
    except EgressProxiesError as error:
        logger.warning("could not release %r: %s", lease, error)


def _report_quietly(lease: Lease, classification: Classification) -> None:
    try:
        lease.report(
            classification.verdict,
            classification.reason,
            retry_after=classification.retry_after,
        )
    except Exception:  # the crawler's own exception is the one to surface
        logger.warning("could not report %s on %s", classification.reason, lease.proxy_key)
