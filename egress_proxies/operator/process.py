"""The operator process: its components, built from the settings, run beside kopf until stopped."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import types
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import kopf
from aiohttp import web
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyKey
from egress_proxies.catalog.feed import PROXIES_WATCH, fleet_watches
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.catalog.sinks import keep_all
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.console import (
    Console,
    ConsoleTokenDirectory,
    open_tally,
    register_pool_book,
    start_console,
)
from egress_proxies.discovery import create_app, start
from egress_proxies.discovery.token_files import TokenDirectory
from egress_proxies.events import EventRecorder
from egress_proxies.gc.sweeper import Sweeper, always_sweep, list_live_proxies
from egress_proxies.gc.watcher import InstanceWatcher
from egress_proxies.health import HealthEngine, HttpProber
from egress_proxies.kube import Credentials, KubeClient
from egress_proxies.leases import StoreUnavailableError, redact_url
from egress_proxies.model import GROUP
from egress_proxies.operator.adapters import TracedProber
from egress_proxies.operator.backend_watch import BackendWatch
from egress_proxies.operator.factories import (
    gce_inventory,
    programs,
    retry_policy,
    stack_runner,
)
from egress_proxies.operator.login import register_login
from egress_proxies.operator.peering import (
    CachedGate,
    Peering,
    peer_identity,
    register_lifetime,
)
from egress_proxies.operator.shard import ShardError, bind_state_dir
from egress_proxies.operator.stale_locks import StaleLockSweeper
from egress_proxies.operator.state_dir import StateDirClaim
from egress_proxies.operator.takeover import Takeover
from egress_proxies.pools import DemandBook, PoolComponents, PoolController, register_pools
from egress_proxies.providers.gcp_adoption import adoptable
from egress_proxies.providers.inventory import Inventory
from egress_proxies.providers.kubernetes import KubernetesInventory
from egress_proxies.proxies.components import Components, event_poster
from egress_proxies.proxies.handlers import register
from egress_proxies.proxies.health_status import HealthStatusPump
from egress_proxies.proxies.instances import InstanceCache
from egress_proxies.proxies.requeue import Requeue
from egress_proxies.proxies.sharding import Shard
from egress_proxies.proxies.standby import never_paused
from egress_proxies.proxies.status import StatusWriter
from egress_proxies.proxies.wakeup import Bell, Reason
from egress_proxies.settings import RunSettings
from egress_proxies.stacks.errors import classify
from egress_proxies.telemetry.memory import HeapTrimmer
from egress_proxies.telemetry.metrics import MeteredInventory, OperatorMetrics, serve_metrics
from egress_proxies.telemetry.pool_metrics import PoolMetrics
from egress_proxies.telemetry.tracing import Spans, TracedInventory

logger = logging.getLogger(__name__)

# Who posts the Events (reportingComponent; `kubectl describe` shows "egress-proxies").
EVENT_COMPONENT = f"{GROUP}/egress-proxies"
# How often the lease gauges are refreshed from the store (memory is read at each scrape).
LEASE_COUNTS_INTERVAL = 5.0
HEALTH_WORKERS = 64  # probes in flight at once
# In a pod Prometheus scrapes the pod's address: bind them all.
METRICS_HOST = "0.0.0.0"  # noqa: S104
_NO_VARIABLES: Mapping[str, str] = types.MappingProxyType({})


class Operator:
    """Owns the components and runs kopf beside them until stopped."""

    def __init__(
        self,
        settings: RunSettings,
        *,
        passphrase: str,
        shard: Shard | None = None,
        pulumi_root: Path | None = None,
        environment: Mapping[str, str] = _NO_VARIABLES,
        clock: Clock | None = None,
    ) -> None:
        """Build every component; nothing runs or connects until `run`.

        `shard` is the one `factories.shard_of(settings)` gives; `environment`
        gives the peer identity (`POD_ID`) and the providers' `PATH`.
        """
        self.settings = settings
        self.shard = shard
        self.clock = clock or SystemClock()
        self.credentials = Credentials.load(settings.kubeconfig)
        self.client = KubeClient(self.credentials)
        self.bell = Bell(self.client, self.clock)
        self.fleet = Fleet()
        self.watches = fleet_watches(
            self.client,
            self.fleet,
            self.clock,
            namespaces=settings.namespaces,
            selects=shard.owns if shard else keep_all,
            cloud_init=True,
        )
        self.metrics_registry = CollectorRegistry()
        self.leases = settings.open_store(self.clock)
        self.metrics = OperatorMetrics(
            self.metrics_registry, proxies=self.fleet.proxies, leases=self.leases
        )
        self.spans = Spans(trace_probes=settings.trace_health_probes)
        self.trimmer = HeapTrimmer(self.clock)
        self.failed = False
        self.claim = StateDirClaim.acquire(settings.state_dir)
        try:
            bind_state_dir(settings.state_dir, shard)
        except ShardError:
            self.claim.release()
            raise
        self.identity = peer_identity(environment, self.claim.peer_identity())
        peering = None if settings.standalone else settings.peering
        self.events = EventRecorder(
            self.client, self.clock, component=EVENT_COMPONENT, instance=self.identity
        )
        self.writer = StatusWriter(self.client, self.events, self.clock)
        self.peering = (
            Peering(
                self.client,
                shard.peering(peering) if shard else peering,
                settings.priority,
                self.identity,
                tuple(settings.namespaces),
                self.clock,
                by_arrival=settings.priority_by_start,
                lifetime=settings.peering_lifetime,
            )
            if peering
            else None
        )
        # Why this replica is not the one at work (asked before every status write and
        # handler; read at most every few seconds), or None.
        self.standby = (
            CachedGate(self.peering.sweep_blocker, clock=self.clock)
            if self.peering
            else never_paused
        )
        # Paused by peering, the pump holds health reports instead of writing them.
        self.health_pump = HealthStatusPump(
            self.fleet, self.writer, gate=self.standby, clock=self.clock
        )
        self.runner = stack_runner(settings, passphrase, pulumi_root, environment, self.clock)
        self.backend_watch = BackendWatch(self.runner.backend, self.clock)
        self.gce = (
            gce_inventory(settings.gcp_project, shard, self.clock) if settings.gcp_project else None
        )
        inventories: list[Inventory] = [
            TracedInventory(MeteredInventory(inventory, self.metrics.providers), self.spans)
            for inventory in (
                KubernetesInventory(
                    self.client, tuple(settings.namespaces), shard.name if shard else None
                ),
                self.gce,
            )
            if inventory is not None
        ]
        self.sweeper = Sweeper(
            self.client,
            self.runner,
            inventories,
            self.bell.recreate,
            namespaces=tuple(settings.namespaces),
            allow_namespaced=settings.gc_allow_namespaced,
            interval=datetime.timedelta(seconds=settings.gc_interval),
            min_age=datetime.timedelta(seconds=settings.gc_min_age),
            metrics=self.metrics.gc,
            stack_metrics=self.metrics.stacks,
            spans=self.spans,
            gate=self.peering.sweep_blocker if self.peering else always_sweep,
            shard=shard.name if shard else None,
            selector=shard.selector if shard else None,
            clock=self.clock,
        )
        self.gce_watcher = (
            InstanceWatcher(
                functools.partial(list_live_proxies, self.client, tuple(settings.namespaces)),
                self.runner.backend,
                inventories[-1],
                self.bell.recreate,
                interval=datetime.timedelta(seconds=settings.gce_watch_interval),
                gate=self.peering.sweep_blocker if self.peering else always_sweep,
                clock=self.clock,
            )
            if self.gce
            else None
        )
        self.registry = kopf.OperatorRegistry()
        self.requeue = Requeue(self.bell.ringer(Reason.RETRY), self.clock)
        self.components = Components(
            client=self.client,
            runner=self.runner,
            writer=self.writer,
            fleet=self.fleet,
            programs=programs(),
            classify=classify,
            on_proxy_gone=self._proxy_gone,
            spans=self.spans,
            stack_metrics=self.metrics.stacks,
            instances=InstanceCache(),
            requeue=self.requeue,
            policy=retry_policy(settings),
            clock=self.clock,
            post_event=event_poster(self.events),
            adopt=functools.partial(adoptable, self.gce) if self.gce else None,
            shard=shard,
            squid_image=settings.squid_image,
            proxy_discovery_url=settings.proxy_discovery_url,
            standby=self.standby,
        )
        self.stale_locks, self.takeover = self._replica_loops(settings)
        register_login(self.registry, self.credentials)
        register_lifetime(self.registry, settings.peering_lifetime)
        register(self.registry, self.components)
        self.demand = DemandBook(self.clock)
        self.pools = PoolController(
            PoolComponents(
                client=self.client,
                members=self.fleet,
                lease_counts=self.leases.pair_counts,
                demand=self.demand,
                max_lease_seconds=float(settings.lease_max_ttl),
                metrics=PoolMetrics(self.metrics_registry),
                clock=self.clock,
                synced=functools.partial(self.watches.synced, PROXIES_WATCH),
                watched_version=functools.partial(self.watches.version, PROXIES_WATCH),
                standby=self.standby,
            )
        )
        # The console (when on) sees what the discovery API grants and the Events posted.
        self.console = (
            Console(
                ConsoleTokenDirectory(settings.console_tokens_dir, self.clock),
                self.fleet,
                self.leases,
                self.clock,
                client=self.client,
                events=self.events,
                tally=open_tally(
                    settings.lease_store,
                    prefix=settings.lease_store_prefix,
                    timeout=settings.lease_store_timeout,
                    clock=self.clock,
                ),
            )
            if settings.console_tokens_dir
            else None
        )
        self.served_leases = self.console.store if self.console else self.leases
        pool_events = self.console.events if self.console and self.console.events else self.events
        register_pools(
            self.registry, self.pools, pool_events, owns=shard.owns if shard else lambda _: True
        )
        if self.console is not None and self.console.pools is not None:
            register_pool_book(self.registry, self.console.pools)

    def _replica_loops(
        self, settings: RunSettings
    ) -> tuple[StaleLockSweeper | None, Takeover | None]:
        """What only several replicas need: clearing the locks of those gone, and taking over."""
        # Locks of other replicas proved gone: by their pods (this one runs in a pod), or by
        # their keep-alives (peers on a backend given by URL, which other hosts may share).
        peers = self.peering.peers if self.peering and settings.state_backend else None
        stale_locks = (
            StaleLockSweeper(
                self.runner.backend,
                self.client,
                self.peering.sweep_blocker if self.peering else always_sweep,
                self.clock,
                namespace=settings.pod_namespace,
                peers=peers,
            )
            if settings.pod_namespace or peers
            else None
        )
        takeover = (
            Takeover(
                self.peering,
                self.fleet,
                functools.partial(self.watches.synced, PROXIES_WATCH),
                self.bell.ringer(Reason.TAKEOVER),
                self.writer.reread_written,
                self.clock,
            )
            if self.peering
            else None
        )
        return stale_locks, takeover

    def __repr__(self) -> str:
        peering = self.peering or "standalone"
        shard = f" {self.shard!r}" if self.shard else ""
        return (
            f"<Operator{shard} {self.runner!r} {self.fleet!r} {self.watches!r} "
            f"{self.writer!r} {peering!r}>"
        )

    async def _proxy_gone(self, key: ProxyKey) -> None:
        await self.served_leases.forget_proxy(key)

    async def run(self, stop: asyncio.Event) -> None:
        """Run kopf, the health engine and the status pump until `stop` is set.

        Raises PeeringError when the peering object is missing and cannot be
        created (before anything starts), or cannot be joined (before kopf starts).
        """
        if self.peering is not None:
            await self.peering.ensure()
        stop_flag: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def relay_stop() -> None:
            await stop.wait()
            if not stop_flag.done():
                stop_flag.set_result(None)

        tokens_dir = self.settings.discovery_tokens_dir
        tokens = TokenDirectory(tokens_dir, self.clock) if tokens_dir else None
        app = create_app(
            self.fleet,
            self.served_leases,
            tokens or frozenset,
            token_names=tokens.names if tokens else None,
            metrics=self.metrics.leases,
            demand=self.demand,
            allow_no_auth=self.settings.discovery_allow_no_auth,
            middlewares=self.spans.server_middlewares(),
            synced=self.watches.synced,
            blocked=lambda: self.backend_watch.problem,
        )
        discovery = await start(app, self.settings.discovery_host, self.settings.discovery_port)
        logger.info(
            "discovery API on %s:%d, leases in %s",
            self.settings.discovery_host,
            self.settings.discovery_port,
            redact_url(self.settings.lease_store),
        )
        servers = [discovery]
        if self.console is not None:
            host, port = self.settings.console_host, self.settings.console_port
            servers.append(await start_console(self.console.app(), host, port))
            logger.info("fleet console on %s:%d", host, port)
        if self.settings.metrics_port:
            servers.append(
                await serve_metrics(self.metrics_registry, METRICS_HOST, self.settings.metrics_port)
            )
            logger.info("metrics on %s:%d", METRICS_HOST, self.settings.metrics_port)
        async with HttpProber() as prober:
            engine = HealthEngine(
                self.fleet,
                self.health_pump.offer,
                TracedProber(prober, self.spans),
                self.clock,
                self.metrics.probes,
                workers=HEALTH_WORKERS,
                synced=self.watches.synced,
            )
            background = [
                asyncio.create_task(relay_stop(), name="stop relay"),
                asyncio.create_task(self.watches.run(), name="fleet watches"),
                asyncio.create_task(engine.run(), name="health engine"),
                asyncio.create_task(self.health_pump.run(), name="health status pump"),
                asyncio.create_task(self.events.run(), name="event recorder"),
                asyncio.create_task(self.sweeper.run(), name="orphan GC"),
                asyncio.create_task(self.backend_watch.run(), name="state backend watch"),
                asyncio.create_task(self._refresh_lease_counts(), name="lease counts"),
                asyncio.create_task(self.trimmer.run(), name="heap trimmer"),
            ]
            background += [
                asyncio.create_task(loop, name=name) for name, loop in self._optional_loops()
            ]
            for task in background[1:]:
                task.add_done_callback(lambda done: self._component_ended(done, stop))
            # Created before kopf starts, so kopf leaves it alone when it stops.
            draining = asyncio.create_task(
                _close_at_stop(stop, servers), name="HTTP servers' close at stop"
            )
            try:
                if self.peering is not None:
                    # Seen by every peer before this replica's kopf takes its first look.
                    await self.peering.join()
                    logger.info(
                        "peering %r as %s (priority %d)",
                        self.peering.name,
                        self.identity,
                        self.peering.priority,
                    )
                await self._run_kopf(stop_flag)
            finally:
                # Producers first (kopf has stopped): then nothing uses what closes next.
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                if stop.is_set():
                    await draining
                else:  # kopf ended on its own
                    draining.cancel()
                    await asyncio.gather(draining, return_exceptions=True)
                    await _close_servers(servers)
                await self._close()

    def _optional_loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """The background loops only some configurations run, by name."""
        loops: list[tuple[str, Coroutine[Any, Any, None]]] = []
        if self.gce_watcher is not None:
            loops.append(("GCE watch", self.gce_watcher.run()))
        if self.stale_locks is not None:
            loops.append(("stale stack locks", self.stale_locks.run()))
        if self.takeover is not None:
            loops.append(("takeover", self.takeover.run()))
        return loops

    async def _refresh_lease_counts(self) -> None:
        """Read the store's totals for the gauges (a scrape cannot await a Redis call)."""
        while True:
            try:
                await self.leases.counts()
            except StoreUnavailableError as error:
                logger.warning("lease counts not refreshed: %s", error)
            await self.clock.sleep(LEASE_COUNTS_INTERVAL)

    def _component_ended(self, task: asyncio.Task[None], stop: asyncio.Event) -> None:
        """A component that runs forever ended: say so loudly and stop the whole operator.

        Half an operator (say, no health engine) would keep answering and
        never make a Proxy Ready again; exiting lets the Deployment restart it.
        """
        if task.cancelled() or stop.is_set():
            return
        self.failed = True
        logger.error(
            "%s stopped unexpectedly; stopping the operator",
            task.get_name(),
            exc_info=task.exception(),
        )
        stop.set()

    async def _run_kopf(self, stop_flag: asyncio.Future[None]) -> None:
        try:
            await kopf.operator(
                registry=self.registry,
                clusterwide=not self.settings.namespaces,
                namespaces=list(self.settings.namespaces),
                standalone=self.peering is None,
                peering_name=self.peering.name if self.peering else None,
                priority=self.peering.priority if self.peering else self.settings.priority,
                # kopf types this as its NewType `Identity`, a str it does not export.
                identity=self.identity,  # type: ignore[arg-type]
                stop_flag=stop_flag,
                liveness_endpoint=(
                    f"http://0.0.0.0:{self.settings.liveness_port}/healthz"
                    if self.settings.liveness_port
                    else None
                ),
            )
        finally:
            await self.requeue.close()  # it touches Proxies through the client

    async def _close(self) -> None:
        """Close what the components used, once none of them runs; the state dir goes last."""
        await self.leases.close()
        await self.client.close()
        if self.gce is not None:
            await self.gce.close()
        await self.runner.close()
        self.claim.release()


async def _close_at_stop(stop: asyncio.Event, servers: list[web.AppRunner]) -> None:
    """Close the HTTP servers as soon as the operator is told to stop.

    Once kopf's own tasks have stopped, kopf cancels every task created after it
    started that has not ended within 5 s: that includes each kept-alive
    connection's task of these servers, so a lease granted just then lost its
    answer (the lease held a proxy until its TTL, and the crawler never knew its
    id). Closed at once instead, the servers take no new connection, finish the
    requests in flight and close idle connections while kopf is stopping.
    """
    await stop.wait()
    await _close_servers(servers)


async def _close_servers(servers: list[web.AppRunner]) -> None:
    for server in servers:
        await server.cleanup()
