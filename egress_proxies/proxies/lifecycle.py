"""A Proxy's lifecycle Events, read off the transitions of its status.

The status writer sees every status before and after a change, from the
reconciler and the health engine alike; `lifecycle_events` names the
transitions worth an Event: provisioning started, provisioned, replacing,
a permanent error, healthy and unhealthy, deleting. Failures of an
instance and its replacement are posted by the reconciler with their
cause (reconcile.py). Being transitions, a Proxy at rest posts none.
"""

from __future__ import annotations

from egress_proxies.model import (
    HEALTHY,
    PERMANENT_ERROR,
    PROVISIONED,
    READY,
    Condition,
    ConditionStatus,
    ProxyStatus,
    find_condition,
)
from egress_proxies.proxies import readiness
from egress_proxies.proxies.reconcile import PROVISIONING, REPLACING, Event

PROVISIONED_EVENT = "Provisioned"
HEALTHY_EVENT = "Healthy"
UNHEALTHY_EVENT = "Unhealthy"
DELETING_EVENT = "Deleting"

_STARTED = {
    PROVISIONING: Event("Normal", PROVISIONING, "provisioning started"),
    REPLACING: Event("Normal", REPLACING, "replacing the instance"),
    PERMANENT_ERROR: Event("Warning", PERMANENT_ERROR, "provisioning failed"),
}


def lifecycle_events(before: ProxyStatus, after: ProxyStatus) -> tuple[Event, ...]:
    """The Events that the change from `before` to `after` is worth, in the order they happened."""
    found = (_provisioning(before, after), _health(before, after), _deleting(before, after))
    return tuple(event for event in found if event is not None)


def _changed(before: ProxyStatus, after: ProxyStatus, kind: str) -> Condition | None:
    """The condition of `kind` in `after` if its status or reason differs from `before`."""
    was = find_condition(before.conditions, kind)
    now = find_condition(after.conditions, kind)
    if now is None or (was is not None and (was.status, was.reason) == (now.status, now.reason)):
        return None
    return now


def _provisioning(before: ProxyStatus, after: ProxyStatus) -> Event | None:
    now = _changed(before, after, PROVISIONED)
    if now is None:
        return None
    was = find_condition(before.conditions, PROVISIONED)
    if now.status == ConditionStatus.TRUE:
        if was is not None and was.status == ConditionStatus.TRUE:
            return None  # another reason to be provisioned, not a new instance
        address = f"{after.ip}:{after.port}" if after.port else str(after.ip)
        return Event("Normal", PROVISIONED_EVENT, f"serving at {address}")
    started = _STARTED.get(now.reason)
    if started is None:
        return None
    return Event(started.type, started.reason, now.message or started.message)


def _health(before: ProxyStatus, after: ProxyStatus) -> Event | None:
    was = find_condition(before.conditions, HEALTHY)
    now = find_condition(after.conditions, HEALTHY)
    if now is None or now.status == ConditionStatus.UNKNOWN:
        return None
    if was is not None and was.status == now.status:
        return None
    if now.status == ConditionStatus.TRUE:
        return Event("Normal", HEALTHY_EVENT, now.message or "health checks pass")
    return Event("Warning", UNHEALTHY_EVENT, now.message or "health checks fail")


def _deleting(before: ProxyStatus, after: ProxyStatus) -> Event | None:
    now = _changed(before, after, READY)
    if now is None or now.reason != readiness.DELETING:
        return None
    return Event("Normal", DELETING_EVENT, now.message)
