"""Ready, Reconciling and Stalled summarize a Proxy's conditions: every transition, no I/O."""

from __future__ import annotations

import pytest

from egress_proxies.model import (
    HEALTHY,
    INSTANCE_FAILED,
    PENDING_STATUS,
    PERMANENT_ERROR,
    PROVISIONED,
    READY,
    RECONCILING,
    STALLED,
    Condition,
    ConditionStatus,
    ProxyStatus,
    find_condition,
)
from egress_proxies.proxies import readiness
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.readiness import summarize
from egress_proxies.proxies.reconcile import set_condition

pytestmark = pytest.mark.unit

NOW = "2026-12-04T12:00:00Z"
LATER = "2026-12-04T12:05:00Z"
T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN


def status(
    provisioned: tuple[ConditionStatus, str] | None = None,
    healthy: ConditionStatus | None = None,
    *,
    observed: int | None = 1,
) -> ProxyStatus:
    conditions: list[Condition] = []
    if provisioned is not None:
        conditions = set_condition(
            conditions, PROVISIONED, provisioned[0], reason=provisioned[1], message="m", now=NOW
        )
    if healthy is not None:
        conditions = set_condition(
            conditions, HEALTHY, healthy, reason="Probe", message="probe says so", now=NOW
        )
    return ProxyStatus(observed_generation=observed, conditions=conditions)


def summary_of(
    result: ProxyStatus,
) -> tuple[tuple[str, str], tuple[str, str], tuple[str, str]]:
    found = [find_condition(result.conditions, kind) for kind in (READY, RECONCILING, STALLED)]
    assert all(condition is not None for condition in found)
    ready, reconciling, stalled = ((c.status.value, c.reason) for c in found if c is not None)
    return ready, reconciling, stalled


def summarized(
    current: ProxyStatus, *, deleting: bool = False, draining: bool = False
) -> ProxyStatus:
    return summarize(current, generation=1, deleting=deleting, draining=draining, now=NOW)


@pytest.mark.parametrize(
    ("current", "ready", "reconciling"),
    [
        (status(), ("False", readiness.PROVISIONING), ("True", readiness.PROVISIONING)),
        (
            status((F, machine.PROVISIONING)),
            ("False", readiness.PROVISIONING),
            ("True", machine.PROVISIONING),
        ),
        (
            status((F, machine.STARTING)),
            ("False", readiness.PROVISIONING),
            ("True", machine.STARTING),
        ),
        (
            status((F, machine.QUOTA_EXCEEDED)),
            ("False", readiness.PROVISIONING),
            ("True", machine.QUOTA_EXCEEDED),
        ),
        (
            status((F, machine.REPLACING), T),
            ("False", readiness.PROVISIONING),
            ("True", machine.REPLACING),
        ),
        (
            status((F, INSTANCE_FAILED)),
            ("False", INSTANCE_FAILED),
            ("True", INSTANCE_FAILED),
        ),
        (
            status((T, machine.CREATED)),
            ("False", readiness.AWAITING_HEALTH_CHECK),
            ("True", readiness.AWAITING_HEALTH_CHECK),
        ),
        (
            status((T, machine.CREATED), U),
            ("False", readiness.AWAITING_HEALTH_CHECK),
            ("True", readiness.AWAITING_HEALTH_CHECK),
        ),
        (
            status((T, machine.CREATED), F),
            ("False", readiness.UNHEALTHY),
            ("False", readiness.RECONCILED),
        ),
        (
            status((T, machine.CREATED), T),
            ("True", readiness.AVAILABLE),
            ("False", readiness.RECONCILED),
        ),
        (
            status((T, machine.EXTERNAL_ENDPOINT), T),
            ("True", readiness.AVAILABLE),
            ("False", readiness.RECONCILED),
        ),
    ],
)
def test_ready_and_reconciling_follow_provisioned_and_healthy(
    current: ProxyStatus, ready: tuple[str, str], reconciling: tuple[str, str]
) -> None:
    assert summary_of(summarized(current)) == (
        ready,
        reconciling,
        ("False", readiness.NO_PERMANENT_ERROR),
    )


def test_a_permanent_error_stalls_and_is_not_reconciling() -> None:
    result = summarized(status((F, PERMANENT_ERROR), T))
    assert summary_of(result) == (
        ("False", PERMANENT_ERROR),
        ("False", readiness.RECONCILED),
        ("True", PERMANENT_ERROR),
    )
    stalled = find_condition(result.conditions, STALLED)
    assert stalled is not None and stalled.message == "m"


def test_a_draining_proxy_is_not_ready_even_when_healthy() -> None:
    assert summary_of(summarized(status((T, machine.CREATED), T), draining=True))[0] == (
        "False",
        readiness.DRAINING,
    )


def test_a_proxy_still_provisioning_says_so_while_draining() -> None:
    result = summarized(status((F, machine.PROVISIONING)), draining=True)
    assert summary_of(result)[0] == ("False", readiness.PROVISIONING)


def test_a_deleting_proxy_is_reconciling_and_not_ready() -> None:
    result = summarized(status((T, machine.CREATED), T), deleting=True)
    assert summary_of(result) == (
        ("False", readiness.DELETING),
        ("True", readiness.DELETING),
        ("False", readiness.NO_PERMANENT_ERROR),
    )


def test_each_carries_the_generation_the_reconciler_observed() -> None:
    result = summarize(
        status((T, machine.CREATED), T, observed=3),
        generation=4,
        deleting=False,
        draining=False,
        now=NOW,
    )
    for kind in (READY, RECONCILING, STALLED):
        condition = find_condition(result.conditions, kind)
        assert condition is not None and condition.observed_generation == 3


def test_before_any_observation_they_carry_the_objects_generation() -> None:
    result = summarize(status(observed=None), generation=2, deleting=False, draining=False, now=NOW)
    ready = find_condition(result.conditions, READY)
    assert ready is not None and ready.observed_generation == 2


def test_summarizing_again_changes_nothing() -> None:
    once = summarized(status((T, machine.CREATED), T))
    again = summarize(once, generation=1, deleting=False, draining=False, now=LATER)
    assert again == once


def test_the_transition_time_moves_only_with_the_status() -> None:
    unhealthy = summarized(status((T, machine.CREATED), F))
    recovered = set_condition(
        unhealthy.conditions, HEALTHY, T, reason="Probe", message="ok", now=LATER
    )
    ready = summarize(
        unhealthy.model_copy(update={"conditions": recovered}),
        generation=1,
        deleting=False,
        draining=False,
        now=LATER,
    )
    before = find_condition(unhealthy.conditions, RECONCILING)
    after = find_condition(ready.conditions, RECONCILING)
    assert before is not None and after is not None
    assert after.last_transition_time == NOW  # False before and after
    turned = find_condition(ready.conditions, READY)
    assert turned is not None and turned.last_transition_time == LATER


def test_the_crds_pending_default_is_replaced_and_timed_from_now() -> None:
    pending = ProxyStatus.model_validate(PENDING_STATUS)
    result = summarized(pending)
    ready = find_condition(result.conditions, READY)
    assert ready is not None
    assert (ready.reason, ready.last_transition_time) == (readiness.PROVISIONING, NOW)
    assert [c.type for c in result.conditions] == [READY, RECONCILING, STALLED]


def test_other_conditions_keep_their_place() -> None:
    once = summarized(status((T, machine.CREATED), T))
    assert [c.type for c in once.conditions] == [PROVISIONED, HEALTHY, READY, RECONCILING, STALLED]
    moved = set_condition(
        once.conditions, PROVISIONED, F, reason="Replacing", message="", now=LATER
    )
    assert [c.type for c in moved] == [c.type for c in once.conditions]
