"""Several replicas, one at work: what the Proxy controller does on a replica that is not.

kopf peering is pausing, not election: a replica starts paused, and resumes
at the first look at its peering object in which no live peer outranks it;
a pause stops its watches, not the handlers already running. Joining before
kopf starts (`operator/peering.py`) keeps the replicas of one Deployment
from both resuming, but kopf can still run a handler on a replica that is
not the one at work: one a peer with a higher fixed priority joined while
it worked, one that cannot read its peering object. What kopf records on a
Proxy (its finalizer, the handled state, the last handled spec) is shared
by every replica: a handler run there would make the active one see nothing
left to do. So a handler first asks the same gate as the GC: on a replica
that is not the one at work it raises a retry and records nothing as
handled (said once per Proxy, `Standing`), and the replica at work handles
the Proxy itself.

A replica that starts work (at start, after a pause, when a peer joined
that may have worked before it saw this one) rings every Proxy that has
not settled (`unsettled`): its retry timers, its handled state and its
status writes may all have been another replica's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import kopf

from egress_proxies.clock import Clock
from egress_proxies.model import PERMANENT_ERROR, PROVISIONED, ConditionStatus, find_condition
from egress_proxies.proxies.status import status_of
from egress_proxies.vocabulary import RECONCILE_HANDLED_ANNOTATION, RECONCILE_REQUEST_ANNOTATION

logger = logging.getLogger(__name__)

Gate = Callable[[], Awaitable[str | None]]  # why this replica is not the one at work, or None

# How long a handler waits for the gate to open (a replica just started may not see its own
# keep-alive yet), and then how soon kopf tries it again on this replica.
STANDBY_PATIENCE_SECONDS = 5.0
STANDBY_POLL_SECONDS = 0.5
STANDBY_RETRY_SECONDS = 5
# What a refused handler's retry says (kopf: "... failed temporarily: standing by: ...").
STANDING_BY = "standing by: "


class QuietStandby(logging.Filter):
    """Drops kopf's ERROR line (and so its Event) for a handler refused on a replica not at work.

    `Standing` says it at INFO instead, once per Proxy rather than once per retry.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for kopf's line about a standing-by retry."""
        return f"failed temporarily: {STANDING_BY}" not in record.getMessage()


QUIET_STANDBY = QuietStandby()


async def never_paused() -> str | None:
    """The gate of a standalone operator: it is always the one at work."""
    return None


async def standing_by(gate: Gate, clock: Clock, patience: float) -> str | None:
    """Why this replica must not handle a Proxy now, or None; waits up to `patience` s for None."""
    deadline = clock.monotonic() + patience
    while True:
        reason = await gate()
        if reason is None or clock.monotonic() >= deadline:
            return reason
        await clock.sleep(STANDBY_POLL_SECONDS)


class Standing:
    """Which Proxies this replica refused while standing by: each is said once, at INFO.

    Standing by is the HA layout working as meant, not an error; kopf retries
    a refused handler every few seconds, and only the first refusal is news.
    """

    def __init__(self) -> None:
        self._proxies: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"<Standing [proxies: {len(self._proxies)}]>"

    def refused(self, namespace: str, name: str, reason: str) -> None:
        """A handler of the Proxy was refused for `reason`."""
        if (namespace, name) not in self._proxies:
            self._proxies.add((namespace, name))
            logger.info("%s/%s: standing by: %s", namespace, name, reason)

    def handled(self, namespace: str, name: str) -> None:
        """The Proxy is handled here (or gone): a later refusal is news again."""
        self._proxies.discard((namespace, name))


async def at_work(gate: Gate, clock: Clock, standing: Standing, namespace: str, name: str) -> None:
    """Return on the replica at work; raise a retry, recording nothing as handled, on any other.

    kopf can run a handler on a replica it is about to pause (see above).
    """
    reason = await standing_by(gate, clock, STANDBY_PATIENCE_SECONDS)
    if reason is None:
        standing.handled(namespace, name)
        return
    standing.refused(namespace, name, reason)
    raise kopf.TemporaryError(f"{STANDING_BY}{reason}", delay=STANDBY_RETRY_SECONDS)


def settled(body: Mapping[str, Any]) -> bool:
    """Whether a Proxy needs nothing more from the controller: provisioned (or failed for good)
    for its current spec, not being deleted, no recreate requested."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return False
    annotations = meta.get("annotations") or {}
    request = annotations.get(RECONCILE_REQUEST_ANNOTATION)
    if request and request != annotations.get(RECONCILE_HANDLED_ANNOTATION):
        return False
    provisioned = find_condition(status_of(body).conditions, PROVISIONED)
    if provisioned is None or provisioned.observed_generation != meta.get("generation", 1):
        return False
    return provisioned.status == ConditionStatus.TRUE or provisioned.reason == PERMANENT_ERROR


def unsettled(bodies: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The (namespace, name) of every Proxy that has not settled, in order."""
    return sorted(
        (body["metadata"]["namespace"], body["metadata"]["name"])
        for body in bodies
        if not settled(body)
    )
