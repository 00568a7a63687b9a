"""The console's parts, put together once per process (the operator or a tier replica).

    console = Console(users, fleet, store, clock, client=client, events=events)
    app = create_app(fleet, console.store, ...)   # the discovery API, observed
    runner = await start_console(console.app(), host, port)

The discovery API must be given `console.store`, the observed store, so the
console sees its grants and reports. Where the process watches pools (the
operator), `register_pool_book(registry, console.pools)` and `console.events`
in place of the event sink fill the Pools view; with a client and an event
sink the console can act. With the Redis lease store, a `RedisTally` over the
same Redis (`open_tally`) shares every replica's notes, so every console (and
its history) shows the same numbers (tally.py).
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from egress_proxies.catalog import ProxyCatalog
from egress_proxies.clock import Clock
from egress_proxies.console.access import ConsoleAuth, ConsoleUsers
from egress_proxies.console.actions import ConsoleActions, ObjectApi
from egress_proxies.console.app import create_console_app
from egress_proxies.console.eventlog import EventLog
from egress_proxies.console.handlers import ConsoleHandlers, ProxyBodies
from egress_proxies.console.history import History
from egress_proxies.console.leasebook import LeaseBook
from egress_proxies.console.observed_store import ObservedLeaseStore
from egress_proxies.console.pools import PoolBook
from egress_proxies.console.sampler import Sampler
from egress_proxies.console.tally import RedisTally
from egress_proxies.events import EventSink
from egress_proxies.leases import LeaseStore


class FleetSource(ProxyBodies, ProxyCatalog, Protocol):
    """What the console reads of the fleet: the bodies and the records (catalog/fleet.py)."""


class Console:
    """The lease book, history, pools, events and actions behind one console app."""

    def __init__(
        self,
        users: ConsoleUsers,
        fleet: FleetSource,
        store: LeaseStore,
        clock: Clock,
        *,
        client: ObjectApi | None = None,
        events: EventSink | None = None,
        history: History | None = None,
        tally: RedisTally | None = None,
    ) -> None:
        self.book = LeaseBook(clock)
        self.tally = tally
        self.store = ObservedLeaseStore(store, self.book, tally)
        self.history = history or History()
        self.pools = PoolBook() if events is not None else None
        self.events = EventLog(events, clock) if events is not None else None
        self.actions = (
            ConsoleActions(client, self.events, fleet.proxy, self.pools.get, clock, self.store)
            if client is not None and self.events is not None and self.pools is not None
            else None
        )
        self.sampler = Sampler(fleet, tally or self.book, self.history, clock, tally)
        self._handlers = ConsoleHandlers(
            ConsoleAuth(users),
            fleet,
            self.store,
            self.book,
            self.history,
            clock,
            self.pools,
            self.events,
            self.actions,
            tally,
        )

    def __repr__(self) -> str:
        return f"<Console {self.book!r} {self.history!r} {self.pools!r}>"

    def app(self) -> web.Application:
        """A new aiohttp application serving this console."""
        return create_console_app(self._handlers, self.sampler, self.tally)
