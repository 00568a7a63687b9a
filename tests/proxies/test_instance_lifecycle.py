"""Watched instances in the state machine: ready, starting, stuck, dead, replaced with backoff."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest

from egress_proxies.clock import k8s_time
from egress_proxies.model import (
    INSTANCE_FAILED,
    PROVISIONED,
    Backoff,
    Phase,
    ProxySpec,
    ProxyStatus,
    compute_phase,
    find_condition,
)
from egress_proxies.providers.instance import InstanceHealth, InstanceObservation
from egress_proxies.proxies.backoff import RetryPolicy
from egress_proxies.proxies.reconcile import (
    RECREATING,
    STARTING,
    Action,
    Observed,
    ProxyView,
    after_up,
    decide,
    spec_hash,
)
from egress_proxies.stacks.backends import StackState

pytestmark = pytest.mark.unit

MANAGED: dict[str, Any] = {"provider": "kubernetes", "kubernetes": {}}
NOW = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC)
POLICY = RetryPolicy()


def at(seconds: float) -> datetime.datetime:
    return NOW + datetime.timedelta(seconds=seconds)


def view(status: ProxyStatus | None = None) -> ProxyView:
    spec = ProxySpec.model_validate(MANAGED)
    return ProxyView(
        namespace="crawl",
        name="p1",
        uid="uid-1",
        generation=1,
        spec=spec,
        status=status or ProxyStatus(),
        recorded_hash=spec_hash(spec, None),
    )


def stack() -> StackState:
    outputs = {
        "port": 3128,
        "instanceId": "pods/crawl/proxy-x",
        "specHash": spec_hash(ProxySpec.model_validate(MANAGED), None),
    }
    return StackState(name="crawl.p1", outputs=outputs, pending_operations=0, resource_count=4)


def pod(
    health: InstanceHealth, key: str = "pod-1", since: datetime.datetime = NOW, **kw: Any
) -> Observed:
    seen = InstanceObservation(key, "pods/crawl/proxy-x", health, since=since, **kw)
    return Observed(stack=stack(), watches_instances=True, instance=seen)


def reason(status: ProxyStatus) -> tuple[str, str]:
    condition = find_condition(status.conditions, PROVISIONED)
    assert condition is not None
    return condition.status.value, condition.reason


def test_a_ready_pod_makes_the_proxy_provisioned_at_its_ip() -> None:
    decision = decide(view(), pod(InstanceHealth.READY, ip="127.9.0.7"), NOW)
    assert decision.action == Action.NONE
    assert decision.status.ip == "127.9.0.7"
    assert reason(decision.status) == ("True", "Created")


def test_a_starting_pod_waits_and_looks_again_at_the_ready_deadline() -> None:
    decision = decide(view(), pod(InstanceHealth.STARTING, since=at(-10)), NOW)
    assert decision.action == Action.NONE
    assert reason(decision.status) == ("False", STARTING)
    assert decision.status.ip is None
    assert decision.retry_after == POLICY.ready_timeout.total_seconds() - 10


def test_a_stuck_pod_gets_the_start_timeout_then_fails_with_its_cause() -> None:
    stuck = {"cause": "image x: ErrImagePull: not found"}
    early = decide(view(), pod(InstanceHealth.STUCK, since=at(-5), **stuck), NOW)
    assert reason(early.status) == ("False", STARTING)
    assert "ErrImagePull" in find_condition(early.status.conditions, PROVISIONED).message  # type: ignore[union-attr]
    assert early.retry_after == 55
    late = decide(view(), pod(InstanceHealth.STUCK, since=at(-61), **stuck), NOW)
    assert late.action == Action.NONE
    assert reason(late.status) == ("False", INSTANCE_FAILED)
    # Retried after its backoff: Provisioning, not Failed (that is for what a spec edit fixes).
    assert compute_phase(late.status, deleting=False) == Phase.PROVISIONING
    assert [e.reason for e in late.events] == [INSTANCE_FAILED]
    assert "ErrImagePull" in late.events[0].message


def test_a_dead_pod_is_recorded_once_then_replaced_when_its_backoff_passed() -> None:
    dead = pod(InstanceHealth.DEAD, cause="squid exited with code 1 (Error)")
    first = decide(view(), dead, NOW)
    assert first.action == Action.NONE
    assert first.status.backoff is not None
    assert first.status.backoff.failures == 1 and first.status.backoff.failed_instance == "pod-1"
    assert first.retry_after is not None and 4 <= first.retry_after <= 6
    # Seen again before the retry time: nothing new is counted, no new Event.
    again = decide(view(first.status), dead, at(2))
    assert again.action == Action.NONE and not again.events
    assert again.status.backoff == first.status.backoff
    due = decide(view(first.status), dead, at(10))
    assert due.action == Action.UP and due.refresh
    assert due.replace_instance is not None and due.replace_instance.key == "pod-1"
    assert reason(due.status) == ("False", RECREATING)


def test_each_failure_in_a_row_waits_longer_and_the_count_resets_after_the_window() -> None:
    status = ProxyStatus()
    delays = []
    for round_, key in enumerate(["pod-1", "pod-2", "pod-3", "pod-4"]):
        now = at(round_ * 100)
        decision = decide(view(status), pod(InstanceHealth.DEAD, key=key, cause="x"), now)
        assert decision.retry_after is not None
        delays.append(decision.retry_after)
        status = after_up(view(decision.status), {"port": 3128}, "crawl.p1", now).status
    assert delays == sorted(delays) and delays[-1] > 4 * delays[0]
    assert status.backoff is not None and status.backoff.failures == 4
    after_quiet = decide(view(status), pod(InstanceHealth.DEAD, key="pod-5", cause="x"), at(2000))
    assert after_quiet.status.backoff is not None and after_quiet.status.backoff.failures == 1


def test_a_deleted_pod_is_a_failure_like_a_dead_one() -> None:
    decision = decide(view(), pod(InstanceHealth.GONE, cause="the pod was deleted"), NOW)
    assert reason(decision.status) == ("False", INSTANCE_FAILED)
    assert "deleted" in decision.events[0].message


def test_a_retry_of_the_same_generation_waits_for_its_backoff() -> None:
    backoff = Backoff(
        failures=2, last_failure_time=k8s_time(NOW), next_retry_time=k8s_time(at(20)), generation=1
    )
    waiting = decide(view(ProxyStatus(backoff=backoff)), Observed(), at(5))
    assert waiting.action == Action.NONE and waiting.retry_after == 15
    assert decide(view(ProxyStatus(backoff=backoff)), Observed(), at(21)).action == Action.UP


def test_backoff_delays_grow_jittered_and_capped() -> None:
    policy = RetryPolicy(base=datetime.timedelta(seconds=2), cap=datetime.timedelta(seconds=60))
    delays = [policy.delay(n, "uid") for n in range(1, 10)]
    assert 1.6 <= delays[0] <= 2.4
    assert all(later > earlier for earlier, later in itertools.pairwise(delays[:6]))
    assert max(delays) <= 60
    assert policy.delay(3, "uid") == policy.delay(3, "uid")
    assert policy.delay(3, "uid") != policy.delay(3, "other")
