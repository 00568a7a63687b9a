"""Several operators, one at work: kopf peering, and who among the peers may sweep.

kopf keeps a keep-alive per running operator in the status of one peering
object (ClusterKopfPeering for an operator that watches every namespace, a
KopfPeering per namespace for one limited to some) and pauses its handlers
while another live peer has a higher or the same priority. The orphan GC runs
beside kopf, not inside it, so it reads the same object and applies the same
rule: it sweeps only while no other live peer has a priority at least its own.
The health status pump, also beside kopf, holds its writes by the same rule
(read at most every few seconds: it asks before every write). The object must
exist for kopf to unpause, so the operator creates it when missing.

kopf resumes an operator at its first look at the peering object when no
live peer listed there outranks it. Two replicas started together could
both look before the other had written a keep-alive, and both work until
their next look; a pause does not stop the handlers already running. So a
replica joins before kopf starts (`Peering.join`): it writes its own
keep-alive first, and, ranked by arrival, takes a priority below every live
peer in the same write, made conditional on the resourceVersion it read.
The API server orders those writes: the replica whose write lands later
read the object after the earlier one's, so it ranks below it, and its
kopf's first look (after its own write) already lists it. No replica ever
outranks a peer that was there first, and none works before it can see
every peer that outranks it.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from egress_proxies.clock import Clock, SystemClock, parse_k8s_time
from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube import ConflictError, KubeApiError, KubeClient, NotFoundError
from egress_proxies.kube.resources import CLUSTER_KOPF_PEERINGS, KOPF_PEERINGS

PAUSE_CHECK_SECONDS = 2.0
# How often joining reads the peering object again after another peer wrote it in between.
JOIN_ATTEMPTS = 20


class PeeringError(RuntimeError, EgressProxiesError):
    """The peering object is missing and cannot be created."""


@dataclass(frozen=True)
class Peer:
    """One operator's keep-alive, as kopf writes it."""

    identity: str
    priority: int
    deadline: datetime.datetime


def peer_identity(env: Mapping[str, str], default: str) -> str:
    """This operator's peer name: POD_ID (the pod name in deploy/), else `default`.

    A restarted operator must come back under the same name: kopf would
    otherwise see its killed predecessor's keep-alive as a live peer with the
    same priority and pause until it expires (60 s).
    """
    return env.get("POD_ID") or default


def peer_host(identity: str) -> str:
    """The host a peer runs on, read from its identity: `user@host/...` (a host process, or
    kopf's own default), else the identity itself (POD_ID, the pod's name: its hostname)."""
    if "@" not in identity:
        return identity
    return identity.split("@", 1)[1].split("/", 1)[0]


def priority_by_start(started: datetime.datetime) -> int:
    """A peering priority that ranks operators by start time: the earlier one is higher.

    Replicas of one Deployment share their flags, and kopf pauses every peer
    of equal priority; ranked by start (in milliseconds), the replica that
    runs keeps working, a newer one waits as the standby, and a replica
    whose container restarts comes back below the one that took over.
    """
    return -int(started.timestamp() * 1000)


def arrival_priority(peers: Sequence[Peer], identity: str, now: datetime.datetime) -> int:
    """The priority of a replica joining now: by start, and below every live peer already there.

    Its own entry is left out: a replica that restarts under the same name
    (its pod's) finds its predecessor's keep-alive still live after a SIGKILL.
    """
    live = [peer.priority for peer in peers if peer.deadline > now and peer.identity != identity]
    return min([priority_by_start(now), *(priority - 1 for priority in live)])


def register_lifetime(registry: kopf.OperatorRegistry, seconds: int) -> None:
    """Give this operator's keep-alives a lifetime of `seconds` (kopf renews them 5-10 s sooner).

    A standby resumes when the active's keep-alive expires: at most `seconds`
    after the active stopped renewing it (a SIGKILL, a lost node). A clean
    shutdown removes the keep-alive, and the standby resumes at once.
    """

    @kopf.on.startup(registry=registry)
    def peering_lifetime(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.lifetime = seconds


def peering_paths(name: str, namespaces: Sequence[str]) -> list[str]:
    """The peering objects an operator takes part in: one cluster-wide, or one per namespace."""
    if not namespaces:
        return [CLUSTER_KOPF_PEERINGS.path(name=name)]
    return [KOPF_PEERINGS.path(ns, name) for ns in namespaces]


def parse_peers(status: Mapping[str, Any]) -> list[Peer]:
    """The peers in a peering object's status; an entry that does not parse is ignored."""
    peers = []
    for identity, entry in status.items():
        if not isinstance(entry, Mapping):
            continue
        try:
            lastseen = parse_k8s_time(str(entry["lastseen"]))
            lifetime = datetime.timedelta(seconds=int(entry.get("lifetime", 60)))
            priority = int(entry.get("priority", 0))
        except (KeyError, TypeError, ValueError):
            continue
        peers.append(Peer(identity=identity, priority=priority, deadline=lastseen + lifetime))
    return peers


def sweep_blocker(
    peers: Sequence[Peer], identity: str, priority: int, now: datetime.datetime
) -> str | None:
    """Why this operator must not sweep now, or None when it is the one peer at work.

    kopf's rule: a live peer with a higher priority pauses us; one with the
    same priority pauses both. Until our own keep-alive is visible we don't
    know that kopf is running, so we wait too.
    """
    live = [peer for peer in peers if peer.deadline > now]
    if not any(peer.identity == identity for peer in live):
        return f"this operator ({identity}) has no live keep-alive in the peering object yet"
    rivals = sorted(
        (peer for peer in live if peer.identity != identity and peer.priority >= priority),
        key=lambda peer: (-peer.priority, peer.identity),
    )
    if not rivals:
        return None
    rival = rivals[0]
    if rival.priority > priority:
        return f"{rival.identity} has a higher priority ({rival.priority} > {priority}) and sweeps"
    return (
        f"{rival.identity} runs with the same priority ({priority}): kopf pauses both "
        "until one stops or gets another --priority"
    )


class Peering:
    """This operator's place among its peers, read from the peering objects."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        priority: int,
        identity: str,
        namespaces: Sequence[str],
        clock: Clock | None = None,
        *,
        by_arrival: bool = False,
        lifetime: int = 60,
    ) -> None:
        """`priority` is kept as given, or, `by_arrival`, decided when joining (`join`)."""
        self.name = name
        self.priority = priority
        self.identity = identity
        self.by_arrival = by_arrival
        self.lifetime = lifetime
        self._client = client
        self._clock = clock or SystemClock()
        self._paths = peering_paths(name, namespaces)

    def __repr__(self) -> str:
        return f"<Peering {self.name} [me: {self.identity} | priority: {self.priority}]>"

    async def ensure(self) -> None:
        """Create the peering objects that don't exist yet (kopf stays paused without them)."""
        for path in self._paths:
            try:
                await self._client.get(path)
                continue
            except NotFoundError:
                pass
            except KubeApiError as error:
                raise PeeringError(f"cannot read {path}: {error}") from error
            await self._create(path)

    async def _create(self, path: str) -> None:
        collection, name = path.rsplit("/", 1)
        kind = "ClusterKopfPeering" if "/clusterkopfpeerings" in collection else "KopfPeering"
        body = {
            "apiVersion": KOPF_PEERINGS.api_version,
            "kind": kind,
            "metadata": {"name": name},
        }
        try:
            await self._client.create(collection, body)
        except ConflictError:
            return
        except KubeApiError as error:
            hint = (
                "install crds/kopf-peering.yaml (deploy/ includes it)"
                if isinstance(error, NotFoundError)
                else "grant create on kopf.dev peerings (deploy/base/rbac.yaml) or create it"
            )
            raise PeeringError(
                f"the peering object {path} is missing and cannot be created ({error}): "
                f"{hint}, or run with --standalone"
            ) from error

    async def join(self) -> None:
        """Write this operator's keep-alive, as kopf does, before kopf starts.

        By arrival, the priority is decided in the same write to the first
        peering object: below every live peer read there, the write
        conditional on the resourceVersion read (another peer's write in
        between means reading again). Raises PeeringError when the objects
        cannot be read or written.
        """
        first, *rest = self._paths
        for _ in range(JOIN_ATTEMPTS):
            try:
                body = await self._client.get(first)
                if self.by_arrival:
                    peers = parse_peers(body.get("status") or {})
                    self.priority = arrival_priority(peers, self.identity, self._clock.utcnow())
                version = body["metadata"]["resourceVersion"]
                await self._client.patch(first, self._keepalive(version))
                break
            except ConflictError:
                continue
            except (KubeApiError, OSError) as error:  # TransportError is an OSError
                raise PeeringError(f"cannot join the peering object {first}: {error}") from error
        else:
            raise PeeringError(
                f"cannot join the peering object {first}: "
                f"it changed under each of {JOIN_ATTEMPTS} writes"
            )
        for path in rest:
            try:
                await self._client.patch(path, self._keepalive())
            except (KubeApiError, OSError) as error:
                raise PeeringError(f"cannot join the peering object {path}: {error}") from error

    def _keepalive(self, version: str | None = None) -> dict[str, Any]:
        """A patch with this operator's keep-alive, in kopf's form; conditional on `version`."""
        entry = {
            "priority": self.priority,
            "lifetime": self.lifetime,
            "lastseen": self._clock.utcnow().isoformat(),
        }
        patch: dict[str, Any] = {"status": {self.identity: entry}}
        if version is not None:
            patch["metadata"] = {"resourceVersion": version}
        return patch

    async def peers(self) -> list[Peer]:
        """Every keep-alive in this operator's peering objects (live and expired)."""
        peers: list[Peer] = []
        for path in self._paths:
            body = await self._client.get(path)
            peers += parse_peers(body.get("status") or {})
        return peers

    async def sweep_blocker(self) -> str | None:
        """Why the GC must not sweep now (also when a peering object can't be read), or None."""
        now = self._clock.utcnow()
        for path in self._paths:
            try:
                body = await self._client.get(path)
            except (KubeApiError, OSError) as error:  # TransportError is an OSError
                return f"reading the peering object {path} failed: {error}"
            reason = sweep_blocker(
                parse_peers(body.get("status") or {}), self.identity, self.priority, now
            )
            if reason:
                return reason
        return None


class CachedGate:
    """A gate (why not to act now, or None) asked at most once per `max_age` seconds.

    The status pump asks before every write; a burst of reports then costs one
    read of the peering objects, and a pause is noticed within `max_age`.
    """

    def __init__(
        self,
        gate: Callable[[], Awaitable[str | None]],
        max_age: float = PAUSE_CHECK_SECONDS,
        clock: Clock | None = None,
    ) -> None:
        self._gate = gate
        self._max_age = max_age
        self._clock = clock or SystemClock()
        self._answer: str | None = None
        self._asked_at: float | None = None

    def __repr__(self) -> str:
        state = "unasked" if self._asked_at is None else (self._answer or "open")
        return f"<CachedGate [max age: {self._max_age:g} s | {state}]>"

    async def __call__(self) -> str | None:
        """The gate's answer, asked again when the last one is `max_age` old."""
        now = self._clock.monotonic()
        if self._asked_at is None or now - self._asked_at >= self._max_age:
            self._answer = await self._gate()
            self._asked_at = now
        return self._answer
