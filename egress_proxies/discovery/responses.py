"""The granted-lease body, rendered without building pydantic models on every request.

A lease's `proxy` object depends only on the ProxyRecord when the proxy hands
out its configured credentials, and records are immutable and replaced
whenever they change, so its JSON is rendered once per record object (by the
LeasedProxy model, so it is exactly the model's output) and reused; the few
per-lease fields are spliced around it. A lease with credentials of its own
(discovery/doors.py) has its `proxy` object rendered for it. The result equals
`LeaseGranted(...).model_dump_json()` byte for byte (a test holds it to that).
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

from pydantic_core import to_json

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.discovery.schemas import Credentials, LeasedProxy, PaceBody
from egress_proxies.leases import Lease, Pace
from egress_proxies.values import ProxyCredentials

# Records remembered; a fleet that outgrows it (or churns past it) just starts over.
MAX_CACHED_PROXIES = 65_536


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
            else leased_proxy(lease.proxy, credentials).model_dump_json()
        )
        return (
            f'{{"leaseId":"{lease.lease_id}","proxy":{proxy},'
            f'"target":{target},"ttlSeconds":{lease.ttl_seconds},'
            f'"expiresAt":"{expires_at.removesuffix("+00:00")}Z",'
            f'"pace":{pace_body(lease.pace).model_dump_json()}}}'
        )

    def _proxy_json(self, record: ProxyRecord) -> str:
        cached = self._proxies.get(record.key)
        if cached is not None and cached[0] is record:
            return cached[1]
        if len(self._proxies) >= MAX_CACHED_PROXIES:
            self._proxies.clear()
        rendered = leased_proxy(record, _configured(record)).model_dump_json()
        self._proxies[record.key] = (record, rendered)
        return rendered


def _configured(record: ProxyRecord) -> ProxyCredentials | None:
    """The credentials a proxy hands out itself: never the operator's own of a proxy that
    issues lease credentials (its signing key says so)."""
    credentials = record.credentials
    return None if credentials is None or credentials.signing_key is not None else credentials
