"""Stack locks left by a replica that died: cleared by the active replica once its pod is gone.

pulumi's DIY locks have no expiry: a replica killed during an operation
leaves the stack locked, and every later operation on it fails. A lock
records the holder's hostname, which in the HA layout is its pod's name.
Each round the active replica lists the lock holders, asks the API server
for each other holder's pod in its own namespace, and clears the locks of
the holders whose pods no longer exist. A holder whose pod exists is
never touched, whatever it is doing; a lock taken on this host is judged
by its pid, as on every backend. The next operation on the stack then
resolves its pending operations as after any crash.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from egress_proxies.clock import Clock
from egress_proxies.gc.sweeper import Gate
from egress_proxies.kube import KubeApiError, KubeClient, NotFoundError
from egress_proxies.kube.resources import PODS
from egress_proxies.stacks.backends import StateBackend

logger = logging.getLogger(__name__)

ROUND_SECONDS = 5.0


class StaleLockSweeper:
    """Clears the stack locks of replicas whose pods are gone, while `gate` allows."""

    def __init__(
        self,
        backend: StateBackend,
        client: KubeClient,
        namespace: str,
        gate: Gate,
        clock: Clock,
        interval: float = ROUND_SECONDS,
    ) -> None:
        self._backend = backend
        self._client = client
        self._namespace = namespace
        self._gate = gate
        self._clock = clock
        self._interval = interval
        self.cleared = 0

    def __repr__(self) -> str:
        return f"<StaleLockSweeper namespace={self._namespace} [cleared: {self.cleared}]>"

    async def gone_hosts(self, holders: set[str]) -> frozenset[str]:
        """The holders (other than this host) whose pods do not exist."""
        gone = set()
        for host in sorted(holders - {socket.gethostname()}):
            try:
                await self._client.get(PODS.path(self._namespace, host))
            except NotFoundError:
                gone.add(host)
        return frozenset(gone)

    async def sweep(self) -> list[str]:
        """One round: the stacks whose locks were cleared."""
        holders = await asyncio.to_thread(self._backend.lock_holders)
        gone = await self.gone_hosts(holders)
        cleared = await asyncio.to_thread(self._backend.clear_stale_locks, gone)
        self.cleared += len(cleared)
        return cleared

    async def round(self) -> list[str]:
        """Sweep if the gate allows (this is the active replica); the stacks cleared."""
        try:
            if await self._gate() is None:
                return await self.sweep()
        except (KubeApiError, OSError) as error:  # BackendUnavailableError is an OSError
            logger.warning("stale stack locks not checked: %s", error)
        return []

    async def run(self) -> None:
        """A round every interval, until cancelled."""
        while True:
            await self.round()
            await self._clock.sleep(self._interval)
