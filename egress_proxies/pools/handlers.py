"""kopf registration of the pool controller: a timer per ProxyPool, beside the Proxy handlers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import kopf

from egress_proxies.events import EventSink, Regarding
from egress_proxies.model import GROUP, VERSION
from egress_proxies.pool_model import POOL_KIND, POOL_PLURAL
from egress_proxies.pools.controller import PoolController

DEFAULT_INTERVAL = 1.0


def register_pools(
    registry: kopf.OperatorRegistry,
    controller: PoolController,
    events: EventSink,
    interval: float = DEFAULT_INTERVAL,
    owns: Callable[[Mapping[str, str]], bool] = lambda _: True,
) -> None:
    """Run one controller round per pool every `interval` seconds; its Events go to `events`.

    `owns` picks the pools this operator runs by their labels: a shard runs
    the pools its selector matches (docs/pools.md, "Pools and shards").
    """
    resource = (GROUP, VERSION, POOL_PLURAL)

    def owned(labels: kopf.Labels, **_: Any) -> bool:
        return owns(labels)

    @kopf.timer(*resource, interval=interval, registry=registry, when=owned)
    async def pool_round(body: kopf.Body, **_: Any) -> None:
        meta = body["metadata"]
        pool = Regarding(
            f"{GROUP}/{VERSION}", POOL_KIND, meta["namespace"], meta["name"], meta["uid"]
        )

        def post_event(kind: str, reason: str, message: str) -> None:
            events.record(pool, kind, reason, message)

        await controller.converge(body, post_event)

    @kopf.on.event(*resource, registry=registry)
    async def pool_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        if event["type"] == "DELETED":
            controller.forget(body["metadata"]["namespace"], body["metadata"]["name"])
