"""The pool planner: scale, drain order, surge-first replacement, floors, deletion after drain."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from egress_proxies.pool_model import ProxyPoolSpec
from egress_proxies.pools.plan import (
    BANNED,
    SCALED_DOWN,
    TEMPLATE_CHANGED,
    TOO_OLD,
    Member,
    plan,
)

pytestmark = pytest.mark.unit

HASH = "h1"
NOW = 10_000.0
TTL = 3600.0


def spec(replicas: int, **extra: Any) -> ProxyPoolSpec:
    return ProxyPoolSpec.model_validate(
        {"replicas": replicas, "template": {"spec": {"provider": "kubernetes"}}, **extra}
    )


def member(
    name: str,
    *,
    created: float = 0.0,
    ready: bool = True,
    leases: int = 0,
    bans: int = 0,
    template_hash: str = HASH,
    draining_since: float | None = None,
) -> Member:
    draining = at(draining_since) if draining_since is not None else None
    return Member(name, at(created), ready, leases, bans, template_hash, draining)


def at(seconds: float) -> datetime:
    """A moment `seconds` after the epoch (the tests count time in seconds)."""
    return datetime.fromtimestamp(seconds, UTC)


def test_an_empty_pool_creates_every_replica() -> None:
    step = plan(spec(3), HASH, [], at(NOW), TTL)
    assert (step.create, step.drain, step.delete) == (3, (), ())


def test_a_converged_pool_does_nothing() -> None:
    step = plan(spec(2), HASH, [member("a"), member("b")], at(NOW), TTL)
    assert step.idle and step.stale == 0


def test_scale_down_drains_idle_then_unhealthy_then_oldest() -> None:
    members = [
        member("leased-old", created=1, leases=1),
        member("idle-young", created=50),
        member("idle-old", created=5),
        member("idle-unready", created=90, ready=False),
    ]
    step = plan(spec(1), HASH, members, at(NOW), TTL)
    assert [d.name for d in step.drain] == ["idle-unready", "idle-old", "idle-young"]
    assert {d.reason for d in step.drain} == {SCALED_DOWN}
    assert step.create == 0


def test_the_leased_one_is_drained_last_and_deleted_only_when_released() -> None:
    members = [member("leased", leases=1), member("idle")]
    step = plan(spec(0), HASH, members, at(NOW), TTL)
    assert [d.name for d in step.drain] == ["idle", "leased"]
    draining = [
        member("leased", leases=1, draining_since=NOW - 5),
        member("idle", draining_since=NOW - 5),
    ]
    assert plan(spec(0), HASH, draining, at(NOW), TTL).delete == ("idle",)
    released = [member("leased", draining_since=NOW - 5)]
    assert plan(spec(0), HASH, released, at(NOW), TTL).delete == ("leased",)


def test_a_draining_member_is_deleted_once_the_longest_lease_ran_out() -> None:
    members = [member("stuck", leases=1, draining_since=NOW - TTL)]
    assert plan(spec(0), HASH, members, at(NOW), TTL).delete == ("stuck",)


def test_a_draining_member_does_not_count_towards_replicas() -> None:
    members = [member("a"), member("going", leases=1, draining_since=NOW - 1)]
    step = plan(spec(2), HASH, members, at(NOW), TTL)
    assert step.create == 1 and step.delete == ()


def test_template_roll_with_max_unavailable_zero_surges_first() -> None:
    old = [member(n, template_hash="h0") for n in "abc"]
    step = plan(spec(3), HASH, old, at(NOW), TTL)
    assert step.create == 1 and step.drain == () and step.stale == 3
    # The surge Proxy is not Ready yet: nothing more happens.
    starting = [*old, member("new1", ready=False)]
    assert plan(spec(3), HASH, starting, at(NOW), TTL).idle
    # Ready: one old one drains, and the next surge Proxy is created.
    surged = [*old, member("new1")]
    step = plan(spec(3), HASH, surged, at(NOW), TTL)
    assert [(d.name, d.reason) for d in step.drain] == [("a", TEMPLATE_CHANGED)]
    assert step.create == 1


def test_template_roll_with_max_unavailable_drains_before_creating() -> None:
    old = [member(n, template_hash="h0") for n in "abc"]
    step = plan(spec(3, strategy={"maxSurge": 0, "maxUnavailable": 1}), HASH, old, at(NOW), TTL)
    assert len(step.drain) == 1 and step.create == 1


def test_banned_member_is_replaced_surge_first_never_below_min_available() -> None:
    rotation = {"maxBans": 3, "banWindowSeconds": 600, "minAvailable": 2}
    members = [member("a", bans=3), member("b")]
    step = plan(spec(2, rotation=rotation), HASH, members, at(NOW), TTL)
    assert step.drain == () and step.create == 1
    members.append(member("c"))
    step = plan(spec(2, rotation=rotation), HASH, members, at(NOW), TTL)
    assert [(d.name, d.reason) for d in step.drain] == [("a", BANNED)]
    assert step.create == 0


def test_bans_below_the_limit_change_nothing() -> None:
    rotation = {"maxBans": 3}
    members = [member("a", bans=2), member("b")]
    assert plan(spec(2, rotation=rotation), HASH, members, at(NOW), TTL).idle


def test_old_members_rotate_one_at_a_time() -> None:
    rotation = {"maxAgeSeconds": 3600}
    members = [member(n, created=NOW - 4000) for n in "abc"]
    step = plan(spec(3, rotation=rotation), HASH, members, at(NOW), TTL)
    assert step.create == 1 and step.drain == ()
    members.append(member("new", created=NOW - 10))
    step = plan(spec(3, rotation=rotation), HASH, members, at(NOW), TTL)
    assert [(d.name, d.reason) for d in step.drain] == [("a", TOO_OLD)]


def test_an_unready_stale_member_is_drained_without_waiting() -> None:
    members = [member("a", template_hash="h0", ready=False), member("b")]
    step = plan(spec(2), HASH, members, at(NOW), TTL)
    assert [d.name for d in step.drain] == ["a"] and step.create == 1
