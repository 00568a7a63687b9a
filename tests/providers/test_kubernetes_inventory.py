"""The kubernetes inventory leaves out what is already being deleted."""

from __future__ import annotations

from typing import Any, cast

import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.providers.kubernetes import KubernetesInventory
from egress_proxies.vocabulary import UID_LABEL

pytestmark = pytest.mark.unit


class Listing:
    """A client whose pod list has one live and one terminating pod."""

    async def list(self, path: str, label_selector: str) -> dict[str, Any]:
        if not path.endswith("/pods"):
            return {"items": []}
        return {"items": [pod("live"), pod("going", deletionTimestamp="2026-12-03T17:00:00Z")]}


def pod(name: str, **metadata: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "crawl",
            "labels": {UID_LABEL: f"uid-{name}"},
            "creationTimestamp": "2026-12-03T16:00:00Z",
            **metadata,
        },
        "status": {"phase": "Running"},
    }


async def test_a_pod_in_its_grace_period_is_not_listed() -> None:
    inventory = KubernetesInventory(cast(KubeClient, Listing()), ("crawl",))
    listing = await inventory.list_tagged()
    assert [instance.instance_id for instance in listing.instances] == ["pods/crawl/live"]
