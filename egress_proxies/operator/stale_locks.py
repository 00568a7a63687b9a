"""Stack locks left by a replica that died: cleared by the active replica once it is provably gone.

pulumi's DIY locks have no expiry: a replica killed during an operation
leaves the stack locked, and every later operation on it fails. A lock
records the holder's hostname, pid and time. Each round the active replica
lists the lock holders and clears the locks of those proved gone, by one of
two rules:

- its pod no longer exists: in the HA layout a holder's hostname is its
  pod's name, looked up in the operator's own namespace (a new pod never
  reuses a name, so every lock of that host is stale);
- its peering keep-alive expired and it was the only writer there: every
  operator ever seen on that host (a peer identity names its host, see
  `peering.peer_host`) stopped renewing its keep-alive, and the lock was
  taken before the last of them expired. This covers replicas that run as
  host processes or outside Kubernetes, where there is no pod to look up.

Keep-alives are read every round, on the standby too: kopf deletes an
expired keep-alive moments after it expires, so the replica that takes over
proves a holder gone from what it saw while it stood by. A holder it never
saw is never judged (after its own restart, say); a holder with a live
keep-alive or an existing pod is never touched, whatever it is doing; a lock
taken on this host is judged by its pid, as on every backend. The next
operation on the stack then resolves its pending operations as after any crash.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from egress_proxies.clock import Clock
from egress_proxies.gc.sweeper import Gate
from egress_proxies.kube import KubeApiError, KubeClient, NotFoundError
from egress_proxies.kube.resources import PODS
from egress_proxies.operator.peering import Peer, peer_host
from egress_proxies.stacks.backends import GoneHolders, StateBackend

logger = logging.getLogger(__name__)

ROUND_SECONDS = 5.0

PeerSource = Callable[[], Awaitable[Sequence[Peer]]]


def expired_hosts(
    peers: Iterable[Peer], holders: Iterable[str], now: datetime.datetime
) -> dict[str, datetime.datetime]:
    """The holders whose every known peer has expired, each with the last expiry among them.

    A holder with no known peer is left out: nothing proves it gone.
    """
    deadlines: dict[str, list[datetime.datetime]] = {}
    for peer in peers:
        deadlines.setdefault(peer_host(peer.identity), []).append(peer.deadline)
    return {
        host: max(deadlines[host])
        for host in holders
        if host in deadlines and max(deadlines[host]) <= now
    }


class PeerMemory:
    """Every peer's latest keep-alive seen so far (kopf deletes expired ones soon after)."""

    def __init__(self) -> None:
        self._latest: dict[str, Peer] = {}

    def __repr__(self) -> str:
        return f"<PeerMemory [peers: {len(self._latest)}]>"

    def observe(self, peers: Iterable[Peer]) -> None:
        """Remember each peer's keep-alive, keeping the one that lasts longest."""
        for peer in peers:
            known = self._latest.get(peer.identity)
            if known is None or peer.deadline > known.deadline:
                self._latest[peer.identity] = peer

    def expired(
        self, holders: Iterable[str], now: datetime.datetime
    ) -> Mapping[str, datetime.datetime]:
        """`expired_hosts` over what was seen."""
        return expired_hosts(self._latest.values(), holders, now)

    def forget_expired(self, now: datetime.datetime, keep_hosts: Iterable[str]) -> None:
        """Drop expired peers on hosts that hold no lock any more (nothing left to prove)."""
        keep = set(keep_hosts)
        self._latest = {
            identity: peer
            for identity, peer in self._latest.items()
            if peer.deadline > now or peer_host(identity) in keep
        }


class StaleLockSweeper:
    """Clears the stack locks of replicas proved gone, while `gate` allows.

    `namespace` (the replicas' pods) turns the pod rule on; `peers` (the
    peering objects' keep-alives) the keep-alive rule.
    """

    def __init__(
        self,
        backend: StateBackend,
        client: KubeClient,
        gate: Gate,
        clock: Clock,
        *,
        namespace: str | None = None,
        peers: PeerSource | None = None,
        interval: float = ROUND_SECONDS,
    ) -> None:
        self._backend = backend
        self._client = client
        self._namespace = namespace
        self._peers = peers
        self._gate = gate
        self._clock = clock
        self._interval = interval
        self.memory = PeerMemory()
        self.cleared = 0

    def __repr__(self) -> str:
        pods = f"pods in {self._namespace}" if self._namespace else "no pods"
        peers = repr(self.memory) if self._peers else "no peers"
        return f"<StaleLockSweeper [{pods} | {peers} | cleared: {self.cleared}]>"

    async def gone_pods(self, holders: set[str]) -> frozenset[str]:
        """The holders (other than this host) whose pods do not exist; none without a namespace."""
        if self._namespace is None:
            return frozenset()
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
        now = self._clock.utcnow()
        gone = GoneHolders(
            hosts=await self.gone_pods(holders),
            expired=self.memory.expired(holders - {socket.gethostname()}, now),
        )
        cleared = await asyncio.to_thread(self._backend.clear_stale_locks, gone)
        self.memory.forget_expired(now, keep_hosts=holders)
        self.cleared += len(cleared)
        return cleared

    async def round(self) -> list[str]:
        """Read the keep-alives; sweep if the gate allows (this is the active replica)."""
        try:
            if self._peers is not None:
                self.memory.observe(await self._peers())
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
