"""The route handlers: list, lease, release, report, health and the OpenAPI document."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Literal, Protocol

from aiohttp import hdrs, web

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.discovery.doors import ProxyDoors
from egress_proxies.discovery.errors import DiscoveryApiError, json_response
from egress_proxies.discovery.index import IndexedCatalog
from egress_proxies.discovery.parsing import (
    lease_id_of,
    parse_proxy_query,
    read_body,
    reject_query,
)
from egress_proxies.discovery.responses import GrantedBodies, pace_body, proxy_url
from egress_proxies.discovery.schemas import (
    Health,
    LeaseRequest,
    NoMatchBody,
    ProxyList,
    ProxySummary,
    RenewRequest,
    ReportAccepted,
    ReportRequest,
)
from egress_proxies.leases import InvalidTtlError, LeaseStore, NoMatch, ReportResult, is_offerable

GRANTED, NO_MATCH, REJECTED = "granted", "no_match", "rejected"
_HEALTH_BODY = Health().model_dump_json()

logger = logging.getLogger(__name__)


class LeaseRequestRecorder(Protocol):
    """Counts lease requests by outcome, reports by result and reason, and target pauses."""

    def lease_request(self, outcome: str) -> None:
        """Count one lease request: granted, no_match or rejected."""
        ...

    def lease_report(self, result: str, reason: str | None) -> None:
        """Count one accepted report."""
        ...

    def target_paused(self) -> None:
        """Count one ban-storm pause."""
        ...


class PoolDemandRecorder(Protocol):
    """Where the pools' demand goes: bans per proxy, requests waiting at capacity per pool."""

    def banned(self, key: ProxyKey) -> None:
        """A proxy was reported banned."""
        ...

    def waited(self, pools: frozenset[str]) -> None:
        """A lease request found these pools' proxies all at capacity."""
        ...


class Handlers:
    """The API's handlers over one catalog and one store."""

    def __init__(
        self,
        catalog: IndexedCatalog,
        store: LeaseStore,
        metrics: LeaseRequestRecorder | None,
        openapi_json: str,
        synced: Callable[[], bool],
        doors: ProxyDoors,
        demand: PoolDemandRecorder | None = None,
        blocked: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._catalog = catalog
        self._store = store
        self._doors = doors
        self._metrics = metrics
        self._demand = demand
        self._openapi_json = openapi_json
        self._synced = synced
        self._blocked = blocked
        self._granted = GrantedBodies()

    async def health(self, _: web.Request) -> web.Response:
        """GET /healthz: the process serves requests (unauthenticated)."""
        return json_response(_HEALTH_BODY)

    async def ready(self, _: web.Request) -> web.Response:
        """GET /readyz: 200 once the fleet is synced and while the lease store answers.

        503 `unavailable` while `blocked` names a dependency that fails (the
        operator's state backend).
        """
        self._require_synced()
        problem = self._blocked()
        if problem is not None:
            raise DiscoveryApiError(503, "unavailable", problem, {"Retry-After": "5"})
        await self._store.ping()
        return json_response(_HEALTH_BODY)

    def _require_synced(self) -> None:
        """503 while the fleet's watches have not delivered their list: a partial view.

        A lease from it could miss every free proxy and count as demand the
        pool autoscaler would answer.
        """
        if not self._synced():
            raise DiscoveryApiError(
                503,
                "not_synced",
                "the fleet has not been listed from the API server yet",
                {"Retry-After": "1"},
            )

    async def openapi(self, _: web.Request) -> web.Response:
        """GET /openapi.json: this server's OpenAPI 3.1 document (unauthenticated)."""
        return json_response(self._openapi_json)

    async def list_proxies(self, request: web.Request) -> web.Response:
        """GET /v1/proxies: proxies matching `attr.<k>=<v>` filters, optionally by health."""
        query = parse_proxy_query(request)
        self._require_synced()
        matching = self._catalog.current().select(query.selector).matching
        if query.healthy is not None:
            matching = tuple(r for r in matching if is_offerable(r) is query.healthy)
        counts = await self._store.active_counts()
        body = ProxyList(proxies=[_summary(r, counts) for r in matching], count=len(matching))
        return json_response(body.model_dump_json())

    async def acquire(self, request: web.Request) -> web.Response:
        """POST /v1/leases: lease the least-loaded healthy proxy matching the selector."""
        try:
            reject_query(request)
            wanted = await read_body(request, LeaseRequest)
            self._check_ttl(wanted.ttl_seconds)
        except DiscoveryApiError:
            self._count(REJECTED)
            raise
        self._require_synced()
        pool = self._catalog.current().select(wanted.selector).pool
        outcome = await self._store.acquire(pool, wanted.target, wanted.ttl_seconds, wanted.held)
        if isinstance(outcome, NoMatch):
            self._count(NO_MATCH)
            if self._demand is not None and outcome.at_capacity and pool.pools:
                self._demand.waited(pool.pools)
            retry_after = _whole_seconds(outcome.retry_after)
            headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
            return json_response(_no_match_body(outcome, retry_after), 409, headers)
        self._count(GRANTED)
        credentials = self._doors.credentials(outcome, request.headers.get(hdrs.AUTHORIZATION))
        return json_response(self._granted.render(outcome, credentials), status=201)

    async def renew(self, request: web.Request) -> web.Response:
        """POST /v1/leases/{leaseId}/renew: the lease now ends ttlSeconds from now."""
        reject_query(request)
        lease_id = lease_id_of(request)
        wanted = await read_body(request, RenewRequest)
        self._check_ttl(wanted.ttl_seconds)
        try:
            lease = await self._store.renew(
                lease_id, wanted.ttl_seconds, self._catalog.current().record
            )
        except InvalidTtlError as error:
            raise DiscoveryApiError(400, "invalid_request", str(error)) from None
        if lease is None:
            raise DiscoveryApiError(404, "unknown_lease", "no such lease, or it has ended")
        credentials = self._doors.credentials(lease, request.headers.get(hdrs.AUTHORIZATION))
        return json_response(self._granted.render(lease, credentials))

    async def release(self, request: web.Request) -> web.Response:
        """DELETE /v1/leases/{leaseId}: end the lease (its credentials are revoked on its
        proxy); unknown or ended ids are fine too."""
        reject_query(request)
        await self._store.release(lease_id_of(request))
        return web.Response(status=204)

    async def report(self, request: web.Request) -> web.Response:
        """POST /v1/leases/{leaseId}/report: ok (with a count), rate_limited or banned.

        `banned` ends the lease (its credentials are revoked on its proxy): the proxy
        is cooling for the target, and a crawler that kept using it would make it worse.
        """
        reject_query(request)
        lease_id = lease_id_of(request)
        report = await read_body(request, ReportRequest)
        outcome = await self._store.report(
            lease_id,
            report.result,
            report.target,
            report.retry_after_seconds,
            self._catalog.current().record,
            report.count,
            report.accepted_last_second,
        )
        if outcome is None:
            raise DiscoveryApiError(404, "unknown_lease", "no such lease, or it ended too long ago")
        proxy = outcome.lease.proxy.key
        logger.info(
            "report %s (reason %s) on proxy %s for target %s",
            report.result.value,
            report.reason or "-",
            proxy,
            outcome.target or "(all)",
        )
        if self._metrics is not None:
            self._metrics.lease_report(report.result.value, report.reason)
        if report.result == ReportResult.BANNED:
            await self._store.release(lease_id)
            if self._demand is not None:
                self._demand.banned(proxy)
        if outcome.paused_until is not None:
            logger.warning(
                "ban storm: target %s paused until %s: most of a pool was banned by it",
                outcome.target,
                datetime.fromtimestamp(outcome.paused_until, UTC).isoformat(),
            )
            if self._metrics is not None:
                self._metrics.target_paused()
        assert outcome.pace is not None, "every store paces the reports it accepts"
        return json_response(ReportAccepted(pace=pace_body(outcome.pace)).model_dump_json())

    def _check_ttl(self, ttl_seconds: int) -> None:
        if ttl_seconds > self._store.max_ttl:
            raise DiscoveryApiError(
                400,
                "ttl_too_long",
                f"ttlSeconds must not exceed {self._store.max_ttl}; ask again when it ends",
            )

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.lease_request(outcome)


def _whole_seconds(seconds: float | None) -> int | None:
    # Retry-After is whole seconds; round up so a client never comes back too early.
    return None if seconds is None else max(1, math.ceil(seconds))


def _no_match_body(no_match: NoMatch, retry_after: int | None) -> str:
    paused, full = no_match.target_paused, no_match.target_full
    error: Literal["no_match", "target_paused", "target_full"] = "no_match"
    detail = "no proxy matching the selector is free for this target"
    if paused:
        error, detail = (
            "target_paused",
            "the target is paused: most of this pool was banned by it lately",
        )
    elif full:
        error, detail = "target_full", "the target holds as many leases as its bounds allow"
    return NoMatchBody(
        error=error,
        detail=detail,
        considered=no_match.considered,
        at_capacity=no_match.at_capacity,
        in_cooldown=no_match.in_cooldown,
        unhealthy=no_match.unhealthy,
        target_paused=paused,
        target_full=full,
        retry_after_seconds=retry_after,
    ).model_dump_json()


def _summary(record: ProxyRecord, counts: Mapping[ProxyKey, int]) -> ProxySummary:
    return ProxySummary(
        namespace=record.namespace,
        name=record.name,
        scheme=record.scheme,
        host=record.host,
        port=record.port,
        url=proxy_url(record),
        attributes=dict(record.attributes),
        healthy=record.healthy,
        deleting=record.deleting,
        draining=record.draining,
        latency_millis=record.latency_millis,
        max_leases=record.max_leases,
        max_targets=record.max_targets,
        active_leases=counts.get(record.key, 0),
        managed=record.managed,
    )
