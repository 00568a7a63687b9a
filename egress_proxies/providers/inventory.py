"""What the orphan GC sees of a provider: the instances carrying a Proxy UID, and how to delete one.

Each provider (GCE VMs now, Kubernetes pods later) implements `Inventory`.
A listing is trustworthy for the instances it contains; `partial_failures`
says which parts of the provider could not be read (a zone that did not
answer), so instances there may be missing from the listing. A listing that
fails as a whole raises `InventoryError` and the GC skips that provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NewType, Protocol

from egress_proxies.errors import EgressProxiesError
from egress_proxies.model import ProviderName

InstanceId = NewType("InstanceId", str)
"""A provider-side instance id, the same string the stack exports as `instanceId`."""


class InstanceState(StrEnum):
    """An instance's lifecycle, reduced to what the reconciler acts on."""

    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    STOPPED = "Stopped"


@dataclass(frozen=True)
class TaggedInstance:
    """One provider instance carrying a Proxy UID label (`uid_label` is that label's value)."""

    provider: ProviderName
    instance_id: InstanceId
    uid_label: str
    created_at: datetime
    state: InstanceState


@dataclass(frozen=True)
class PartialFailure:
    """A part of the provider the listing could not read, e.g. `zones/us-east1-b`."""

    scope: str
    reason: str


@dataclass(frozen=True)
class InventoryListing:
    """Every tagged instance the provider returned, and the parts it could not read."""

    provider: ProviderName
    instances: tuple[TaggedInstance, ...]
    partial_failures: tuple[PartialFailure, ...] = ()

    @property
    def complete(self) -> bool:
        """True when every part of the provider answered."""
        return not self.partial_failures

    def __repr__(self) -> str:
        failed = ", ".join(failure.scope for failure in self.partial_failures)
        suffix = f" | unreadable: {failed}" if failed else ""
        return f"<InventoryListing {self.provider}: {len(self.instances)} instances{suffix}>"


class InventoryError(EgressProxiesError):
    """Listing or deleting failed as a whole (unreachable API, denied, malformed answer)."""


class Inventory(Protocol):
    """Provider-side instances carrying a Proxy UID: one listing call, deletion by id."""

    @property
    def provider(self) -> ProviderName:
        """The provider this inventory reads."""
        ...

    async def list_tagged(self) -> InventoryListing:
        """Every instance carrying the Proxy UID label; raises InventoryError if unreadable."""
        ...

    async def delete(self, instance_id: InstanceId) -> None:
        """Start deleting an instance; an instance already gone counts as deleted."""
        ...
