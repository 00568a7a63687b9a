"""What the operator sees of one running instance, reduced to what the state machine acts on.

A provider that can watch its instances (the Kubernetes provider watches
its pods) turns each change into an `InstanceObservation`; the reconcile
state machine decides from it whether the Proxy is Ready, still starting,
or needs its instance replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

# The creation time of an instance that does not say (long ago: its deadlines have passed).
UNKNOWN_CREATION = datetime(1970, 1, 1, tzinfo=UTC)


class InstanceHealth(StrEnum):
    """An instance's state as far as serving traffic goes."""

    STARTING = "Starting"  # not ready yet, nothing wrong seen
    READY = "Ready"  # serving on `ip`
    STUCK = "Stuck"  # cannot start on its own (image pull, config, crash loop, unschedulable)
    DEAD = "Dead"  # ended for good (failed, evicted, being deleted)
    GONE = "Gone"  # deleted


@dataclass(frozen=True)
class InstanceObservation:
    """One instance as last seen: `key` names this incarnation (a pod's UID)."""

    key: str
    instance_id: str
    health: InstanceHealth
    ip: str | None = None
    cause: str = ""
    since: datetime = UNKNOWN_CREATION  # when this incarnation was created

    @property
    def signature(self) -> str:
        """A short value that changes whenever the state machine's view of it changes."""
        return f"{self.key[:8]}/{self.health.value}/{self.ip or '-'}"
