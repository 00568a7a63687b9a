"""The granted-lease body, rendered without building pydantic models on every request.

A lease's `proxy` object depends only on the ProxyRecord when the proxy hands
out its configured credentials, and records are immutable and replaced
whenever they change, so its JSON is rendered once per record object (by the
LeasedProxy model, so it is exactly the model's output) and reused; the few
per-lease fields are spliced around it. A lease with credentials of its own
(discovery/doors.py) gets the record's JSON rendered once with placeholder
credentials, which its own replace: lease credentials are lowercase hex and
dots, the same in JSON and in a URL. The result equals
`LeaseGranted(...).model_dump_json()` byte for byte (a test holds it to that).
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from urllib.parse import quote

from pydantic_core import to_json

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.discovery.schemas import Credentials, LeasedProxy, PaceBody
from egress_proxies.leases import Lease, Pace
from egress_proxies.values import ProxyCredentials

# Records remembered; a fleet that outgrows it (or churns past it) just starts over.
MAX_CACHED_PROXIES = 65_536
# Placeholders no attribute or address holds (random per process).
_USER, _PASSWORD = (f"p{secrets.token_hex(16)}" for _ in range(2))
_SPLICEABLE = re.compile(r"[0-9a-z.]+")


def proxy_url(record: ProxyRecord, credentials: ProxyCredentials | None = None) -> str:
    """scheme://[userinfo@]host:port, IPv6 hosts bracketed, credentials percent-encoded."""
    # Formatted by hand: yarl refuses odd hosts, and one odd record must not fail a listing.
    host = f"[{record.host}]" if ":" in record.host else record.host
    userinfo = (
        ""
        if credentials is None
        else f"{quote(credentials.username, safe='')}:{quote(credentials.password, safe='')}@"
    )
    return f"{record.scheme}://{userinfo}{host}:{record.port}"


def leased_proxy(record: ProxyRecord, credentials: ProxyCredentials | None) -> LeasedProxy:
    """The `proxy` object of a granted lease, carrying `credentials`."""
    return LeasedProxy(
        namespace=record.namespace,
        name=record.name,
        scheme=record.scheme,
        host=record.host,
        port=record.port,
        url=proxy_url(record),
        credentials=None
        if credentials is None
        else Credentials(username=credentials.username, password=credentials.password),
        url_with_credentials=proxy_url(record, credentials),
        attributes=dict(record.attributes),
        latency_millis=record.latency_millis,
    )


def pace_body(pace: Pace) -> PaceBody:
    """The `pace` object of a lease, a renewal or a report (the rate to a thousandth)."""
    lowered_at = pace.lowered_at
    return PaceBody(
        requests_per_second=round(pace.rate, 3),
        burst=pace.burst,
        last_lowered_at=None if lowered_at is None else datetime.fromtimestamp(lowered_at, UTC),
        waiting_held=pace.waiting_held,
    )


class GrantedBodies:
    """Renders LeaseGranted bodies, each record's `proxy` JSON rendered once."""

    def __init__(self) -> None:
        self._proxies: dict[ProxyKey, tuple[ProxyRecord, str]] = {}
        self._templates: dict[ProxyKey, tuple[ProxyRecord, str]] = {}

    def __repr__(self) -> str:
        return f"<GrantedBodies [proxies cached: {len(self._proxies)}]>"

    def render(self, lease: Lease, credentials: ProxyCredentials | None = None) -> str:
        """The 201 (or renew 200) body for `lease`, as LeaseGranted would serialise it.

        `credentials`: the lease's own; None hands out the proxy's configured ones.
        """
        target = "null" if lease.target is None else to_json(lease.target).decode()
        expires_at = datetime.fromtimestamp(lease.expires_at, UTC).isoformat()
        assert lease.pace is not None, "every store paces the leases it grants"
        proxy = (
            self._proxy_json(lease.proxy)
            if credentials is None
            else self._proxy_json_with(lease.proxy, credentials)
        )
        return (
            f'{{"leaseId":"{lease.lease_id}","proxy":{proxy},'
            f'"target":{target},"ttlSeconds":{lease.ttl_seconds},'
            f'"expiresAt":"{expires_at.removesuffix("+00:00")}Z",'
            f'"pace":{pace_body(lease.pace).model_dump_json()}}}'
        )

    def _proxy_json(self, record: ProxyRecord) -> str:
        return _cached(self._proxies, record, _configured(record))

    def _proxy_json_with(self, record: ProxyRecord, credentials: ProxyCredentials) -> str:
        username, password = credentials.username, credentials.password
        if not (_SPLICEABLE.fullmatch(username) and _SPLICEABLE.fullmatch(password)):
            return leased_proxy(record, credentials).model_dump_json()
        template = _cached(self._templates, record, ProxyCredentials(_USER, _PASSWORD))
        return template.replace(_USER, username).replace(_PASSWORD, password)


def _cached(
    cache: dict[ProxyKey, tuple[ProxyRecord, str]],
    record: ProxyRecord,
    credentials: ProxyCredentials | None,
) -> str:
    """The record's `proxy` JSON with `credentials`, rendered once per record object."""
    cached = cache.get(record.key)
    if cached is not None and cached[0] is record:
        return cached[1]
    if len(cache) >= MAX_CACHED_PROXIES:
        cache.clear()
    rendered = leased_proxy(record, credentials).model_dump_json()
    cache[record.key] = (record, rendered)
    return rendered


def _configured(record: ProxyRecord) -> ProxyCredentials | None:
    """The credentials a proxy hands out itself: never the operator's own of a proxy that
    issues lease credentials (its signing key says so)."""
    credentials = record.credentials
    return None if credentials is None or credentials.signing_key is not None else credentials
