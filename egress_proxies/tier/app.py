"""The composition root of `egress-proxies discovery`: reflectors, a lease store, the API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.discovery import DEFAULT_PORT, create_app, start
from egress_proxies.discovery.token_files import TokenDirectory
from egress_proxies.kube import Credentials, KubeClient, KubeConfigError
from egress_proxies.kube.reflector import Reflector
from egress_proxies.kube.resources import PROXIES, SECRETS
from egress_proxies.leases import LeaseLimits, LeaseStore, open_lease_store
from egress_proxies.leases.opening import MEMORY
from egress_proxies.leases.urls import redact_url
from egress_proxies.model import EXTERNAL_CREDENTIALS_LABEL, UID_LABEL
from egress_proxies.telemetry.logs import setup_logging
from egress_proxies.tier.sinks import ProxySink, SecretSink

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TierSettings:
    """Everything `egress-proxies discovery` can be told."""

    lease_store: str
    kubeconfig: Path | None = None
    host: str = "0.0.0.0"  # noqa: S104 - a Service fronts the replicas
    port: int = DEFAULT_PORT
    tokens_dir: Path | None = None
    allow_no_auth: bool = False
    lease_store_prefix: str = "egress-proxies"
    lease_store_timeout: float = 1.0
    limits: LeaseLimits = field(default_factory=LeaseLimits)

    def __repr__(self) -> str:
        # The lease store URL may carry a Redis password.
        fields = ", ".join(
            f"{name}={redact_url(value) if name == 'lease_store' else value!r}"
            for name, value in vars(self).items()
        )
        return f"TierSettings({fields})"


class DiscoveryTier:
    """The fleet reflected from the API server, the shared store, and the API over both."""

    def __init__(
        self,
        settings: TierSettings,
        client: KubeClient,
        store: LeaseStore,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.fleet = Fleet()
        self.store = store
        self.reflectors: Sequence[Reflector] = (
            Reflector(client, PROXIES.path(), ProxySink(self.fleet), clock=self.clock),
            *(
                Reflector(
                    client,
                    SECRETS.path(),
                    SecretSink(self.fleet),
                    label_selector=label,
                    clock=self.clock,
                )
                for label in (UID_LABEL, EXTERNAL_CREDENTIALS_LABEL)
            ),
        )

    def __repr__(self) -> str:
        reflectors = ", ".join(repr(r) for r in self.reflectors)
        return f"<DiscoveryTier {self.fleet!r} {self.store!r} [{reflectors}]>"

    def synced(self) -> bool:
        """Every reflector has listed once (the fleet is whole); /readyz is 503 until then."""
        return all(reflector.synced.is_set() for reflector in self.reflectors)

    async def serve(self, stop: asyncio.Event) -> None:
        """Reflect and serve until `stop` is set."""
        tokens_dir = self.settings.tokens_dir
        app = create_app(
            self.fleet,
            self.store,
            TokenDirectory(tokens_dir, self.clock) if tokens_dir else frozenset,
            allow_no_auth=self.settings.allow_no_auth,
            synced=self.synced,
        )
        tasks = [asyncio.create_task(reflector.run()) for reflector in self.reflectors]
        runner = await start(app, self.settings.host, self.settings.port)
        logger.info("discovery tier on %s:%d", self.settings.host, self.settings.port)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def run_tier(settings: TierSettings) -> int:
    """Run the discovery tier until SIGINT or SIGTERM; the process exit code (2: bad settings)."""
    try:
        setup_logging(os.environ)
    except ValueError as error:
        print(f"egress-proxies: {error}", file=sys.stderr)
        return 2
    clock = SystemClock()
    try:
        store = open_lease_store(
            settings.lease_store,
            prefix=settings.lease_store_prefix,
            timeout=settings.lease_store_timeout,
            limits=settings.limits,
            clock=clock,
        )
    except ValueError as error:
        logger.error("cannot start: --lease-store: %s", error)
        return 2
    try:
        credentials = Credentials.load(settings.kubeconfig)
    except KubeConfigError as error:
        logger.error("cannot start: %s", error)
        return 2
    if settings.lease_store == MEMORY:
        logger.warning(
            "--lease-store memory: this replica's leases are its own; replicas will hand "
            "the same exclusive proxy to several crawlers (use a redis:// URL)"
        )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with KubeClient(credentials) as client:
            try:
                await DiscoveryTier(settings, client, store, clock).serve(stop)
            finally:
                await store.close()

    asyncio.run(main())
    return 0
