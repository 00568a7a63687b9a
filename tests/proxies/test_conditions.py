"""Setting one status condition by type."""

from __future__ import annotations

import pytest

from egress_proxies.model import HEALTHY, PROVISIONED, ConditionStatus
from egress_proxies.proxies.reconcile import replace_condition, set_condition

pytestmark = pytest.mark.unit

NOW = "2026-11-29T12:00:00Z"
LATER = "2026-11-29T12:05:00Z"


def test_transition_time_moves_only_when_the_condition_status_changes() -> None:
    first = set_condition([], PROVISIONED, ConditionStatus.FALSE, reason="A", message="", now=NOW)
    same = set_condition(
        first, PROVISIONED, ConditionStatus.FALSE, reason="B", message="", now=LATER
    )
    flipped = set_condition(
        same, PROVISIONED, ConditionStatus.TRUE, reason="C", message="", now=LATER
    )
    assert same[0].last_transition_time == NOW
    assert flipped[0].last_transition_time == LATER


def test_a_replaced_condition_keeps_its_place_and_none_removes_it() -> None:
    both = set_condition([], PROVISIONED, ConditionStatus.TRUE, reason="A", message="", now=NOW)
    both = set_condition(both, HEALTHY, ConditionStatus.TRUE, reason="B", message="", now=NOW)
    updated = set_condition(
        both, PROVISIONED, ConditionStatus.FALSE, reason="C", message="", now=LATER
    )
    assert [c.type for c in updated] == [PROVISIONED, HEALTHY]
    assert [c.type for c in replace_condition(updated, PROVISIONED, None)] == [HEALTHY]
