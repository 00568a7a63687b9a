"""GCE instance statuses reduced to what the reconciler acts on; unknown ones count as stopped."""

from __future__ import annotations

import pytest

from egress_proxies.providers.gcp import instance_id, instance_state
from egress_proxies.providers.inventory import InstanceState

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("PROVISIONING", InstanceState.PROVISIONING),
        ("STAGING", InstanceState.PROVISIONING),
        ("RUNNING", InstanceState.RUNNING),
        ("STOPPING", InstanceState.STOPPED),
        ("STOPPED", InstanceState.STOPPED),
        ("SUSPENDING", InstanceState.STOPPED),
        ("SUSPENDED", InstanceState.STOPPED),
        ("REPAIRING", InstanceState.STOPPED),
        ("TERMINATED", InstanceState.STOPPED),
        ("A_STATUS_GOOGLE_ADDS_NEXT_YEAR", InstanceState.STOPPED),
        ("", InstanceState.STOPPED),
    ],
)
def test_instance_state(status: str, state: InstanceState) -> None:
    assert instance_state(status) is state


def test_instance_ids_are_zone_qualified() -> None:
    assert instance_id("us-central1-a", "proxy-abc") == "zones/us-central1-a/instances/proxy-abc"
