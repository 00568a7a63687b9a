"""A pool's Ready, Reconciling and Stalled beside Available/Progressing/ScalingLimited."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from egress_proxies.model import (
    PENDING_STATUS,
    READY,
    RECONCILING,
    STALLED,
    Condition,
    ConditionStatus,
)
from egress_proxies.pool_model import (
    AVAILABLE,
    PROGRESSING,
    SCALING_LIMITED,
    ProxyPoolSpec,
    ProxyPoolStatus,
)
from egress_proxies.pools import conditions as pool
from egress_proxies.pools.conditions import Round, pool_conditions
from egress_proxies.pools.plan import Member, Plan, plan

pytestmark = pytest.mark.unit

HASH = "h1"
NOW = "2026-12-04T12:00:00Z"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
LATER = "2026-12-04T12:01:00Z"


def spec(replicas: int, **extra: Any) -> ProxyPoolSpec:
    return ProxyPoolSpec.model_validate(
        {"replicas": replicas, "template": {"spec": {"provider": "kubernetes"}}, **extra}
    )


def member(name: str, *, ready: bool = True, template_hash: str = HASH, **extra: Any) -> Member:
    return Member(name, EPOCH, ready, 0, 0, template_hash, **extra)


def decided(
    replicas: int, members: list[Member], previous: list[Condition] | None = None, **extra: Any
) -> dict[str, tuple[str, str]]:
    wanted = spec(replicas)
    step = plan(wanted, HASH, members, EPOCH + datetime.timedelta(seconds=1000), 3600.0)
    found = pool_conditions(
        Round(wanted, members, step, HASH, extra.get("limited"), 7), previous or [], NOW
    )
    assert all(c.observed_generation == 7 for c in found)
    return {c.type: (c.status.value, c.reason) for c in found}


def test_a_pool_of_ready_current_members_is_ready() -> None:
    found = decided(2, [member("a"), member("b")])
    assert found[READY] == ("True", pool.REPLICAS_READY)
    assert found[RECONCILING] == ("False", pool.RECONCILED)
    assert found[STALLED] == ("False", pool.NO_PERMANENT_ERROR)
    assert [kind for kind in found] == [
        AVAILABLE,
        PROGRESSING,
        SCALING_LIMITED,
        READY,
        RECONCILING,
        STALLED,
    ]


def test_scaled_up_it_reconciles_until_the_new_members_are_ready() -> None:
    found = decided(4, [member("a"), member("b"), member("c", ready=False)])
    assert found[READY] == ("False", pool.REPLICAS_NOT_READY)
    assert found[RECONCILING] == ("True", pool.REPLICAS_NOT_READY)
    assert found[AVAILABLE][0] == "False"  # 2 Ready, below the floor of 4 - maxUnavailable 0


def test_a_template_roll_is_not_ready_until_every_member_is_updated() -> None:
    found = decided(2, [member("a"), member("b", template_hash="h0"), member("c")])
    assert found[READY] == ("False", pool.ROLLING)
    assert found[RECONCILING] == ("True", pool.ROLLING)


def test_members_above_replicas_are_a_scale_down_in_progress() -> None:
    found = decided(1, [member("a"), member("b")])
    assert found[READY] == ("False", pool.SCALING_DOWN)


def test_a_member_still_draining_keeps_it_not_ready() -> None:
    found = decided(
        2,
        [
            member("a"),
            member("b"),
            member("old", draining_since=EPOCH + datetime.timedelta(seconds=900)),
        ],
    )
    assert found[READY] == ("False", pool.DRAINING)
    assert found[RECONCILING] == ("True", pool.DRAINING)


def test_a_member_failed_permanently_stalls_the_pool() -> None:
    broken = member("b", ready=False, failure="provider gcp is not enabled")
    found = decided(2, [member("a"), broken])
    assert found[STALLED] == ("True", pool.PERMANENT_ERROR)
    assert found[READY] == ("False", pool.PERMANENT_ERROR)
    assert found[RECONCILING] == ("False", pool.RECONCILED)


def test_an_empty_pool_of_zero_replicas_is_ready() -> None:
    assert decided(0, [])[READY] == ("True", pool.REPLICAS_READY)


def test_the_crds_pending_default_is_replaced_and_timed_from_now() -> None:
    pending = ProxyPoolStatus.model_validate(PENDING_STATUS).conditions
    wanted = spec(1)
    members = [member("a", ready=False)]
    found = pool_conditions(Round(wanted, members, Plan(), HASH, None, 1), pending, NOW)
    ready = next(c for c in found if c.type == READY)
    assert (ready.reason, ready.last_transition_time) == (pool.REPLICAS_NOT_READY, NOW)


def test_transition_times_move_only_with_the_status() -> None:
    wanted = spec(2)
    members = [member("a"), member("b", ready=False)]
    first = pool_conditions(Round(wanted, members, Plan(), HASH, None, 1), [], NOW)
    members = [member("a"), member("b")]
    second = pool_conditions(Round(wanted, members, Plan(), HASH, None, 1), first, LATER)
    times = {c.type: c.last_transition_time for c in second}
    assert times[READY] == LATER and times[RECONCILING] == LATER
    assert times[STALLED] == NOW and times[SCALING_LIMITED] == NOW
    assert {c.type: c.status for c in second}[READY] == ConditionStatus.TRUE
