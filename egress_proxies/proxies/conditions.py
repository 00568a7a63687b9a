"""Status conditions: set one by type, keeping its transition time while its status holds.

Shared by the writers of a Proxy's conditions: the reconcile state machine
(Provisioned), the health pump (Healthy) and the readiness summary (Ready,
Reconciling, Stalled).
"""

from __future__ import annotations

from egress_proxies.model import Condition, ConditionStatus, find_condition


def set_condition(
    conditions: list[Condition],
    kind: str,
    state: ConditionStatus,
    *,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[Condition]:
    """The conditions with one type replaced (transition time kept when the status is unchanged)."""
    previous = find_condition(conditions, kind)
    since = previous.last_transition_time if previous and previous.status == state else now
    updated = Condition(
        type=kind,
        status=state,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return replace_condition(conditions, kind, updated)


def replace_condition(
    conditions: list[Condition], kind: str, condition: Condition | None
) -> list[Condition]:
    """The conditions with the one of type `kind` replaced in place, appended, or (None) removed.

    In place: a list that changes order but not content would be a status write for nothing.
    """
    kept = [c for c in conditions if c.type != kind]
    if condition is None:
        return kept
    at = next((i for i, c in enumerate(conditions) if c.type == kind), len(conditions))
    return [*conditions[:at], condition, *conditions[at + 1 :]]
