"""The instance poll deletes stopped VMs of live Proxies once, and asks once for vanished ones."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.gc.plan import LiveProxy, StackRecord
from egress_proxies.gc.watch_plan import WatchPlan, plan_watch
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryListing,
    PartialFailure,
    TaggedInstance,
)

pytestmark = pytest.mark.unit

GCP = ProviderName.GCP
CREATED = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
VM_A = InstanceId("zones/us-central1-a/instances/proxy-aaaa")
VM_B = InstanceId("zones/us-central1-a/instances/proxy-bbbb")
PROXIES = [LiveProxy("crawl.a", "uid-a"), LiveProxy("crawl.b", "uid-b")]
STACKS = [
    StackRecord("crawl.a", "uid-a", GCP, VM_A),
    StackRecord("crawl.b", "uid-b", GCP, VM_B),
]


def vm(instance_id: InstanceId, uid: str, state: InstanceState) -> TaggedInstance:
    return TaggedInstance(GCP, instance_id, uid, CREATED, state)


def listing(*instances: TaggedInstance, partial: bool = False) -> InventoryListing:
    failures = (PartialFailure("zones/asia-east1-c", "unreachable"),) if partial else ()
    return InventoryListing(GCP, instances, failures)


RUNNING_A = vm(VM_A, "uid-a", InstanceState.RUNNING)
RUNNING_B = vm(VM_B, "uid-b", InstanceState.RUNNING)


def test_running_instances_need_nothing() -> None:
    assert plan_watch(PROXIES, STACKS, listing(RUNNING_A, RUNNING_B)) == WatchPlan()


def test_a_stopped_instance_of_a_live_proxy_is_deleted_once() -> None:
    stopped = vm(VM_A, "uid-a", InstanceState.STOPPED)

    first = plan_watch(PROXIES, STACKS, listing(stopped, RUNNING_B))
    second = plan_watch(PROXIES, STACKS, listing(stopped, RUNNING_B), deleting=first.deleting)

    assert first.delete == (stopped,)
    assert first.reconcile == ()
    assert first.deleting == {VM_A}
    assert second.delete == ()
    assert second.deleting == {VM_A}


def test_a_vanished_instance_is_reconciled_once_until_it_is_listed_again() -> None:
    first = plan_watch(PROXIES, STACKS, listing(RUNNING_B), deleting={VM_A})
    second = plan_watch(PROXIES, STACKS, listing(RUNNING_B), asked=first.asked)
    back = plan_watch(PROXIES, STACKS, listing(RUNNING_A, RUNNING_B), asked=second.asked)
    gone_again = plan_watch(PROXIES, STACKS, listing(RUNNING_B), asked=back.asked)

    assert first.reconcile == ("crawl.a",)
    assert first.deleting == frozenset()
    assert second.reconcile == ()
    assert back.asked == frozenset()
    assert gone_again.reconcile == ("crawl.a",)


def test_an_incomplete_listing_asks_nothing_but_still_deletes_what_it_lists_stopped() -> None:
    stopped_b = vm(VM_B, "uid-b", InstanceState.STOPPED)

    plan = plan_watch(PROXIES, STACKS, listing(stopped_b, partial=True), asked={"crawl.a"})

    assert plan.reconcile == ()
    assert plan.delete == (stopped_b,)
    assert plan.asked == {"crawl.a"}


def test_provisioning_instances_are_left_alone() -> None:
    staging = vm(VM_A, "uid-a", InstanceState.PROVISIONING)
    assert plan_watch(PROXIES, STACKS, listing(staging, RUNNING_B)) == WatchPlan()


def test_only_stacks_of_live_proxies_of_this_provider_with_matching_uids_are_watched() -> None:
    stacks = [
        StackRecord("crawl.gone", "uid-gone", GCP, VM_A),  # its Proxy is gone: the sweep's job
        StackRecord("crawl.pod", "uid-pod", ProviderName.KUBERNETES, "pods/crawl/proxy-x"),
        StackRecord("crawl.new", "uid-new-2", GCP, VM_B),  # Proxy recreated under the same name
        StackRecord("crawl.fresh", "uid-fresh", GCP, None),  # first `up` still running
    ]
    proxies = [
        LiveProxy("crawl.pod", "uid-pod"),
        LiveProxy("crawl.new", "uid-new"),
        LiveProxy("crawl.fresh", "uid-fresh"),
    ]
    stopped_a = vm(VM_A, "uid-gone", InstanceState.STOPPED)

    assert plan_watch(proxies, stacks, listing(stopped_a)) == WatchPlan()


def test_a_stopped_instance_with_another_uid_is_not_deleted() -> None:
    impostor = vm(VM_A, "uid-someone-else", InstanceState.STOPPED)

    plan = plan_watch(PROXIES, STACKS, listing(impostor, RUNNING_B))

    assert plan.delete == ()
