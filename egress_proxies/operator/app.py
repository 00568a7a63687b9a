"""The composition root: settings in, components wired, everything run on one event loop."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kopf
from prometheus_client import CollectorRegistry

from egress_proxies import toolchain
from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock, SystemClock, k8s_micro_time
from egress_proxies.discovery import DEFAULT_PORT, create_app, start
from egress_proxies.discovery.token_files import TokenDirectory
from egress_proxies.errors import EgressProxiesError
from egress_proxies.events import EventRecorder
from egress_proxies.gc.sweeper import (
    DEFAULT_INTERVAL,
    DEFAULT_MIN_AGE,
    Sweeper,
    always_sweep,
    list_live_proxies,
)
from egress_proxies.gc.watcher import DEFAULT_WATCH_INTERVAL, InstanceWatcher
from egress_proxies.health import HealthEngine, HttpProber, Prober, ProbeResult
from egress_proxies.kube import Credentials, KubeClient
from egress_proxies.kube.client import annotate
from egress_proxies.kube.resources import PROXIES
from egress_proxies.leases import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    DEFAULT_RATE_LIMIT_WINDOW,
    LeaseLimits,
    LeaseStore,
    PaceLimits,
    StoreUnavailableError,
    open_lease_store,
    redact_url,
)
from egress_proxies.model import DEFAULT_SQUID_IMAGE, GROUP, ProviderName
from egress_proxies.operator.backoff import DEFAULT_POLICY, RetryPolicy
from egress_proxies.operator.handlers import (
    REQUEUE_ANNOTATION,
    Components,
    Program,
    event_poster,
    register,
    touch,
)
from egress_proxies.operator.health_status import HealthStatusPump, never_paused
from egress_proxies.operator.instances import InstanceCache
from egress_proxies.operator.login import register_login
from egress_proxies.operator.peering import (
    DEFAULT_PEERING,
    CachedGate,
    Peering,
    PeeringError,
    peer_identity,
)
from egress_proxies.operator.reconcile import RECONCILE_REQUEST_ANNOTATION
from egress_proxies.operator.requeue import Requeue
from egress_proxies.operator.shard import Shard, ShardError, bind_state_dir
from egress_proxies.operator.state_dir import StateDirClaim
from egress_proxies.operator.status import StatusWriter
from egress_proxies.pools import DemandBook, PoolComponents, PoolController, register_pools
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.providers.gcp_adoption import adoptable
from egress_proxies.providers.inventory import Inventory
from egress_proxies.providers.kubernetes import KubernetesInventory
from egress_proxies.stacks.errors import classify
from egress_proxies.stacks.programs import deferred
from egress_proxies.stacks.runner import RunnerSettings, StackRunner
from egress_proxies.telemetry.logs import setup_logging
from egress_proxies.telemetry.memory import HeapTrimmer, cap_malloc_arenas, snapshots_on_signal
from egress_proxies.telemetry.metrics import MeteredInventory, OperatorMetrics, serve_metrics
from egress_proxies.telemetry.pool_metrics import PoolMetrics
from egress_proxies.telemetry.tracing import Spans, TracedInventory, setup_tracing

logger = logging.getLogger(__name__)

STACK_WORKER_MODULE = "egress_proxies.operator.stack_worker"
# Who posts the Events (reportingComponent; `kubectl describe` shows "egress-proxies").
EVENT_COMPONENT = f"{GROUP}/egress-proxies"


class ConfigurationError(RuntimeError, EgressProxiesError):
    """The operator cannot start with the settings it was given."""


@dataclass(frozen=True)
class OperatorSettings:
    """Everything `egress-proxies run` can be told (flags, or EGRESS_PROXIES_* variables)."""

    state_dir: Path
    kubeconfig: Path | None = None
    namespaces: Sequence[str] = field(default_factory=tuple)
    concurrency: int = 4
    squid_image: str = DEFAULT_SQUID_IMAGE
    stack_worker_idle: float = 30.0  # 0: pulumi operations in the operator's own threads
    stack_worker_operations: int = 200
    passphrase: str | None = None
    pulumi_root: Path | None = None
    liveness_port: int | None = None
    health_workers: int = 64
    gc_interval: datetime.timedelta = DEFAULT_INTERVAL
    gc_min_age: datetime.timedelta = DEFAULT_MIN_AGE
    gc_allow_namespaced: bool = False
    retry: RetryPolicy = DEFAULT_POLICY
    peering: str | None = DEFAULT_PEERING  # None: standalone
    priority: int = 0
    # In a pod the Service reaches the operator on the pod's address: bind them all.
    discovery_host: str = "0.0.0.0"  # noqa: S104
    discovery_port: int = DEFAULT_PORT
    discovery_tokens_dir: Path | None = None
    discovery_allow_no_auth: bool = False
    metrics_host: str = "0.0.0.0"  # noqa: S104
    metrics_port: int | None = 9090
    trace_health_probes: bool = False
    gcp_project: str | None = None  # None: no GCE inventory in the GC, no GCE instance watch
    gce_watch_interval: datetime.timedelta = DEFAULT_WATCH_INTERVAL
    lease_max_ttl: int = DEFAULT_MAX_TTL
    lease_cooldown_window: float = DEFAULT_COOLDOWN_WINDOW
    lease_ban_backoff_cap: float = DEFAULT_BAN_BACKOFF_CAP
    lease_rate_limit_window: float = DEFAULT_RATE_LIMIT_WINDOW
    lease_pace: PaceLimits = field(default_factory=PaceLimits)
    lease_store: str = "memory"  # or a redis://, rediss://, unix:// URL
    shard: Shard | None = None  # None: one operator owns every Proxy it watches
    lease_store_prefix: str = "egress-proxies"
    lease_store_timeout: float = 1.0

    def __repr__(self) -> str:
        # The lease store URL may carry a Redis password.
        fields = ", ".join(
            f"{name}={redact_url(value) if name == 'lease_store' else value!r}"
            for name, value in vars(self).items()
            if name != "passphrase"
        )
        return f"OperatorSettings({fields}, passphrase=<redacted>)"


def passphrase_from_env() -> str | None:
    """The stack passphrase: EGRESS_PROXIES_PASSPHRASE_FILE, then PULUMI_CONFIG_PASSPHRASE."""
    path = os.environ.get("EGRESS_PROXIES_PASSPHRASE_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get("PULUMI_CONFIG_PASSPHRASE")


def default_pulumi_root() -> Path | None:
    """The toolchain cache when it has a pulumi CLI, else None (pulumi from PATH)."""
    override = os.environ.get("EGRESS_PROXIES_PULUMI_ROOT")
    if override:
        return Path(override)
    root = toolchain.cache_dir()
    return root if (root / "bin" / "pulumi").exists() else None


# How often the lease gauges are refreshed from the store (memory is read at each scrape).
LEASE_COUNTS_INTERVAL = 5.0


def lease_limits(settings: OperatorSettings) -> LeaseLimits:
    """The configured lease limits; ConfigurationError for impossible ones."""
    try:
        return LeaseLimits(
            max_ttl=settings.lease_max_ttl,
            cooldown_window=settings.lease_cooldown_window,
            ban_backoff_cap=settings.lease_ban_backoff_cap,
            rate_limit_window=settings.lease_rate_limit_window,
            pace=settings.lease_pace,
        )
    except ValueError as error:
        raise ConfigurationError(
            "lease limits (--lease-max-ttl, --lease-cooldown, --lease-ban-backoff-cap, "
            f"--lease-rate-limit-cooldown): {error}"
        ) from error


def lease_store(settings: OperatorSettings, clock: Clock | None = None) -> LeaseStore:
    """The configured lease store; ConfigurationError for impossible limits or URLs."""
    limits = lease_limits(settings)
    try:
        return open_lease_store(
            settings.lease_store,
            prefix=settings.lease_store_prefix,
            timeout=settings.lease_store_timeout,
            limits=limits,
            clock=clock,
        )
    except ValueError as error:
        raise ConfigurationError(f"--lease-store: {error}") from error


def programs() -> dict[ProviderName, Program]:
    """The inline program of each provider (imported by the process that first runs it)."""
    return {
        ProviderName.KUBERNETES: deferred.squid_pod_program,
        ProviderName.GCP: deferred.gce_vm_program,
    }


def gce_inventory(project: str, shard: Shard | None, clock: Clock) -> GceInventory:
    """The GCE inventory of `project`, with Application Default Credentials.

    google-auth (with `requests` and cryptography) and pulumi-gcp are imported
    only by an operator with a GCP project or a GCE Proxy: about 5 MiB of
    resident memory that an operator of Squid pods never uses.
    """
    from egress_proxies.providers.gcp_auth import application_default_tokens  # noqa: PLC0415

    tokens = application_default_tokens(clock)
    return GceInventory(project, tokens, shard=shard.name if shard else None)


class Operator:
    """Owns the components and runs kopf beside them until stopped."""

    def __init__(self, settings: OperatorSettings, clock: Clock | None = None) -> None:
        if not settings.passphrase:
            raise ConfigurationError(
                "no stack passphrase: set PULUMI_CONFIG_PASSPHRASE or "
                "EGRESS_PROXIES_PASSPHRASE_FILE (keep it: without it the stacks' secrets are lost)"
            )
        self.settings = settings
        self.clock = clock or SystemClock()
        self.credentials = Credentials.load(settings.kubeconfig)
        self.client = KubeClient(self.credentials)
        self.fleet = Fleet()
        self.metrics_registry = CollectorRegistry()
        self.leases = lease_store(settings, self.clock)
        self.metrics = OperatorMetrics(
            self.metrics_registry, proxies=self.fleet.proxies, leases=self.leases
        )
        self.spans = Spans(trace_probes=settings.trace_health_probes)
        self.trimmer = HeapTrimmer(self.clock)
        self.failed = False
        self.claim = StateDirClaim.acquire(settings.state_dir)
        try:
            bind_state_dir(settings.state_dir, settings.shard)
        except ShardError:
            self.claim.release()
            raise
        shard = settings.shard
        self.identity = peer_identity(os.environ, self.claim.peer_identity())
        self.events = EventRecorder(
            self.client, self.clock, component=EVENT_COMPONENT, instance=self.identity
        )
        self.writer = StatusWriter(self.client, self.events, self.clock)
        self.peering = (
            Peering(
                self.client,
                shard.peering(settings.peering) if shard else settings.peering,
                settings.priority,
                self.identity,
                tuple(settings.namespaces),
                self.clock,
            )
            if settings.peering
            else None
        )
        # Paused by peering, the pump holds health reports instead of writing them.
        self.health_pump = HealthStatusPump(
            self.fleet,
            self.writer,
            gate=(
                CachedGate(self.peering.sweep_blocker, clock=self.clock)
                if self.peering
                else never_paused
            ),
            clock=self.clock,
        )
        bin_path = str(toolchain.bin_dir())
        self.runner = StackRunner(
            RunnerSettings(
                state_dir=settings.state_dir,
                passphrase=settings.passphrase,
                concurrency=settings.concurrency,
                pulumi_root=settings.pulumi_root,
                extra_env=_provider_env(settings.kubeconfig, bin_path),
                worker_idle=settings.stack_worker_idle,
                worker_operations=settings.stack_worker_operations,
                worker_module=STACK_WORKER_MODULE,
            ),
            self.clock,
        )
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
            self._request_reconcile,
            namespaces=tuple(settings.namespaces),
            allow_namespaced=settings.gc_allow_namespaced,
            interval=settings.gc_interval,
            min_age=settings.gc_min_age,
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
                self._request_reconcile,
                interval=settings.gce_watch_interval,
                gate=self.peering.sweep_blocker if self.peering else always_sweep,
                clock=self.clock,
            )
            if self.gce
            else None
        )
        self.registry = kopf.OperatorRegistry()
        self.requeue = Requeue(self._touch_requeue, self.clock)
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
            policy=settings.retry,
            clock=self.clock,
            post_event=event_poster(self.events),
            adopt=functools.partial(adoptable, self.gce) if self.gce else None,
            shard=shard,
            squid_image=settings.squid_image,
        )
        register_login(self.registry, self.credentials)
        register(self.registry, self.components)
        self.demand = DemandBook(self.clock)
        self.pools = PoolController(
            PoolComponents(
                client=self.client,
                members=self.fleet,
                lease_counts=self.leases.active_counts,
                demand=self.demand,
                max_lease_seconds=float(settings.lease_max_ttl),
                metrics=PoolMetrics(self.metrics_registry),
                clock=self.clock,
            )
        )
        register_pools(
            self.registry, self.pools, self.events, owns=shard.owns if shard else lambda _: True
        )

    def __repr__(self) -> str:
        peering = self.peering or "standalone"
        shard = f" {self.settings.shard!r}" if self.settings.shard else ""
        return f"<Operator{shard} {self.runner!r} {self.fleet!r} {self.writer!r} {peering!r}>"

    async def _touch_requeue(self, namespace: str, name: str, stamp: str) -> None:
        await touch(self.components, namespace, name, REQUEUE_ANNOTATION, stamp)

    async def _proxy_gone(self, key: ProxyKey) -> None:
        await self.leases.forget_proxy(key)

    async def _request_reconcile(self, namespace: str, name: str) -> None:
        """Ask the handlers (the only stack writers) to run `up` for a Proxy again."""
        stamp = k8s_micro_time(self.clock.utcnow())
        await annotate(
            self.client, PROXIES.path(namespace, name), RECONCILE_REQUEST_ANNOTATION, stamp
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Run kopf, the health engine and the status pump until `stop` is set.

        Raises PeeringError (before anything starts) when the peering object
        is missing and cannot be created.
        """
        if self.peering is not None:
            await self.peering.ensure()
            logger.info("peering %r as %s", self.peering.name, self.identity)
        stop_flag: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def relay_stop() -> None:
            await stop.wait()
            if not stop_flag.done():
                stop_flag.set_result(None)

        tokens_dir = self.settings.discovery_tokens_dir
        app = create_app(
            self.fleet,
            self.leases,
            TokenDirectory(tokens_dir, self.clock) if tokens_dir else frozenset,
            metrics=self.metrics.leases,
            demand=self.demand,
            allow_no_auth=self.settings.discovery_allow_no_auth,
            middlewares=self.spans.server_middlewares(),
        )
        discovery = await start(app, self.settings.discovery_host, self.settings.discovery_port)
        logger.info(
            "discovery API on %s:%d, leases in %s",
            self.settings.discovery_host,
            self.settings.discovery_port,
            redact_url(self.settings.lease_store),
        )
        servers = [discovery]
        if self.settings.metrics_port is not None:
            servers.append(
                await serve_metrics(
                    self.metrics_registry, self.settings.metrics_host, self.settings.metrics_port
                )
            )
            logger.info("metrics on %s:%d", self.settings.metrics_host, self.settings.metrics_port)
        async with HttpProber() as prober:
            engine = HealthEngine(
                self.fleet,
                self.health_pump.offer,
                _TracedProber(prober, self.spans),
                self.clock,
                self.metrics.probes,
                workers=self.settings.health_workers,
            )
            background = [
                asyncio.create_task(relay_stop(), name="stop relay"),
                asyncio.create_task(engine.run(), name="health engine"),
                asyncio.create_task(self.health_pump.run(), name="health status pump"),
                asyncio.create_task(self.events.run(), name="event recorder"),
                asyncio.create_task(self.sweeper.run(), name="orphan GC"),
                asyncio.create_task(self._refresh_lease_counts(), name="lease counts"),
                asyncio.create_task(self.trimmer.run(), name="heap trimmer"),
            ]
            if self.gce_watcher is not None:
                background.append(asyncio.create_task(self.gce_watcher.run(), name="GCE watch"))
            for task in background[1:]:
                task.add_done_callback(lambda done: self._component_ended(done, stop))
            try:
                await self._run_kopf(stop_flag)
            finally:
                # Producers first (kopf has stopped): then nothing uses what closes next.
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                for server in servers:
                    await server.cleanup()
                await self._close()

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
                priority=self.settings.priority,
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


class _TracedProber:
    """A probe span around each probe (no-op unless probe tracing is on)."""

    def __init__(self, prober: Prober, spans: Spans) -> None:
        self._prober = prober
        self._spans = spans

    async def probe(self, record: ProxyRecord) -> ProbeResult:
        with self._spans.probe(record.key):
            return await self._prober.probe(record)


def _provider_env(kubeconfig: Path | None, bin_path: str) -> dict[str, str]:
    env = {"PATH": f"{bin_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig.resolve())
    return env


def run_operator(settings: OperatorSettings) -> int:
    """`egress-proxies run`: the operator in the foreground until SIGINT/SIGTERM."""
    try:
        setup_logging(os.environ)
    except ValueError as error:
        print(f"egress-proxies: {error}", file=sys.stderr)
        return 2
    setup_tracing(os.environ)
    cap_malloc_arenas()  # before the runner's and asyncio's threads allocate
    try:
        operator = Operator(settings)
    except (EgressProxiesError, KeyError, FileNotFoundError, ValueError) as error:
        logger.error("cannot start: %s", error)
        return 2

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        snapshots_on_signal(os.environ, loop)
        try:
            await operator.run(stop)
        except PeeringError as error:
            logger.error("cannot start: %s", error)
            await operator.client.close()
            await operator.runner.close()
            return 2
        return 1 if operator.failed else 0

    return asyncio.run(main())
