"""What a console user with the `act` role may do: each an ordinary Kubernetes write and an Event.

    cordon / uncordon a Proxy   merge-patch spec.cordoned (what `kubectl patch` would do)
    drain and replace a Proxy   merge-patch the pool's draining annotation onto a pool member:
                                the pool creates a replacement and deletes it once its
                                leases end, as when it scales down (docs/pools.md)
    scale a ProxyPool           merge-patch spec.replicas
    clear a cooldown            end a {proxy, target} cooldown in the lease store (the
                                store is the truth: every replica, and a restarted
                                operator on the Redis store, sees it cleared)

The Event on the object (the Proxy, for a cleared cooldown) names the console
user, so `kubectl describe` shows who did it. The object is looked up in what
the watches delivered (no read from the API server, so the operator's RBAC
needs no `get`): an unknown one is a 404 and nothing is written. A write the
API server refuses (a pool's CEL bounds) is a 400 with its message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock, k8s_time
from egress_proxies.console.access import ConsoleUser
from egress_proxies.console.pools import PoolView
from egress_proxies.discovery.errors import DiscoveryApiError
from egress_proxies.events import EventSink, Regarding
from egress_proxies.kube import KubeApiError, NotFoundError
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.leases import LeaseStore
from egress_proxies.model import GROUP, KIND, VERSION
from egress_proxies.pool_model import POOL_KIND
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]
MAX_REPLICAS = 1000  # the CRD's bound on spec.replicas


ProxyLookup = Callable[[str, str], Mapping[str, Any] | None]
PoolLookup = Callable[[str, str], PoolView | None]


class ObjectApi(Protocol):
    """The API call the actions make."""

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """Merge-patch the object at `path`."""
        ...


def forbidden(user: ConsoleUser) -> DiscoveryApiError:
    """The 403 for a user whose role may not act."""
    return DiscoveryApiError(
        403, "forbidden", f"console user {user.name!r} has the view role; acting needs 'act'"
    )


class ConsoleActions:
    """Cordon and drain Proxies, scale pools and clear cooldowns on behalf of console users."""

    def __init__(
        self,
        client: ObjectApi,
        events: EventSink,
        proxies: ProxyLookup,
        pools: PoolLookup,
        clock: Clock,
        store: LeaseStore,
    ) -> None:
        self._client = client
        self._store = store
        self._events = events
        self._clock = clock
        self._proxies = proxies
        self._pools = pools

    def __repr__(self) -> str:
        return f"<ConsoleActions {self._events!r}>"

    async def cordon(self, user: ConsoleUser, namespace: str, name: str, cordoned: bool) -> None:
        """Set the Proxy's spec.cordoned; 403 for a viewer, 404 for an unknown Proxy."""
        if not user.may_act:
            raise forbidden(user)
        body = self._proxies(namespace, name)
        if body is None:
            raise DiscoveryApiError(404, "unknown_proxy", f"no proxy {namespace}/{name}")
        await self._write(PROXIES.path(namespace, name), {"spec": {"cordoned": cordoned}})
        verb = "cordoned" if cordoned else "uncordoned"
        logger.info("proxy %s/%s %s by console user %s", namespace, name, verb, user.name)
        self._events.record(
            Regarding(f"{GROUP}/{VERSION}", KIND, namespace, name, body["metadata"]["uid"]),
            "Normal",
            "Cordoned" if cordoned else "Uncordoned",
            f"{verb} from the console by {user.name}"
            + (": no new leases" if cordoned else ": leased again when healthy"),
        )

    async def drain(self, user: ConsoleUser, namespace: str, name: str) -> bool:
        """Have the Proxy's pool replace it; False when it drains already (nothing written).

        403 for a viewer, 404 for an unknown Proxy, 400 for one in no pool (nothing
        would replace it: cordon or delete it instead).
        """
        if not user.may_act:
            raise forbidden(user)
        body = self._proxies(namespace, name)
        if body is None:
            raise DiscoveryApiError(404, "unknown_proxy", f"no proxy {namespace}/{name}")
        meta = body["metadata"]
        if not (meta.get("labels") or {}).get(POOL_LABEL):
            raise DiscoveryApiError(
                400, "not_in_pool", "only a pool's Proxy is replaced; cordon or delete this one"
            )
        if (meta.get("annotations") or {}).get(DRAINING_ANNOTATION):
            return False
        since = k8s_time(self._clock.utcnow())
        patch = {"metadata": {"annotations": {DRAINING_ANNOTATION: since}}}
        await self._write(PROXIES.path(namespace, name), patch)
        logger.info("proxy %s/%s drained by console user %s", namespace, name, user.name)
        self._events.record(
            Regarding(f"{GROUP}/{VERSION}", KIND, namespace, name, meta["uid"]),
            "Normal",
            "DrainedFromConsole",
            f"drained from the console by {user.name}: no new leases; its pool replaces it "
            "and deletes it once its leases end",
        )
        return True

    async def scale(self, user: ConsoleUser, namespace: str, name: str, replicas: int) -> None:
        """Set the pool's spec.replicas; 403 for a viewer, 404 for an unknown pool."""
        if not user.may_act:
            raise forbidden(user)
        if not 0 <= replicas <= MAX_REPLICAS:
            raise DiscoveryApiError(
                400, "invalid_request", f"replicas must be within 0..{MAX_REPLICAS}"
            )
        pool = self._pools(namespace, name)
        if pool is None:
            raise DiscoveryApiError(404, "unknown_pool", f"no pool {namespace}/{name}")
        before = pool.replicas
        await self._write(PROXY_POOLS.path(namespace, name), {"spec": {"replicas": replicas}})
        logger.info(
            "pool %s/%s scaled %s -> %d by console user %s",
            namespace,
            name,
            before,
            replicas,
            user.name,
        )
        self._events.record(
            Regarding(f"{GROUP}/{VERSION}", POOL_KIND, namespace, name, pool.uid),
            "Normal",
            "ScaledFromConsole",
            f"replicas {before} -> {replicas}, set from the console by {user.name}",
        )

    async def clear_cooldown(
        self, user: ConsoleUser, namespace: str, name: str, target: str | None
    ) -> bool:
        """End the Proxy's cooldown for `target` (None: its global one) in the lease store.

        False when the pair was not cooling (nothing written, no Event). 403 for a
        viewer, 404 for an unknown Proxy; 503 when the store does not answer.
        """
        if not user.may_act:
            raise forbidden(user)
        body = self._proxies(namespace, name)
        if body is None:
            raise DiscoveryApiError(404, "unknown_proxy", f"no proxy {namespace}/{name}")
        if not await self._store.clear_cooldown(ProxyKey(f"{namespace}/{name}"), target):
            return False
        site = "every site" if target is None else target
        logger.info(
            "cooldown of proxy %s/%s for %s cleared by console user %s",
            namespace,
            name,
            site,
            user.name,
        )
        self._events.record(
            Regarding(f"{GROUP}/{VERSION}", KIND, namespace, name, body["metadata"]["uid"]),
            "Normal",
            "CooldownCleared",
            f"cooldown for {site} cleared from the console by {user.name}: leased again at once",
        )
        return True

    async def _write(self, path: str, patch: JsonObject) -> None:
        try:
            await self._client.patch(path, patch)
        except NotFoundError:
            raise DiscoveryApiError(404, "not_found", "the object is gone") from None
        except KubeApiError as error:
            if error.status in (400, 422):
                raise DiscoveryApiError(400, "invalid_request", error.message) from None
            raise
