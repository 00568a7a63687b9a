"""What one GC sweep should do, decided from what it read (pure: no I/O).

Three record-keepers must agree: the live Proxies, the stacks on the
backend, and the instances each provider lists by UID label.

- An instance is deleted only when it is provably orphaned: it carries a
  UID label, that UID belongs to no live Proxy (one being deleted still
  counts as live: its finalizer owns the deletion) and to no stack, and it
  is older than the minimum age (it is not mid-create).
- A stack whose Proxy is gone (its finalizer was removed by hand) is
  destroyed and removed once sweeps have seen it without its Proxy for at
  least the minimum age. One sighting proves nothing: a Proxy created
  between the sweep's list of Proxies and its read of the stacks has a stack
  and is not in the list. The plan carries each such stack's first sighting
  to the next sweep (`orphaned_since`); a stack whose Proxy is back drops out.
- A live Proxy whose stack names an instance that its provider's complete
  listing lacks (deleted out of band) is re-reconciled, so `up` recreates it.
  Only a Proxy of this operator's shard: one moving to another shard has
  its instance relabelled by the new owner, out of this shard's listing.

Sharded operators (operator/shard.py) list only their own shard's instances
and skip any stack recording another shard; every Proxy in the cluster,
whoever owns it, still counts as live.

A provider whose listing failed, or is partial, contributes no deletions
and no drift: missing from an incomplete list proves nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import InstanceId, InventoryListing, TaggedInstance


@dataclass(frozen=True)
class LiveProxy:
    """A Proxy that exists (deleting or not); `owned`: this operator's shard selects it."""

    stack: str
    uid: str
    owned: bool = True


@dataclass(frozen=True)
class StackRecord:
    """What a stack's checkpoint says it owns."""

    name: str
    uid: str | None
    provider: ProviderName | None
    instance_id: str | None
    shard: str | None = None


@dataclass(frozen=True)
class SweepPlan:
    """The sweep's actions."""

    delete: tuple[TaggedInstance, ...] = ()
    destroy_stacks: tuple[str, ...] = ()
    reconcile: tuple[str, ...] = field(default=())  # stack names of drifted live Proxies
    # Stacks seen without their Proxy, and since when: hand it to the next sweep.
    orphaned_since: Mapping[str, datetime.datetime] = field(default_factory=dict)


def plan_sweep(
    proxies: Sequence[LiveProxy],
    stacks: Sequence[StackRecord],
    listings: Mapping[ProviderName, InventoryListing],
    *,
    now: datetime.datetime,
    min_age: datetime.timedelta,
    orphaned_since: Mapping[str, datetime.datetime] | None = None,
    shard: str | None = None,
) -> SweepPlan:
    """Decide the sweep from one read of Proxies, stacks and inventories.

    `orphaned_since` is the previous plan's: when each stack was first seen
    without its Proxy. `shard` is this operator's shard (None: unsharded);
    stacks recording another shard are left alone.
    """
    stacks = [stack for stack in stacks if stack.shard in (None, shard)]
    live_uids = {proxy.uid for proxy in proxies}
    live_stacks = {proxy.stack for proxy in proxies}
    owned = {proxy.stack for proxy in proxies if proxy.owned}
    stack_uids = {stack.uid for stack in stacks if stack.uid}
    delete = tuple(
        instance
        for listing in listings.values()
        if listing.complete
        for instance in listing.instances
        if instance.uid_label not in live_uids
        and instance.uid_label not in stack_uids
        and now - instance.created_at >= min_age
    )
    seen = orphaned_since or {}
    orphaned = {
        stack.name: seen.get(stack.name, now) for stack in stacks if stack.name not in live_stacks
    }
    destroy = tuple(name for name, since in orphaned.items() if now - since >= min_age)
    listed: dict[ProviderName, set[InstanceId]] = {
        provider: {instance.instance_id for instance in listing.instances}
        for provider, listing in listings.items()
        if listing.complete
    }
    reconcile = tuple(
        stack.name
        for stack in stacks
        if stack.name in owned
        and stack.provider in listed
        and stack.instance_id
        and stack.instance_id not in listed[stack.provider]
    )
    return SweepPlan(
        delete=delete, destroy_stacks=destroy, reconcile=reconcile, orphaned_since=orphaned
    )
