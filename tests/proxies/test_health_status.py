"""Health reports become the Healthy condition, latency and check time; the phase follows."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.catalog import proxy_key
from egress_proxies.health import HealthReport
from egress_proxies.model import HEALTHY, ConditionStatus, Phase, ProxyStatus, compute_phase
from egress_proxies.proxies.health_status import apply_health
from egress_proxies.proxies.reconcile import owned_status, set_condition

pytestmark = pytest.mark.unit

CHECKED = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)


def report(healthy: bool, latency: int | None = 12) -> HealthReport:
    return HealthReport(
        key=proxy_key("crawl", "p1"),
        uid="uid-1",
        healthy=healthy,
        latency_millis=latency if healthy else None,
        checked_at=CHECKED,
        reason="ProbeSucceeded" if healthy else "Timeout",
        message="" if healthy else "no answer within 5s",
    )


def provisioned_status() -> ProxyStatus:
    conditions = set_condition(
        [], "Provisioned", ConditionStatus.TRUE, reason="Created", message="", now="t0"
    )
    return ProxyStatus(ip="127.9.0.2", port=3128, conditions=conditions)


def test_a_healthy_report_makes_a_provisioned_proxy_ready() -> None:
    status = apply_health(provisioned_status(), report(True))
    assert status.latency_millis == 12
    assert status.last_health_check_time == "2026-11-29T12:00:00Z"
    assert compute_phase(status, deleting=False) == Phase.READY


def test_an_unhealthy_report_makes_it_unhealthy_and_clears_latency() -> None:
    status = apply_health(apply_health(provisioned_status(), report(True)), report(False))
    healthy = next(c for c in status.conditions if c.type == HEALTHY)
    assert (healthy.status, healthy.reason) == (ConditionStatus.FALSE, "Timeout")
    assert status.latency_millis is None
    assert compute_phase(status, deleting=False) == Phase.UNHEALTHY


def test_the_reconciler_keeps_health_fields_unless_the_address_changes() -> None:
    current = apply_health(provisioned_status(), report(True))
    same_address = owned_status(current, provisioned_status())
    assert any(c.type == HEALTHY for c in same_address.conditions)
    assert same_address.latency_millis == 12
    moved = owned_status(current, provisioned_status().model_copy(update={"ip": "127.9.0.3"}))
    assert not any(c.type == HEALTHY for c in moved.conditions)
    assert moved.latency_millis is None
    assert compute_phase(moved, deleting=False) == Phase.PROVISIONED
