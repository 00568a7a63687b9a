"""What a console user with the `act` role may do: each an ordinary Kubernetes write and an Event.

    cordon / uncordon a Proxy   merge-patch spec.cordoned (what `kubectl patch` would do)
    scale a ProxyPool           merge-patch spec.replicas

The Event on the object names the console user, so `kubectl describe` shows
who did it. The object is read first, so an unknown one is a 404 and nothing
is written; a write the API server refuses (a pool's CEL bounds) is a 400
with its message.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from egress_proxies.console.access import ConsoleUser
from egress_proxies.discovery.errors import DiscoveryApiError
from egress_proxies.events import EventSink, Regarding
from egress_proxies.kube import KubeApiError, NotFoundError
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.model import GROUP, KIND, VERSION
from egress_proxies.pool_model import POOL_KIND

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]
MAX_REPLICAS = 1000  # the CRD's bound on spec.replicas


class ObjectApi(Protocol):
    """The API calls the actions make."""

    async def get(self, path: str) -> JsonObject:
        """Read the object at `path`."""
        ...

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """Merge-patch the object at `path`."""
        ...


def forbidden(user: ConsoleUser) -> DiscoveryApiError:
    """The 403 for a user whose role may not act."""
    return DiscoveryApiError(
        403, "forbidden", f"console user {user.name!r} has the view role; acting needs 'act'"
    )


class ConsoleActions:
    """Cordon Proxies and scale pools on behalf of console users."""

    def __init__(self, client: ObjectApi, events: EventSink) -> None:
        self._client = client
        self._events = events

    def __repr__(self) -> str:
        return f"<ConsoleActions {self._events!r}>"

    async def cordon(self, user: ConsoleUser, namespace: str, name: str, cordoned: bool) -> None:
        """Set the Proxy's spec.cordoned; 403 for a viewer, 404 for an unknown Proxy."""
        if not user.may_act:
            raise forbidden(user)
        path = PROXIES.path(namespace, name)
        body = await self._read(path, "proxy", namespace, name)
        await self._write(path, {"spec": {"cordoned": cordoned}})
        verb = "cordoned" if cordoned else "uncordoned"
        logger.info("proxy %s/%s %s by console user %s", namespace, name, verb, user.name)
        self._events.record(
            _regarding(f"{GROUP}/{VERSION}", KIND, body),
            "Normal",
            "Cordoned" if cordoned else "Uncordoned",
            f"{verb} from the console by {user.name}"
            + (": no new leases" if cordoned else ": leased again when healthy"),
        )

    async def scale(self, user: ConsoleUser, namespace: str, name: str, replicas: int) -> None:
        """Set the pool's spec.replicas; 403 for a viewer, 404 for an unknown pool."""
        if not user.may_act:
            raise forbidden(user)
        if not 0 <= replicas <= MAX_REPLICAS:
            raise DiscoveryApiError(
                400, "invalid_request", f"replicas must be within 0..{MAX_REPLICAS}"
            )
        path = PROXY_POOLS.path(namespace, name)
        body = await self._read(path, "pool", namespace, name)
        before = (body.get("spec") or {}).get("replicas", 1)
        await self._write(path, {"spec": {"replicas": replicas}})
        logger.info(
            "pool %s/%s scaled %s -> %d by console user %s",
            namespace,
            name,
            before,
            replicas,
            user.name,
        )
        self._events.record(
            _regarding(f"{GROUP}/{VERSION}", POOL_KIND, body),
            "Normal",
            "ScaledFromConsole",
            f"replicas {before} -> {replicas}, set from the console by {user.name}",
        )

    async def _read(self, path: str, what: str, namespace: str, name: str) -> JsonObject:
        try:
            return await self._client.get(path)
        except NotFoundError:
            raise DiscoveryApiError(
                404, f"unknown_{what}", f"no {what} {namespace}/{name}"
            ) from None

    async def _write(self, path: str, patch: JsonObject) -> None:
        try:
            await self._client.patch(path, patch)
        except NotFoundError:
            raise DiscoveryApiError(404, "not_found", "the object is gone") from None
        except KubeApiError as error:
            if error.status in (400, 422):
                raise DiscoveryApiError(400, "invalid_request", error.message) from None
            raise


def _regarding(api_version: str, kind: str, body: JsonObject) -> Regarding:
    meta = body["metadata"]
    return Regarding(api_version, kind, meta["namespace"], meta["name"], meta["uid"])
