"""What one poll of a provider's instances should do for live Proxies (pure: no I/O).

The sweep runs every ten minutes; this poll runs every few seconds, over
one provider, and only for instances that live Proxies' stacks record:

- an instance the provider lists as stopped (GCE: TERMINATED, STOPPED,
  SUSPENDED, ...) is deleted, once: its stack still records it, so an `up`
  would see nothing to do, and a stopped VM serves nothing;
- an instance a complete listing lacks (deleted out of band, or by the rule
  above) gets one reconcile request, so the handlers' `up --refresh`
  recreates it. It is not asked again while it stays missing: kopf retries a
  failed `up` by itself, and the sweep re-asks every interval.

The caller remembers what it deleted and what it asked (`deleting`,
`asked`); the plan says what to remember next, forgetting an instance once
it is listed again (asked) or no longer listed (deleting).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass

from egress_proxies.gc.plan import LiveProxy, StackRecord
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryListing,
    TaggedInstance,
)


@dataclass(frozen=True)
class WatchPlan:
    """One poll's actions, and what to remember for the next poll."""

    delete: tuple[TaggedInstance, ...] = ()
    reconcile: tuple[str, ...] = ()  # stack names
    deleting: frozenset[InstanceId] = frozenset()
    asked: frozenset[str] = frozenset()


def plan_watch(
    proxies: Sequence[LiveProxy],
    stacks: Sequence[StackRecord],
    listing: InventoryListing,
    *,
    deleting: Set[InstanceId] = frozenset(),
    asked: Set[str] = frozenset(),
) -> WatchPlan:
    """Decide one poll from the live Proxies, their stacks and one provider's listing."""
    live = {proxy.stack: proxy.uid for proxy in proxies}
    listed = {instance.instance_id: instance for instance in listing.instances}
    watched = [
        stack
        for stack in stacks
        if stack.provider == listing.provider
        and stack.instance_id
        and stack.name in live
        and stack.uid == live[stack.name]
    ]
    delete = tuple(
        instance
        for stack in watched
        if (instance := listed.get(InstanceId(str(stack.instance_id)))) is not None
        and instance.state is InstanceState.STOPPED
        and instance.uid_label == stack.uid
        and instance.instance_id not in deleting
    )
    missing = {
        stack.name
        for stack in watched
        if listing.complete and InstanceId(str(stack.instance_id)) not in listed
    }
    reconcile = tuple(sorted(missing - set(asked)))
    # Missing from an incomplete listing proves nothing, and being listed in one
    # proves presence: keep remembering what was asked until a complete answer.
    remembered = missing if listing.complete else set(asked) & {stack.name for stack in watched}
    still_deleting = {instance_id for instance_id in deleting if instance_id in listed}
    return WatchPlan(
        delete=delete,
        reconcile=reconcile,
        deleting=frozenset(still_deleting | {instance.instance_id for instance in delete}),
        asked=frozenset(remembered),
    )
