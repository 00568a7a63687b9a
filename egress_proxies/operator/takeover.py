"""The replica that starts work looks again at every Proxy that has not settled.

Whatever another replica did before this one started work lives on in the
Proxies: kopf's handled state, the last status it wrote. Its retry timers
did not: they died with it. kopf's own resume handlers run only for Proxies
a process first sees in a listing, so a replica that saw a Proxy while it
stood by, or a Proxy another replica's kopf marked handled, would sit
unreconciled. So whenever this replica starts work (at start, after a
pause), and whenever a peer joins while it works (a peer with a higher
fixed priority may have worked before it saw this one), it reads the
statuses it wrote again and rings every unsettled Proxy
(`proxies/standby.py`), once its own watch of the Proxies has listed them
all: never on a partial view.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock
from egress_proxies.kube import KubeApiError
from egress_proxies.operator.peering import PAUSE_CHECK_SECONDS, Peer, sweep_blocker
from egress_proxies.proxies.standby import unsettled
from egress_proxies.proxies.wakeup import Ring

logger = logging.getLogger(__name__)


class PeerReader(Protocol):
    """This replica's name and priority, and the keep-alives in its peering objects."""

    identity: str
    priority: int

    async def peers(self) -> list[Peer]:
        """Every keep-alive, live and expired."""
        ...


class Takeover:
    """Rings the unsettled Proxies when this replica starts work, or a peer joins while it works."""

    def __init__(
        self,
        peering: PeerReader,
        fleet: Fleet,
        synced: Callable[[], bool],
        ring: Ring,
        reread_written: Callable[[], Awaitable[None]],
        clock: Clock,
        interval: float = PAUSE_CHECK_SECONDS,
    ) -> None:
        self._peering = peering
        self._fleet = fleet
        self._synced = synced
        self._ring = ring
        self._reread_written = reread_written
        self._clock = clock
        self._interval = interval
        self._at_work = False
        self._peers: frozenset[str] = frozenset()
        self.takeovers = 0
        self.rung = 0

    def __repr__(self) -> str:
        state = "at work" if self._at_work else "standing by"
        return f"<Takeover [{state} | takeovers: {self.takeovers} | rung: {self.rung}]>"

    async def round(self) -> list[tuple[str, str]]:
        """Look at the peering object once; the Proxies rung (none unless work starts now)."""
        try:
            peers = await self._peering.peers()
        except (KubeApiError, OSError) as error:  # TransportError is an OSError
            logger.warning("takeover: reading the peering object failed: %s", error)
            self._at_work = False  # unknown: take over again once it reads
            return []
        now = self._clock.utcnow()
        me = self._peering.identity
        if sweep_blocker(peers, me, self._peering.priority, now) is not None:
            self._at_work = False
            return []
        if not self._synced():
            return []
        live = frozenset(p.identity for p in peers if p.deadline > now and p.identity != me)
        joined = live - self._peers
        self._peers = live
        if self._at_work and not joined:
            return []
        why = "a peer joined: " + ", ".join(sorted(joined)) if self._at_work else "started work"
        self._at_work = True
        await self._reread_written()
        proxies = unsettled(self._fleet.proxies())
        logger.info("%s; looking again at %d unsettled Proxies", why, len(proxies))
        stamp = f"{me} {self._clock.utcnow().isoformat()}"
        for namespace, name in proxies:
            try:
                await self._ring(namespace, name, stamp)
            except (KubeApiError, OSError) as error:
                logger.warning("takeover: ringing %s/%s failed: %s", namespace, name, error)
                self._at_work = False  # again next round
                return []
            self.rung += 1
        self.takeovers += 1
        return proxies

    async def run(self) -> None:
        """A round every interval, until cancelled."""
        while True:
            await self.round()
            await self._clock.sleep(self._interval)
