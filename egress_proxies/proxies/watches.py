"""The watches beside the Proxies' own: objects whose change wakes a Proxy.

A changed cloud-init Secret nudges the Proxies that render it, and a
Proxy's pod nudges its Proxy whenever its state changes; both only ring
(`wakeup.py`): the Proxy's own handlers (`handlers.py`) do the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from egress_proxies.proxies import cloud_init
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.wakeup import Reason
from egress_proxies.vocabulary import CLOUD_INIT_LABEL, UID_LABEL


def register(registry: kopf.OperatorRegistry, c: Components) -> None:
    """Register the cloud-init Secret watch and the instance (pod) watch on `registry`."""
    _register_secret_watches(registry, c)
    _register_instance_watch(registry, c)


def _register_secret_watches(registry: kopf.OperatorRegistry, c: Components) -> None:
    """A changed cloud-init Secret nudges the Proxies that render it.

    The fleet's Secrets come from its own watches; this event also puts the
    Secret there, so a nudged reconcile reads the version that nudged it.
    """

    @kopf.on.event("v1", "secrets", labels={CLOUD_INIT_LABEL: "true"}, registry=registry)
    async def cloud_init_event(event: Mapping[str, Any], body: kopf.Body, **kwargs: Any) -> None:
        meta = body["metadata"]
        if event["type"] == "DELETED":
            c.fleet.remove_secret(meta["namespace"], meta["name"])
        else:
            c.fleet.put_secret(meta["namespace"], meta["name"], body.get("data"))
        revision = cloud_init.revision(event["type"], meta)
        referencing = c.fleet.referencing_cloud_init(meta["namespace"], meta["name"])
        for namespace, name in cloud_init.to_nudge(referencing, revision):
            await c.bell.ring(namespace, name, Reason.CLOUD_INIT, revision)


def _register_instance_watch(registry: kopf.OperatorRegistry, c: Components) -> None:
    """Watch the pods the Proxies own; nudge a Proxy whenever its pod's state changes."""

    @kopf.on.event("v1", "pods", labels={UID_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        if event["type"] == "DELETED":
            seen = c.instances.remove_pod(body)
        else:
            seen = c.instances.put_pod(body)
        proxy = c.fleet.proxy_by_uid((body["metadata"].get("labels") or {}).get(UID_LABEL, ""))
        if seen is None or proxy is None or proxy["metadata"].get("deletionTimestamp"):
            return
        meta = proxy["metadata"]
        await c.bell.ring(meta["namespace"], meta["name"], Reason.INSTANCE, seen.signature)
