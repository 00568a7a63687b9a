"""The ProxyPools as the watch last delivered them, for the console's Pools view.

The operator already watches ProxyPools; `register_pool_book` adds one more
event handler on that watch (no new API call) that keeps each pool's spec
replicas, autoscale bounds, status counts and template hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from egress_proxies.model import GROUP, VERSION
from egress_proxies.pool_model import POOL_PLURAL, template_hash


@dataclass(frozen=True)
class PoolView:
    """What the console shows of one pool."""

    namespace: str
    name: str
    uid: str
    replicas: int
    ready: int
    current: int
    leased: int
    draining: int
    updated: int
    min_replicas: int | None
    max_replicas: int | None
    template_hash: str
    last_scale_time: str | None


def pool_view(body: Mapping[str, Any]) -> PoolView:
    """The view of a ProxyPool body."""
    meta, spec = body["metadata"], body.get("spec") or {}
    status, autoscale = body.get("status") or {}, spec.get("autoscale") or {}
    return PoolView(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        replicas=int(spec.get("replicas", 1)),
        ready=int(status.get("readyReplicas", 0)),
        current=int(status.get("replicas", 0)),
        leased=int(status.get("leasedReplicas", 0)),
        draining=int(status.get("drainingReplicas", 0)),
        updated=int(status.get("updatedReplicas", 0)),
        min_replicas=autoscale.get("minReplicas") if autoscale else None,
        max_replicas=autoscale.get("maxReplicas") if autoscale else None,
        template_hash=template_hash(spec.get("template") or {}),
        last_scale_time=status.get("lastScaleTime"),
    )


class PoolBook:
    """The latest view of every pool, by `namespace/name`."""

    def __init__(self) -> None:
        self._pools: dict[str, PoolView] = {}

    def __repr__(self) -> str:
        return f"<PoolBook [pools: {len(self._pools)}]>"

    def put(self, body: Mapping[str, Any]) -> None:
        """Record a pool's latest body."""
        view = pool_view(body)
        self._pools[f"{view.namespace}/{view.name}"] = view

    def remove(self, namespace: str, name: str) -> None:
        """Forget a deleted pool."""
        self._pools.pop(f"{namespace}/{name}", None)

    def pools(self) -> list[PoolView]:
        """Every pool, by namespace and name."""
        return [self._pools[key] for key in sorted(self._pools)]

    def get(self, namespace: str, name: str) -> PoolView | None:
        """One pool's view, if known."""
        return self._pools.get(f"{namespace}/{name}")


def register_pool_book(registry: kopf.OperatorRegistry, book: PoolBook) -> None:
    """Keep `book` current from the operator's ProxyPool watch."""

    @kopf.on.event(GROUP, VERSION, POOL_PLURAL, registry=registry)
    async def console_pool_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        if event["type"] == "DELETED":
            book.remove(body["metadata"]["namespace"], body["metadata"]["name"])
        else:
            book.put(body)
