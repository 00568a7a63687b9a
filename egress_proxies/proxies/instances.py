"""The operator's view of the instances it watches (Squid pods), by Proxy UID and instance id.

Fed by the pod watch. A Proxy may briefly have two pods (a new shape is
created before the old pod goes), so the state machine asks for the one
its stack names. A deleted pod is remembered as Gone (so the state machine
can tell "deleted" from "not seen yet"); the pods the handlers replaced on
purpose are forgotten, so their late events cannot look like a new failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import gone, observe_pod, pod_instance_id
from egress_proxies.vocabulary import UID_LABEL

_KEPT_PER_PROXY = 3  # the current pod, the one it replaces, and a tombstone


class InstanceCache:
    """Latest observation of each Proxy's pod."""

    def __init__(self) -> None:
        self._by_proxy: dict[str, dict[str, InstanceObservation]] = {}
        self._retired: set[str] = set()

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for seen in (seen for pods in self._by_proxy.values() for seen in pods.values()):
            counts[seen.health.value] = counts.get(seen.health.value, 0) + 1
        summary = ", ".join(f"{count} {health}" for health, count in sorted(counts.items()))
        return f"<InstanceCache [{summary or 'empty'} | retired: {len(self._retired)}]>"

    def put_pod(self, pod: Mapping[str, Any]) -> InstanceObservation | None:
        """Record a pod; return its observation if the state machine's view of it changed."""
        proxy_uid = _proxy_uid(pod)
        if proxy_uid is None or pod["metadata"]["uid"] in self._retired:
            return None
        return self._record(proxy_uid, observe_pod(pod))

    def remove_pod(self, pod: Mapping[str, Any]) -> InstanceObservation | None:
        """Record a deleted pod as Gone; return that observation if it is news."""
        meta = pod["metadata"]
        proxy_uid = _proxy_uid(pod)
        if proxy_uid is None or meta["uid"] in self._retired:
            self._retired.discard(meta["uid"])
            return None
        instance_id = pod_instance_id(meta["namespace"], meta["name"])
        current = self._by_proxy.get(proxy_uid, {}).get(instance_id)
        if current is not None and current.key != meta["uid"]:
            return None  # an older pod of that name; a newer one is already known
        return self._record(proxy_uid, gone(meta["uid"], instance_id))

    def get(self, proxy_uid: str, instance_id: str) -> InstanceObservation | None:
        """The latest observation of one of a Proxy's pods, if it was seen."""
        return self._by_proxy.get(proxy_uid, {}).get(instance_id)

    def retire(self, proxy_uid: str, key: str) -> None:
        """The handlers replaced this incarnation: ignore anything more it reports."""
        self._retired.add(key)
        pods = self._by_proxy.get(proxy_uid, {})
        for instance_id in [i for i, seen in pods.items() if seen.key == key]:
            del pods[instance_id]

    def forget_proxy(self, proxy_uid: str) -> None:
        """The Proxy is gone: drop what was seen of its pod."""
        self._by_proxy.pop(proxy_uid, None)

    def _record(self, proxy_uid: str, seen: InstanceObservation) -> InstanceObservation | None:
        pods = self._by_proxy.setdefault(proxy_uid, {})
        previous = pods.pop(seen.instance_id, None)
        pods[seen.instance_id] = seen  # the most recently seen last
        while len(pods) > _KEPT_PER_PROXY:
            del pods[next(iter(pods))]
        if previous is not None and previous.signature == seen.signature:
            return None
        return seen


def _proxy_uid(pod: Mapping[str, Any]) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    value = labels.get(UID_LABEL)
    return str(value) if value else None
