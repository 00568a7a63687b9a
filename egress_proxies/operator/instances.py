"""The operator's view of the instances it watches (Squid pods), keyed by Proxy UID.

Fed by the pod watch. It remembers a deleted pod as Gone (so the state
machine can tell "deleted" from "not seen yet"), and forgets the pods the
handlers replaced on purpose, so their late events cannot be mistaken for
a new failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from egress_proxies.model import UID_LABEL
from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import gone, observe_pod, pod_instance_id


class InstanceCache:
    """Latest observation of each Proxy's pod."""

    def __init__(self) -> None:
        self._by_proxy: dict[str, InstanceObservation] = {}
        self._retired: set[str] = set()

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for seen in self._by_proxy.values():
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
        current = self._by_proxy.get(proxy_uid)
        if current is not None and current.key != meta["uid"]:
            return None  # an older pod of this Proxy; a newer one is already known
        return self._record(
            proxy_uid, gone(meta["uid"], pod_instance_id(meta["namespace"], meta["name"]))
        )

    def get(self, proxy_uid: str) -> InstanceObservation | None:
        """The latest observation of a Proxy's pod, if any was seen."""
        return self._by_proxy.get(proxy_uid)

    def retire(self, proxy_uid: str, key: str) -> None:
        """The handlers replaced this incarnation: ignore anything more it reports."""
        self._retired.add(key)
        current = self._by_proxy.get(proxy_uid)
        if current is not None and current.key == key:
            del self._by_proxy[proxy_uid]

    def forget_proxy(self, proxy_uid: str) -> None:
        """The Proxy is gone: drop what was seen of its pod."""
        self._by_proxy.pop(proxy_uid, None)

    def _record(self, proxy_uid: str, seen: InstanceObservation) -> InstanceObservation | None:
        previous = self._by_proxy.get(proxy_uid)
        self._by_proxy[proxy_uid] = seen
        if previous is not None and previous.signature == seen.signature:
            return None
        return seen


def _proxy_uid(pod: Mapping[str, Any]) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    value = labels.get(UID_LABEL)
    return str(value) if value else None
