"""The composition root of `egress-proxies discovery`: reflectors, a lease store, the API."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from egress_proxies.catalog.feed import fleet_watches
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.console import Console, ConsoleTokenDirectory, open_tally, start_console
from egress_proxies.discovery import create_app, start
from egress_proxies.discovery.token_files import TokenDirectory
from egress_proxies.kube import Credentials, KubeClient, KubeConfigError
from egress_proxies.leases import LeaseStore
from egress_proxies.leases.opening import MEMORY
from egress_proxies.settings import DiscoverySettings, process_environment
from egress_proxies.telemetry.logs import setup_logging

logger = logging.getLogger(__name__)


class DiscoveryTier:
    """The fleet reflected from the API server, the shared store, and the API over both."""

    def __init__(
        self,
        settings: DiscoverySettings,
        client: KubeClient,
        store: LeaseStore,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.settings = settings
        self.fleet = Fleet()
        self.store = store
        self.watches = fleet_watches(client, self.fleet, self.clock)

    def __repr__(self) -> str:
        return f"<DiscoveryTier {self.fleet!r} {self.store!r} {self.watches!r}>"

    def synced(self) -> bool:
        """The fleet is whole (listed, no watch failed since); /readyz is 503 until then."""
        return self.watches.synced()

    async def serve(self, stop: asyncio.Event) -> None:
        """Reflect and serve until `stop` is set."""
        tokens_dir = self.settings.discovery_tokens_dir
        console_dir = self.settings.console_tokens_dir
        console = (
            Console(
                ConsoleTokenDirectory(console_dir, self.clock),
                self.fleet,
                self.store,
                self.clock,
                tally=open_tally(
                    self.settings.lease_store,
                    prefix=self.settings.lease_store_prefix,
                    timeout=self.settings.lease_store_timeout,
                    clock=self.clock,
                ),
            )
            if console_dir
            else None
        )
        tokens = TokenDirectory(tokens_dir, self.clock) if tokens_dir else None
        app = create_app(
            self.fleet,
            console.store if console else self.store,
            tokens or frozenset,
            token_names=tokens.names if tokens else None,
            allow_no_auth=self.settings.discovery_allow_no_auth,
            synced=self.synced,
        )
        tasks = [asyncio.create_task(self.watches.run(), name="fleet watches")]
        host, port = self.settings.discovery_host, self.settings.discovery_port
        runners = [await start(app, host, port)]
        logger.info("discovery tier on %s:%d", host, port)
        if console is not None:
            console_host, console_port = self.settings.console_host, self.settings.console_port
            runners.append(await start_console(console.app(), console_host, console_port))
            logger.info("fleet console (read-only) on %s:%d", console_host, console_port)
        try:
            await stop.wait()
        finally:
            for runner in runners:
                await runner.cleanup()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def run_tier(settings: DiscoverySettings) -> int:
    """Run the discovery tier until SIGINT or SIGTERM; the process exit code (2: bad settings)."""
    try:
        setup_logging(process_environment())
    except ValueError as error:
        print(f"egress-proxies: error: {error}", file=sys.stderr)
        return 2
    clock = SystemClock()
    store = settings.open_store(clock)
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
