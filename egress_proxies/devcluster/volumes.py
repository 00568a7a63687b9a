"""The dev cluster's default StorageClass: a directory on the node per claim.

kind ships a default StorageClass (`standard`, rancher's local-path
provisioner) that gives every PersistentVolumeClaim a directory on the node,
so deploy/'s claims bind there without an overlay. This is the same for the
dev cluster, run by its supervisor: a claim of class `standard` gets a
hostPath PersistentVolume on a new directory under the node's state
(`DIR/node/volumes/`), world-writable as local-path makes it, so any user a
pod runs as can write; a released volume and its directory are deleted
(reclaim policy Delete).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path
from typing import Any

from egress_proxies.kube import ConflictError, KubeApiError, KubeClient, TransportError
from egress_proxies.kube.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
)

logger = logging.getLogger(__name__)

STORAGE_CLASS = "standard"
PROVISIONER = "dev-cluster.egress-proxies/hostpath"


def storage_class() -> dict[str, Any]:
    """The default StorageClass, as kind's `standard`."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def volume_for(claim: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The PersistentVolume that binds `claim` to `directory`."""
    meta = claim["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta['uid']}",
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"]["accessModes"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "claimRef": {
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": str(directory), "type": "Directory"},
        },
    }


class HostPathProvisioner:
    """Provisions and deletes the `standard` class's volumes, polling once a second."""

    def __init__(self, kube: KubeClient, root: Path, interval: float = 1.0) -> None:
        self._kube = kube
        self._root = root
        self._interval = interval

    def __repr__(self) -> str:
        return f"<HostPathProvisioner {self._root}>"

    async def install(self) -> None:
        """Create the default StorageClass (once per cluster)."""
        with contextlib.suppress(ConflictError):
            await self._kube.create(STORAGE_CLASSES.path(), storage_class())

    async def run(self) -> None:
        """Provision and reclaim until cancelled."""
        self._root.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                await self.sync()
            except (KubeApiError, TransportError) as error:
                logger.warning("volume provisioning failed: %s", error)
            await asyncio.sleep(self._interval)

    async def sync(self) -> None:
        """One pass: a volume for each pending claim, none for each released one."""
        claims = (await self._kube.get(PERSISTENT_VOLUME_CLAIMS.path()))["items"]
        volumes = (await self._kube.get(PERSISTENT_VOLUMES.path()))["items"]
        provisioned = {v["metadata"]["name"] for v in volumes}
        for claim in claims:
            spec = claim["spec"]
            if spec.get("storageClassName") != STORAGE_CLASS or spec.get("volumeName"):
                continue
            volume = volume_for(claim, self._root / f"pvc-{claim['metadata']['uid']}")
            if volume["metadata"]["name"] in provisioned:
                continue
            directory = Path(volume["spec"]["hostPath"]["path"])
            directory.mkdir(exist_ok=True)
            directory.chmod(0o777)
            await self._kube.create(PERSISTENT_VOLUMES.path(), volume)
        for volume in volumes:
            annotations = volume["metadata"].get("annotations") or {}
            released = (volume.get("status") or {}).get("phase") == "Released"
            if annotations.get("pv.kubernetes.io/provisioned-by") == PROVISIONER and released:
                directory = Path(volume["spec"]["hostPath"]["path"])
                if directory.parent == self._root:
                    shutil.rmtree(directory, ignore_errors=True)
                await self._kube.delete(PERSISTENT_VOLUMES.path(name=volume["metadata"]["name"]))
