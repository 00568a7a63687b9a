"""The GCE instance poll against the local stand-in for Compute (Google cannot be reached here).

Real parts: the GCE inventory and its google-auth tokens over HTTP to the
stand-in, the file backend reading checkpoint files, the pure plan. The
checkpoints are written as pulumi's file backend lays them out (a stack's
outputs on its `pulumi:pulumi:Stack` resource), since no pulumi-gcp plugin
can run here; the Proxy list and the reconcile trigger are the two seams the
operator fills with the Kubernetes API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egress_proxies.gc.plan import LiveProxy
from egress_proxies.gc.watcher import InstanceWatcher
from egress_proxies.kube import KubeApiError
from egress_proxies.model import ProviderName
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.backends.checkpoint import STACK_TYPE
from egress_proxies.stacks.naming import PROJECT as PULUMI_PROJECT
from tests.providers.fake_compute import FakeCompute, labelled

pytestmark = pytest.mark.integration

ZONE = "us-central1-a"
PROXIES = [LiveProxy("crawl.a", "uid-a"), LiveProxy("crawl.b", "uid-b")]


def write_checkpoint(backend: FileBackend, stack: str, uid: str, instance: str) -> None:
    """A stack's checkpoint as pulumi writes it after a successful `up` of the VM program."""
    path = backend.root / ".pulumi" / "stacks" / PULUMI_PROJECT / f"{stack}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs = {
        "instanceId": f"zones/{ZONE}/instances/{instance}",
        "proxyUid": uid,
        "provider": str(ProviderName.GCP),
        "ip": "203.0.113.7",
        "port": 3128,
    }
    resource = {"urn": f"urn:pulumi:{stack}::{PULUMI_PROJECT}::{STACK_TYPE}::x", "type": STACK_TYPE}
    latest = {"resources": [resource | {"outputs": outputs}]}
    path.write_text(json.dumps({"version": 3, "checkpoint": {"latest": latest}}))


class Requests:
    """The reconcile trigger: records each request; fails the next ones when told to."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []
        self.failing = 0

    async def __call__(self, namespace: str, name: str) -> None:
        if self.failing:
            self.failing -= 1
            raise KubeApiError(503, "ServiceUnavailable", "the API server is restarting")
        self.made.append((namespace, name))


@pytest.fixture
def backend(tmp_path: Path) -> FileBackend:
    backend = FileBackend(tmp_path / "backend", PULUMI_PROJECT)
    write_checkpoint(backend, "crawl.a", "uid-a", "proxy-aaaa")
    write_checkpoint(backend, "crawl.b", "uid-b", "proxy-bbbb")
    return backend


@pytest.fixture
def requests() -> Requests:
    return Requests()


@pytest.fixture
def watcher(backend: FileBackend, inventory: GceInventory, requests: Requests) -> InstanceWatcher:
    async def proxies() -> list[LiveProxy]:
        return PROXIES

    return InstanceWatcher(proxies, backend, inventory, requests)


async def test_a_terminated_vm_is_deleted_once_then_recreation_is_requested_once(
    compute: FakeCompute, watcher: InstanceWatcher, requests: Requests
) -> None:
    compute.deletion_lag = 1
    compute.instances = [
        labelled(ZONE, "proxy-aaaa", "uid-a"),
        labelled(ZONE, "proxy-bbbb", "uid-b", status="TERMINATED"),
    ]

    stopped = await watcher.poll()
    deleting = await watcher.poll()  # Compute still lists it, STOPPING
    gone = await watcher.poll()
    still_gone = await watcher.poll()

    assert stopped.deleted == (f"zones/{ZONE}/instances/proxy-bbbb",)
    assert compute.deleted == [f"zones/{ZONE}/instances/proxy-bbbb"]
    assert deleting.deleted == deleting.reconciled == ()
    assert gone.reconciled == ("crawl.b",)
    assert still_gone.reconciled == ()
    assert requests.made == [("crawl", "b")]
    assert repr(watcher) == (
        "<InstanceWatcher gcp [interval: 0:00:30 | deleting: 0 | awaiting recreate: 1 | last: ok]>"
    )

    compute.instances.append(labelled(ZONE, "proxy-bbbb", "uid-b", status="STAGING"))
    await watcher.poll()
    compute.instances = [labelled(ZONE, "proxy-aaaa", "uid-a")]
    again = await watcher.poll()

    assert again.reconciled == ("crawl.b",)
    assert requests.made == [("crawl", "b"), ("crawl", "b")]


async def test_a_failed_request_is_made_again_on_the_next_poll(
    compute: FakeCompute, watcher: InstanceWatcher, requests: Requests
) -> None:
    compute.instances = [labelled(ZONE, "proxy-aaaa", "uid-a")]
    requests.failing = 1

    failed = await watcher.poll()
    retried = await watcher.poll()

    assert failed.reconciled == ()
    assert failed.failures == ("crawl.b: 503 ServiceUnavailable: the API server is restarting",)
    assert retried.reconciled == ("crawl.b",)
    assert requests.made == [("crawl", "b")]


async def test_an_unreachable_zone_requests_nothing_and_a_denied_listing_skips(
    compute: FakeCompute, watcher: InstanceWatcher, requests: Requests, backend: FileBackend
) -> None:
    compute.instances = [labelled(ZONE, "proxy-aaaa", "uid-a")]
    compute.unreachable_zones = {"asia-east1-c"}

    partial = await watcher.poll()

    assert partial == type(partial)()
    assert requests.made == []

    compute.project = "someone-elses-project"
    denied = await watcher.poll()

    assert denied.skipped is not None
    assert "HTTP 403" in denied.skipped
    assert requests.made == []
