"""A fleet console and its discovery API served on loopback, over a fleet the caller shapes.

    with served_console(users) as site:
        site.put(proxy_body("a"))                     # as the Proxy watch would deliver it
        httpx.post(site.discovery + "/v1/leases", ...)  # a crawler, through real HTTP
        browser.get(site.console + "/console/")

Both apps run on one event loop in a thread, so synchronous callers (a
browser driver, httpx) can use them; `site.call` runs a function on that
loop. The real Fleet, lease store, console and discovery app run; what
stands in for the API server is `FleetApi`: the console's writes (a merge
patch) land in the Fleet as the watch would deliver them
(tests/console/test_console_live.py runs the console against the real one).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.console import (
    Console,
    ConsoleUsers,
    History,
    RedisTally,
    bound_port,
    start_console,
)
from egress_proxies.discovery import create_app
from egress_proxies.events import Regarding
from egress_proxies.kube import NotFoundError
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.leases import LeaseLimits, LeaseStore, MemoryLeaseStore
from egress_proxies.vocabulary import POOL_LABEL

Result = TypeVar("Result")
_uids = itertools.count(1)


def proxy_body(
    name: str,
    namespace: str = "crawl",
    *,
    pool: str | None = None,
    phase: str = "Ready",
    healthy: bool | None = True,
    latency_millis: int | None = 12,
    address: tuple[str, int] | None = ("127.0.0.1", 3128),
    attributes: Mapping[str, str] | None = None,
    max_leases: int = 1,
    created: str = "2026-12-06T06:00:00Z",
) -> dict[str, Any]:
    """A Proxy body as the watch delivers it: Ready and Healthy unless told otherwise."""
    conditions = []
    if healthy is not None:
        verdict = "True" if healthy else "False"
        for kind in ("Healthy", "Ready"):
            conditions.append(
                {
                    "type": kind,
                    "status": verdict,
                    "reason": "ProbeSucceeded" if healthy else "ProbeFailed",
                    "lastTransitionTime": created,
                }
            )
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if address is not None:
        status |= {"ip": address[0], "port": address[1]}
    if latency_millis is not None:
        status["latencyMillis"] = latency_millis
    meta: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "uid": f"uid-{name}-{next(_uids)}",
        "creationTimestamp": created,
    }
    if pool is not None:
        meta["labels"] = {POOL_LABEL: pool}
    return {
        "metadata": meta,
        "spec": {
            "provider": "kubernetes",
            "kubernetes": {},
            "attributes": dict(attributes or {}),
            "maxLeases": max_leases,
        },
        "status": status,
    }


def pool_body(name: str, namespace: str = "crawl", replicas: int = 2) -> dict[str, Any]:
    """A ProxyPool body with its status counts."""
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-pool-{name}"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"provider": "kubernetes", "kubernetes": {}}},
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "leasedReplicas": 0},
    }


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(value)


@dataclass
class FleetApi:
    """The console's merge patches, applied to the Fleet and the pools as the watch would."""

    fleet: Fleet
    pools: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    on_pool: Callable[[dict[str, Any]], None] = lambda _: None

    def _find(self, path: str) -> dict[str, Any]:
        for (namespace, name), body in self.pools.items():
            if path == PROXY_POOLS.path(namespace, name):
                return body
        for proxy in self.fleet.proxies():
            meta = proxy["metadata"]
            if path == PROXIES.path(meta["namespace"], meta["name"]):
                return dict(proxy)
        raise NotFoundError(404, "NotFound", f"{path} not found")

    async def patch(
        self, path: str, body: dict[str, Any], *, strategic: bool = False
    ) -> dict[str, Any]:
        """Merge `body` into the object, which the fleet (or the pool book) then sees."""
        target = self._find(path)
        _merge(target, body)
        self.patches.append((path, body))
        if target.get("spec", {}).get("template") is not None:
            self.on_pool(target)
        else:
            self.fleet.put_proxy(target)
        return target


@dataclass
class RecordingEvents:
    """An EventSink that keeps what it was told."""

    events: list[tuple[Regarding, str, str, str]] = field(default_factory=list)

    def record(self, regarding: Regarding, type_: str, reason: str, message: str) -> None:
        """Keep one occurrence."""
        self.events.append((regarding, type_, reason, message))


@dataclass
class ConsoleSite:
    """The served console: its URLs and what is behind them."""

    console: str
    discovery: str
    fleet: Fleet
    store: LeaseStore
    objects: FleetApi
    events: RecordingEvents
    parts: Console
    loop: asyncio.AbstractEventLoop

    def call(self, function: Callable[[], Result]) -> Result:
        """Run `function` on the servers' loop and return its result."""

        async def run() -> Result:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    def put(self, body: Mapping[str, Any]) -> None:
        """Deliver a Proxy body, as the watch would."""
        self.call(lambda: self.fleet.put_proxy(body))

    def put_pool(self, body: dict[str, Any]) -> None:
        """Deliver a ProxyPool body, as the watch would."""
        assert self.parts.pools is not None
        pools = self.parts.pools
        meta = body["metadata"]
        self.objects.pools[(meta["namespace"], meta["name"])] = body
        self.call(lambda: pools.put(body))


@contextmanager
def served_console(
    users: ConsoleUsers,
    crawler_tokens: frozenset[str],
    *,
    history: History | None = None,
    clock: Clock | None = None,
    store: LeaseStore | None = None,
    crawler_names: Mapping[str, str] | None = None,
    tally: RedisTally | None = None,
) -> Iterator[ConsoleSite]:
    """The console and the discovery API on loopback ports, in a thread (see the module).

    `crawler_names`: each crawler token's name (its Secret key), by token. `tally`:
    the fleet's report counts in Redis (closed with the servers too).

    `store`: the lease store (a new MemoryLeaseStore by default); it is closed with
    the servers, on their loop.
    """
    clock = clock or SystemClock()
    fleet = Fleet()
    store = store or MemoryLeaseStore(LeaseLimits(), clock=clock)
    events = RecordingEvents()
    objects = FleetApi(fleet)
    parts = Console(
        users, fleet, store, clock, client=objects, events=events, history=history, tally=tally
    )
    pools = parts.pools
    assert pools is not None
    objects.on_pool = pools.put
    ready: queue.Queue[tuple[int, int] | BaseException] = queue.Queue()
    loop = asyncio.new_event_loop()
    stop = loop.create_future()

    async def serve() -> None:
        runners: list[web.AppRunner] = []
        try:
            discovery = web.AppRunner(
                create_app(
                    fleet,
                    parts.store,
                    lambda: crawler_tokens,
                    token_names=None if crawler_names is None else lambda: crawler_names,
                )
            )
            await discovery.setup()
            runners.append(discovery)
            await web.TCPSite(discovery, "127.0.0.1", 0).start()
            runners.append(await start_console(parts.app(), "127.0.0.1", 0))
            ready.put((bound_port(runners[1]), bound_port(runners[0])))
            await stop
        except BaseException as error:
            ready.put(error)
        finally:
            for runner in reversed(runners):
                await runner.cleanup()
            await store.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        started = ready.get(timeout=20)
        if isinstance(started, BaseException):
            raise started
        console_port, discovery_port = started
        yield ConsoleSite(
            console=f"http://127.0.0.1:{console_port}",
            discovery=f"http://127.0.0.1:{discovery_port}",
            fleet=fleet,
            store=store,
            objects=objects,
            events=events,
            parts=parts,
            loop=loop,
        )
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(timeout=20)
        loop.close()
