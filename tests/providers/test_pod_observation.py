"""Reading a Squid pod's status the way the operator acts on it."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.providers.instance import InstanceHealth
from egress_proxies.providers.pods import observe_pod
from egress_proxies.proxies.instances import InstanceCache
from egress_proxies.vocabulary import UID_LABEL

pytestmark = pytest.mark.unit


def pod(status: dict[str, Any], uid: str = "pod-1", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "proxy-x",
            "namespace": "crawl",
            "uid": uid,
            "labels": {UID_LABEL: "proxy-uid"},
            "creationTimestamp": "2026-11-29T12:00:00Z",
            **meta,
        },
        "spec": {"containers": [{"name": "squid", "image": "ubuntu/squid:6"}]},
        "status": status,
    }


READY = {
    "phase": "Running",
    "podIP": "127.9.0.5",
    "conditions": [{"type": "Ready", "status": "True"}],
}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": message}}
    return {"phase": "Pending", "containerStatuses": [{"name": "squid", "state": state}]}


def test_a_ready_running_pod_is_ready_at_its_ip() -> None:
    seen = observe_pod(pod(READY))
    assert (seen.health, seen.ip, seen.key) == (InstanceHealth.READY, "127.9.0.5", "pod-1")
    assert seen.instance_id == "pods/crawl/proxy-x"


def test_an_image_pull_error_is_stuck_and_names_the_image() -> None:
    seen = observe_pod(pod(waiting("ImagePullBackOff", 'Back-off pulling image "x"')))
    assert seen.health == InstanceHealth.STUCK
    assert seen.cause.startswith("image ubuntu/squid:6: ImagePullBackOff")


def test_a_pod_still_creating_is_starting() -> None:
    assert observe_pod(pod(waiting("ContainerCreating"))).health == InstanceHealth.STARTING


def test_an_exited_squid_names_the_exit_code_and_its_first_fatal_line() -> None:
    terminated = {
        "exitCode": 1,
        "reason": "Error",
        "message": "starting\nFATAL: /etc/squid/auth/passwd: (13) Permission denied\n"
        "FATAL: The basicauthenticator helpers are crashing too rapidly, need help!\n",
    }
    status = {
        "phase": "Failed",
        "containerStatuses": [{"name": "squid", "state": {"terminated": terminated}}],
    }
    seen = observe_pod(pod(status))
    assert seen.health == InstanceHealth.DEAD
    assert seen.cause == (
        "squid exited with code 1 (Error): FATAL: /etc/squid/auth/passwd: (13) Permission denied"
    )


def test_an_evicted_pod_is_dead_with_the_eviction_message() -> None:
    seen = observe_pod(pod({"phase": "Failed", "reason": "Evicted", "message": "low memory"}))
    assert (seen.health, seen.cause) == (InstanceHealth.DEAD, "Evicted: low memory")


def test_an_unschedulable_pod_is_stuck() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3"}
        ],
    }
    seen = observe_pod(pod(status))
    assert (seen.health, seen.cause) == (InstanceHealth.STUCK, "unschedulable: 0/3")


def test_a_pod_being_deleted_is_dead() -> None:
    seen = observe_pod(pod(READY, deletionTimestamp="2026-11-29T12:01:00Z"))
    assert seen.health == InstanceHealth.DEAD


def test_the_cache_reports_only_changes_and_remembers_deletions() -> None:
    cache = InstanceCache()
    assert cache.put_pod(pod(waiting("ContainerCreating"))) is not None
    assert cache.put_pod(pod(waiting("ContainerCreating"))) is None  # nothing new
    assert cache.put_pod(pod(READY)) is not None
    gone = cache.remove_pod(pod(READY))
    assert gone is not None and gone.health == InstanceHealth.GONE
    assert cache.get("proxy-uid", "pods/crawl/proxy-x") == gone


def test_a_retired_pod_is_ignored_and_an_older_pods_deletion_is_not_news() -> None:
    cache = InstanceCache()
    cache.put_pod(pod({"phase": "Failed"}, uid="old"))
    cache.retire("proxy-uid", "old")
    assert cache.get("proxy-uid", "pods/crawl/proxy-x") is None
    assert cache.remove_pod(pod({"phase": "Failed"}, uid="old")) is None
    cache.put_pod(pod(READY, uid="new"))
    assert cache.remove_pod(pod({}, uid="older")) is None
    seen = cache.get("proxy-uid", "pods/crawl/proxy-x")
    assert seen is not None and seen.key == "new"
    assert "1 Ready" in repr(cache)
