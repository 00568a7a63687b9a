"""The read model of the fleet: one ProxyRecord per addressable Proxy.

The operator keeps these in its watch-fed fleet (no API call per read); the health
engine takes its probe targets from them and the discovery API its
candidates. Building a record is pure: the caller resolves the credentials
Secret.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from egress_proxies.model import (
    HEALTHY,
    ConditionStatus,
    HealthCheck,
    Mode,
    ProxySpec,
    ProxyStatus,
    find_condition,
)
from egress_proxies.values import ProxyCredentials, ProxyKey, proxy_key
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL

__all__ = ["ProxyCatalog", "ProxyKey", "ProxyRecord", "proxy_key", "record_from_body"]


@dataclass(frozen=True)
class ProxyRecord:
    """Everything a prober or a crawler needs about one proxy."""

    key: ProxyKey
    uid: str
    namespace: str
    name: str
    scheme: str
    host: str
    port: int
    health_check: HealthCheck
    attributes: Mapping[str, str] = field(default_factory=dict)
    credentials: ProxyCredentials | None = None
    healthy: bool | None = None
    latency_millis: int | None = None
    # Leases per target at once, and targets at once (None: any number): leases/capacity.py.
    max_leases: int = 1
    max_targets: int | None = None
    managed: bool = True
    deleting: bool = False
    # Its pool is removing it (the pool's draining annotation): it is leased no more.
    draining: bool = False
    # Someone set spec.cordoned (kubectl or the console): it is leased no more.
    cordoned: bool = False
    pool: str | None = None  # `namespace/name` of the ProxyPool it belongs to

    @property
    def proxy_url(self) -> str:
        """`scheme://host:port` without credentials (they travel separately)."""
        return f"{self.scheme}://{self.host}:{self.port}"


class ProxyCatalog(Protocol):
    """A source of the current records (the operator's watch-fed fleet, or a list in tests)."""

    def records(self) -> Sequence[ProxyRecord]:
        """A snapshot of every addressable proxy."""
        ...


def record_from_body(
    body: Mapping[str, Any], credentials: ProxyCredentials | None
) -> ProxyRecord | None:
    """The record of a Proxy object, or None while it has no address yet."""
    meta = body["metadata"]
    spec = ProxySpec.model_validate(body.get("spec", {}))
    status = ProxyStatus.model_validate(_known_status(body.get("status") or {}))
    if spec.mode == Mode.EXTERNAL and spec.endpoint is not None:
        scheme, host, port = spec.endpoint.scheme, spec.endpoint.host, spec.endpoint.port
    elif status.ip and status.port:
        scheme, host, port = "http", status.ip, status.port
    else:
        return None
    healthy_condition = find_condition(status.conditions, HEALTHY)
    healthy = (
        None
        if healthy_condition is None or healthy_condition.status == ConditionStatus.UNKNOWN
        else healthy_condition.status == ConditionStatus.TRUE
    )
    return ProxyRecord(
        key=proxy_key(meta["namespace"], meta["name"]),
        uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        scheme=scheme,
        host=host,
        port=port,
        health_check=spec.health_check,
        attributes=dict(spec.attributes),
        credentials=credentials,
        healthy=healthy,
        latency_millis=status.latency_millis,
        max_leases=spec.max_leases,
        max_targets=spec.max_targets,
        managed=spec.mode == Mode.MANAGED,
        deleting=bool(meta.get("deletionTimestamp")),
        draining=bool((meta.get("annotations") or {}).get(DRAINING_ANNOTATION)),
        cordoned=spec.cordoned,
        pool=_pool_of(meta),
    )


def _pool_of(meta: Mapping[str, Any]) -> str | None:
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return f"{meta['namespace']}/{pool}" if pool else None


def _known_status(status: Mapping[str, Any]) -> dict[str, Any]:
    known = set(ProxyStatus.model_fields) | {
        f.alias for f in ProxyStatus.model_fields.values() if f.alias
    }
    return {key: value for key, value in status.items() if key in known}
