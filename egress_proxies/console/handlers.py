"""The console's route handlers: who is asking, the five views, one site, and the actions."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import hdrs, web
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock
from egress_proxies.console.access import ConsoleAuth, ConsoleUser
from egress_proxies.console.actions import ConsoleActions, forbidden
from egress_proxies.console.eventlog import EventLog
from egress_proxies.console.history import History
from egress_proxies.console.leasebook import LeaseBook, LeaseFacts
from egress_proxies.console.pools import PoolBook
from egress_proxies.console.tally import RedisTally
from egress_proxies.console.views import (
    cooldowns_view,
    fleet_view,
    leases_view,
    pools_view,
    proxy_facts,
    site_view,
    sites_view,
)
from egress_proxies.discovery.errors import DiscoveryApiError, json_response
from egress_proxies.discovery.parsing import read_body, reject_query
from egress_proxies.leases import LeaseStore

# A Kubernetes object name or namespace (DNS-1123 subdomain, at most 253 characters).
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
MAX_TARGET_LENGTH = 2048


class ProxyBodies(Protocol):
    """The fleet as the watch delivered it (catalog/fleet.py's Fleet)."""

    def proxy_documents(self) -> Mapping[ProxyKey, str]:
        """Every Proxy's body as JSON, by key: a changed body is a new string."""
        ...

    def proxy(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One Proxy's body, if known."""
        ...

    @property
    def version(self) -> int:
        """A number that changes whenever any body does."""
        ...


class CordonRequest(BaseModel):
    """POST .../cordon: whether the Proxy takes no new leases."""

    model_config = ConfigDict(extra="forbid")
    cordoned: StrictBool


class DrainRequest(BaseModel):
    """POST .../drain: an empty object (the action takes no options)."""

    model_config = ConfigDict(extra="forbid")


class ClearCooldownRequest(BaseModel):
    """POST .../clear-cooldown: the site whose cooldown ends (null: the proxy's global one)."""

    model_config = ConfigDict(extra="forbid")
    target: StrictStr | None = Field(max_length=MAX_TARGET_LENGTH)


class ScaleRequest(BaseModel):
    """POST .../scale: the pool's new spec.replicas."""

    model_config = ConfigDict(extra="forbid")
    replicas: StrictInt


Handler = Callable[[web.Request, ConsoleUser], Awaitable[web.StreamResponse]]


class ConsoleHandlers:
    """The console API over the fleet, the lease book, the history, the pools and the actions."""

    def __init__(
        self,
        auth: ConsoleAuth,
        fleet: ProxyBodies,
        store: LeaseStore,
        book: LeaseBook,
        history: History,
        clock: Clock,
        pools: PoolBook | None,
        events: EventLog | None,
        actions: ConsoleActions | None,
        tally: RedisTally | None = None,
    ) -> None:
        self._auth = auth
        # What the views show: every replica's notes where they are shared, else this one's.
        self._shown: LeaseFacts = tally if tally is not None else book
        self._fleet = fleet
        self._store = store
        self._book = book
        self._history = history
        self._clock = clock
        self._pools = pools
        self._events = events
        self._actions = actions
        # The Fleet rows' facts, decoded again only from the bodies that changed.
        self._facts: list[dict[str, Any]] = []
        self._facts_of: dict[ProxyKey, tuple[str, dict[str, Any]]] = {}
        self._facts_version: int | None = None

    def __repr__(self) -> str:
        actions = "acting" if self._actions is not None else "read-only"
        return f"<ConsoleHandlers {actions} {self._auth!r} {self._book!r} {self._history!r}>"

    def authenticated(self, handler: Handler) -> Callable[[web.Request], Awaitable[Any]]:
        """`handler` called with the request's console user (401 without one)."""

        async def with_user(request: web.Request) -> web.StreamResponse:
            user = self._auth.user(request.headers.get(hdrs.AUTHORIZATION))
            return await handler(request, user)

        return with_user

    async def session(self, request: web.Request, user: ConsoleUser) -> web.Response:
        """GET /console/api/v1/session: who you are and what this console can show and do."""
        reject_query(request)
        return _json(
            {
                "user": user.name,
                "role": user.role.value,
                "mayAct": user.may_act and self._actions is not None,
                "pools": self._pools is not None,
                "sampleSeconds": self._history.interval,
                "historySeconds": self._history.span,
            }
        )

    async def fleet(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/fleet: every Proxy."""
        reject_query(request)
        counts = await self._store.active_counts()
        cooling = await self._store.cooldowns()
        now = self._clock.time()
        return _json(
            fleet_view(self._proxy_facts(), counts, cooling, self._shown, self._history, now)
        )

    async def sites(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/sites: every target and the pace the fleet learned for it."""
        reject_query(request)
        return _json(sites_view(self._shown, self._clock.time()))

    async def site(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/sites/{target}: one target and its pace over the last hour."""
        reject_query(request)
        target = request.match_info["target"]
        if len(target) > MAX_TARGET_LENGTH:
            raise DiscoveryApiError(400, "invalid_target", "targets are at most 2048 characters")
        view = site_view(target, self._shown, self._history, self._clock.time())
        if view is None:
            raise DiscoveryApiError(404, "unknown_target", "no report or lease for this target")
        return _json(view)

    async def cooldowns(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/cooldowns: the {proxy, site} pairs cooling now (the store's)."""
        reject_query(request)
        cooling = await self._store.cooldowns()
        return _json(cooldowns_view(cooling, self._clock.time()))

    async def pools(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/pools: every ProxyPool (where this process watches them)."""
        reject_query(request)
        if self._pools is None or self._events is None:
            raise DiscoveryApiError(
                404, "no_pools", "this process does not watch pools; open the operator's console"
            )
        return _json(pools_view(self._pools.pools(), self._events, self._clock.time()))

    async def leases(self, request: web.Request, _: ConsoleUser) -> web.Response:
        """GET /console/api/v1/leases: the live leases this process granted."""
        reject_query(request)
        return _json(leases_view(self._shown, self._clock.time()))

    async def cordon(self, request: web.Request, user: ConsoleUser) -> web.Response:
        """POST /console/api/v1/proxies/{namespace}/{name}/cordon: {"cordoned": bool}."""
        actions = self._acting(request, user)
        namespace, name = _object_of(request)
        wanted = await read_body(request, CordonRequest)
        await actions.cordon(user, namespace, name, wanted.cordoned)
        return _json({"namespace": namespace, "name": name, "cordoned": wanted.cordoned})

    async def drain(self, request: web.Request, user: ConsoleUser) -> web.Response:
        """POST /console/api/v1/proxies/{namespace}/{name}/drain: {} (its pool replaces it)."""
        actions = self._acting(request, user)
        namespace, name = _object_of(request)
        await read_body(request, DrainRequest)
        drained = await actions.drain(user, namespace, name)
        return _json({"namespace": namespace, "name": name, "drained": drained})

    async def scale(self, request: web.Request, user: ConsoleUser) -> web.Response:
        """POST /console/api/v1/pools/{namespace}/{name}/scale: {"replicas": n}."""
        actions = self._acting(request, user)
        namespace, name = _object_of(request)
        wanted = await read_body(request, ScaleRequest)
        await actions.scale(user, namespace, name, wanted.replicas)
        return _json({"namespace": namespace, "name": name, "replicas": wanted.replicas})

    async def clear_cooldown(self, request: web.Request, user: ConsoleUser) -> web.Response:
        """POST /console/api/v1/proxies/{namespace}/{name}/clear-cooldown: {"target": s|null}."""
        actions = self._acting(request, user)
        namespace, name = _object_of(request)
        wanted = await read_body(request, ClearCooldownRequest)
        cleared = await actions.clear_cooldown(user, namespace, name, wanted.target)
        return _json(
            {"namespace": namespace, "name": name, "target": wanted.target, "cleared": cleared}
        )

    def _proxy_facts(self) -> list[dict[str, Any]]:
        version = self._fleet.version
        if version == self._facts_version:
            return self._facts
        fresh: dict[ProxyKey, tuple[str, dict[str, Any]]] = {}
        for key, document in self._fleet.proxy_documents().items():
            known = self._facts_of.get(key)
            if known is None or known[0] is not document:
                known = (document, proxy_facts(json.loads(document)))
            fresh[key] = known
        self._facts_of, self._facts_version = fresh, version
        self._facts = [facts for _, facts in fresh.values()]
        return self._facts

    def _acting(self, request: web.Request, user: ConsoleUser) -> ConsoleActions:
        reject_query(request)
        if not user.may_act:
            raise forbidden(user)
        if self._actions is None:
            raise DiscoveryApiError(
                403, "forbidden", "this console is read-only (no actions where it runs)"
            )
        return self._actions


def _object_of(request: web.Request) -> tuple[str, str]:
    parts: Sequence[str] = (request.match_info["namespace"], request.match_info["name"])
    for part in parts:
        if not _OBJECT_NAME.fullmatch(part):
            raise DiscoveryApiError(
                400, "invalid_name", "namespace and name must be Kubernetes object names"
            )
    return parts[0], parts[1]


def _json(body: Mapping[str, Any]) -> web.Response:
    return json_response(json.dumps(body, separators=(",", ":"), allow_nan=False))
