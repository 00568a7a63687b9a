"""A Proxy's lifecycle Events are read off its status transitions, in order, and only those."""

from __future__ import annotations

import itertools

import pytest

from egress_proxies.model import (
    HEALTHY,
    PERMANENT_ERROR,
    PROVISIONED,
    ConditionStatus,
    ProxyStatus,
)
from egress_proxies.proxies import lifecycle
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.lifecycle import lifecycle_events
from egress_proxies.proxies.readiness import summarize
from egress_proxies.proxies.reconcile import set_condition

pytestmark = pytest.mark.unit

NOW = "2026-12-04T12:00:00Z"
T, F = ConditionStatus.TRUE, ConditionStatus.FALSE


def with_condition(
    status: ProxyStatus, kind: str, state: ConditionStatus, reason: str, message: str = ""
) -> ProxyStatus:
    conditions = set_condition(
        status.conditions, kind, state, reason=reason, message=message, now=NOW
    )
    return summarize(
        status.model_copy(update={"conditions": conditions}),
        generation=1,
        deleting=False,
        draining=False,
        now=NOW,
    )


def reasons(before: ProxyStatus, after: ProxyStatus) -> list[str]:
    return [event.reason for event in lifecycle_events(before, after)]


def test_a_new_proxy_from_creation_to_healthy() -> None:
    steps = [ProxyStatus()]
    steps.append(with_condition(steps[-1], PROVISIONED, F, machine.PROVISIONING, "creating"))
    steps.append(with_condition(steps[-1], PROVISIONED, F, machine.STARTING, "pod starting"))
    provisioned = with_condition(steps[-1], PROVISIONED, T, machine.CREATED)
    steps.append(provisioned.model_copy(update={"ip": "10.0.0.5", "port": 3128}))
    steps.append(with_condition(steps[-1], HEALTHY, T, "ProbeSucceeded", "204 in 12 ms"))
    seen = [reasons(before, after) for before, after in itertools.pairwise(steps)]
    assert seen == [
        [machine.PROVISIONING],
        [],
        [lifecycle.PROVISIONED_EVENT],
        [lifecycle.HEALTHY_EVENT],
    ]
    (provisioned_event,) = lifecycle_events(steps[2], steps[3])
    assert provisioned_event.message == "serving at 10.0.0.5:3128"


def test_flapping_health_is_one_event_per_transition() -> None:
    healthy = with_condition(ProxyStatus(), PROVISIONED, T, machine.CREATED)
    healthy = with_condition(healthy, HEALTHY, T, "ProbeSucceeded")
    unhealthy = with_condition(healthy, HEALTHY, F, "ProbeFailed", "timed out")
    assert lifecycle_events(healthy, unhealthy) == (
        machine.Event("Warning", lifecycle.UNHEALTHY_EVENT, "timed out"),
    )
    assert reasons(unhealthy, with_condition(unhealthy, HEALTHY, T, "ProbeSucceeded")) == [
        lifecycle.HEALTHY_EVENT
    ]
    assert reasons(unhealthy, with_condition(unhealthy, HEALTHY, F, "ProbeFailed", "503")) == []


def test_a_spec_change_replaces_and_provisions_again() -> None:
    healthy = with_condition(ProxyStatus(), PROVISIONED, T, machine.CREATED)
    replacing = with_condition(healthy, PROVISIONED, F, machine.REPLACING, "replacing the instance")
    assert reasons(healthy, replacing) == [machine.REPLACING]
    assert reasons(replacing, with_condition(replacing, PROVISIONED, T, machine.CREATED)) == [
        lifecycle.PROVISIONED_EVENT
    ]


def test_a_permanent_error_is_a_warning_with_its_cause() -> None:
    started = with_condition(ProxyStatus(), PROVISIONED, F, machine.PROVISIONING)
    failed = with_condition(started, PROVISIONED, F, PERMANENT_ERROR, "spec.gcp is required")
    assert lifecycle_events(started, failed) == (
        machine.Event("Warning", PERMANENT_ERROR, "spec.gcp is required"),
    )


def test_deleting_is_posted_once() -> None:
    healthy = with_condition(ProxyStatus(), PROVISIONED, T, machine.CREATED)
    deleting = summarize(healthy, generation=1, deleting=True, draining=False, now=NOW)
    assert reasons(healthy, deleting) == [lifecycle.DELETING_EVENT]
    destroying = set_condition(
        deleting.conditions, PROVISIONED, F, reason=machine.DELETING, message="", now=NOW
    )
    again = summarize(
        deleting.model_copy(update={"conditions": destroying}),
        generation=1,
        deleting=True,
        draining=False,
        now=NOW,
    )
    assert reasons(deleting, again) == []


def test_a_status_at_rest_posts_nothing() -> None:
    healthy = with_condition(ProxyStatus(), PROVISIONED, T, machine.CREATED)
    healthy = with_condition(healthy, HEALTHY, T, "ProbeSucceeded")
    assert lifecycle_events(healthy, healthy) == ()
