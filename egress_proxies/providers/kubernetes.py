"""The Kubernetes inventory: every pod, ConfigMap and Secret carrying a Proxy UID label.

One list call per kind across all namespaces (a label-existence selector),
so a sweep costs three requests whatever the fleet's size. A sharded
operator's selector also requires its shard label; an unsharded one's
excludes every shard's objects, so no GC judges another shard's objects. Instance ids are
`<kind>/<namespace>/<name>` (kind: pods, configmaps, secrets).
"""

from __future__ import annotations

from typing import Any

from egress_proxies.clock import parse_k8s_time
from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import CONFIG_MAPS, PODS, SECRETS, Resource
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryError,
    InventoryListing,
    TaggedInstance,
)
from egress_proxies.vocabulary import SHARD_LABEL, UID_LABEL

KINDS: dict[str, Resource] = {kind.plural: kind for kind in (PODS, CONFIG_MAPS, SECRETS)}


def instance_id(kind: str, namespace: str, name: str) -> InstanceId:
    """The inventory id of one object."""
    return InstanceId(f"{kind}/{namespace}/{name}")


class KubernetesInventory:
    """Lists and deletes UID-labelled objects through the API server."""

    def __init__(
        self, client: KubeClient, namespaces: tuple[str, ...] = (), shard: str | None = None
    ) -> None:
        """`shard`: list only objects labelled with this operator shard (None: only unlabelled)."""
        self._client = client
        self._namespaces = namespaces
        self._selector = (
            f"{UID_LABEL},{SHARD_LABEL}={shard}" if shard else f"{UID_LABEL},!{SHARD_LABEL}"
        )

    def __repr__(self) -> str:
        scope = ",".join(self._namespaces) or "all namespaces"
        return f"<KubernetesInventory {scope} [{self._selector}]>"

    @property
    def provider(self) -> ProviderName:
        """This inventory reads the kubernetes provider."""
        return ProviderName.KUBERNETES

    async def list_tagged(self) -> InventoryListing:
        """Every labelled pod, ConfigMap and Secret; any failed list fails the whole listing.

        An object already being deleted (a pod in its grace period) is left
        out: it is on its way, and deleting it again would only be logged twice.
        """
        instances: list[TaggedInstance] = []
        for kind in KINDS:
            for path in self._collection_paths(kind):
                try:
                    listing = await self._client.list(path, label_selector=self._selector)
                except (KubeApiError, OSError) as error:
                    raise InventoryError(f"listing {kind} failed: {error}") from error
                instances += [
                    _tagged(kind, item)
                    for item in listing.get("items", [])
                    if not item["metadata"].get("deletionTimestamp")
                ]
        return InventoryListing(ProviderName.KUBERNETES, tuple(instances))

    async def delete(self, instance_id: InstanceId) -> None:
        """Delete one object; already gone counts as deleted."""
        kind, namespace, name = instance_id.split("/", 2)
        if kind not in KINDS:
            raise InventoryError(f"not a kubernetes inventory id: {instance_id}")
        try:
            await self._client.delete(KINDS[kind].path(namespace, name))
        except (KubeApiError, OSError) as error:
            raise InventoryError(f"deleting {instance_id} failed: {error}") from error

    def _collection_paths(self, kind: str) -> list[str]:
        resource = KINDS[kind]
        if not self._namespaces:
            return [resource.path()]
        return [resource.path(namespace) for namespace in self._namespaces]


def _tagged(kind: str, item: dict[str, Any]) -> TaggedInstance:
    meta = item["metadata"]
    created = parse_k8s_time(meta["creationTimestamp"])
    phase = (item.get("status") or {}).get("phase") if kind == "pods" else "Running"
    state = {
        "Pending": InstanceState.PROVISIONING,
        "Running": InstanceState.RUNNING,
    }.get(phase or "", InstanceState.STOPPED)
    return TaggedInstance(
        provider=ProviderName.KUBERNETES,
        instance_id=instance_id(kind, meta["namespace"], meta["name"]),
        uid_label=meta["labels"][UID_LABEL],
        created_at=created,
        state=state,
    )
