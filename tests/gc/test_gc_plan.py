"""The GC deletes only provable orphans, destroys stacks of gone Proxies, and spots drift."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.gc.plan import LiveProxy, StackRecord, plan_sweep
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryListing,
    PartialFailure,
    TaggedInstance,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
MIN_AGE = datetime.timedelta(minutes=10)
K8S = ProviderName.KUBERNETES


def instance(uid: str, name: str, age_minutes: float = 60) -> TaggedInstance:
    return TaggedInstance(
        provider=K8S,
        instance_id=InstanceId(f"pods/crawl/{name}"),
        uid_label=uid,
        created_at=NOW - datetime.timedelta(minutes=age_minutes),
        state=InstanceState.RUNNING,
    )


def listing(
    *instances: TaggedInstance, partial: bool = False
) -> dict[ProviderName, InventoryListing]:
    failures = (PartialFailure("zones/x", "timeout"),) if partial else ()
    return {K8S: InventoryListing(K8S, instances, failures)}


def stack(name: str, uid: str, instance_id: str | None = None) -> StackRecord:
    return StackRecord(name=name, uid=uid, provider=K8S, instance_id=instance_id)


def test_an_old_tagged_instance_of_nobody_is_deleted() -> None:
    orphan = instance("gone", "proxy-orphan")
    plan = plan_sweep([], [], listing(orphan), now=NOW, min_age=MIN_AGE)
    assert plan.delete == (orphan,)


def test_a_young_orphan_is_kept_it_may_be_mid_create() -> None:
    young = instance("gone", "proxy-young", age_minutes=2)
    assert plan_sweep([], [], listing(young), now=NOW, min_age=MIN_AGE).delete == ()


def test_instances_of_live_proxies_and_of_stacks_are_kept() -> None:
    live = instance("uid-live", "proxy-live")
    stacked = instance("uid-stack", "proxy-stacked")
    plan = plan_sweep(
        [LiveProxy("crawl.live", "uid-live")],
        [
            stack("crawl.live", "uid-live", "pods/crawl/proxy-live"),
            stack("crawl.other", "uid-stack", "pods/crawl/proxy-stacked"),
        ],
        listing(live, stacked),
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.delete == ()


def test_an_incomplete_listing_deletes_nothing_and_reports_no_drift() -> None:
    orphan = instance("gone", "proxy-orphan")
    plan = plan_sweep(
        [LiveProxy("crawl.live", "uid-live")],
        [stack("crawl.live", "uid-live", "pods/crawl/proxy-missing")],
        listing(orphan, partial=True),
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.delete == () and plan.reconcile == ()


def test_a_stack_first_seen_without_its_proxy_is_kept_its_proxy_may_be_new() -> None:
    # The Proxy was created after the sweep listed Proxies, and its handler
    # created the stack before the sweep read the stacks.
    plan = plan_sweep(
        [LiveProxy("crawl.live", "uid-live")],
        [stack("crawl.live", "uid-live"), stack("crawl.new", "uid-new")],
        listing(),
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.destroy_stacks == ()
    assert plan.orphaned_since == {"crawl.new": NOW}


def test_a_stack_without_its_proxy_for_the_minimum_age_is_destroyed() -> None:
    stacks = [stack("crawl.live", "uid-live"), stack("crawl.dead", "uid-dead")]
    proxies = [LiveProxy("crawl.live", "uid-live")]
    first = plan_sweep(proxies, stacks, listing(), now=NOW, min_age=MIN_AGE)
    almost = plan_sweep(
        proxies,
        stacks,
        listing(),
        now=NOW + MIN_AGE - datetime.timedelta(seconds=1),
        min_age=MIN_AGE,
        orphaned_since=first.orphaned_since,
    )
    assert almost.destroy_stacks == ()
    assert almost.orphaned_since == {"crawl.dead": NOW}
    due = plan_sweep(
        proxies,
        stacks,
        listing(),
        now=NOW + MIN_AGE,
        min_age=MIN_AGE,
        orphaned_since=almost.orphaned_since,
    )
    assert due.destroy_stacks == ("crawl.dead",)


def test_a_stack_whose_proxy_is_back_starts_over() -> None:
    stacks = [stack("crawl.p1", "uid-1")]
    gone = plan_sweep([], stacks, listing(), now=NOW, min_age=MIN_AGE)
    back = plan_sweep(
        [LiveProxy("crawl.p1", "uid-1")],
        stacks,
        listing(),
        now=NOW + MIN_AGE,
        min_age=MIN_AGE,
        orphaned_since=gone.orphaned_since,
    )
    assert back.orphaned_since == {}
    later = NOW + 2 * MIN_AGE
    gone_again = plan_sweep(
        [], stacks, listing(), now=later, min_age=MIN_AGE, orphaned_since=back.orphaned_since
    )
    assert gone_again.destroy_stacks == ()
    assert gone_again.orphaned_since == {"crawl.p1": later}


def test_a_live_proxy_whose_instance_vanished_is_reconciled() -> None:
    plan = plan_sweep(
        [LiveProxy("crawl.live", "uid-live")],
        [stack("crawl.live", "uid-live", "pods/crawl/proxy-live")],
        listing(),
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.reconcile == ("crawl.live",)


def test_a_provider_without_a_listing_contributes_no_drift() -> None:
    plan = plan_sweep(
        [LiveProxy("crawl.live", "uid-live")],
        [stack("crawl.live", "uid-live", "pods/crawl/proxy-live")],
        {},
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.reconcile == ()


def test_a_shard_leaves_stacks_recording_another_shard_alone() -> None:
    theirs = StackRecord("crawl.theirs", "uid-t", K8S, "pods/crawl/t", shard="b")
    mine = StackRecord("crawl.mine", "uid-m", K8S, "pods/crawl/m", shard="a")
    legacy = stack("crawl.legacy", "uid-l")
    plan = plan_sweep([], [theirs, mine, legacy], listing(), now=NOW, min_age=MIN_AGE, shard="a")
    assert set(plan.orphaned_since) == {"crawl.mine", "crawl.legacy"}
    unsharded = plan_sweep([], [theirs, mine, legacy], listing(), now=NOW, min_age=MIN_AGE)
    assert set(unsharded.orphaned_since) == {"crawl.legacy"}


def test_a_proxy_of_another_shard_protects_its_instances_but_is_not_reconciled() -> None:
    moving = LiveProxy("crawl.moving", "uid-moving", owned=False)
    relabelled = instance("uid-moving", "proxy-moving")
    plan = plan_sweep(
        [moving],
        [stack("crawl.moving", "uid-moving", "pods/crawl/proxy-moving-old")],
        listing(relabelled),
        now=NOW,
        min_age=MIN_AGE,
    )
    assert plan.delete == ()
    assert plan.destroy_stacks == ()
    assert plan.reconcile == ()
