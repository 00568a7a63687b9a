"""The dev cluster's default StorageClass and the volume it makes for a claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies.devcluster.volumes import PROVISIONER, STORAGE_CLASS, storage_class, volume_for

pytestmark = pytest.mark.unit


def test_the_storage_class_is_the_default_one_named_as_kinds() -> None:
    body = storage_class()
    assert body["metadata"]["name"] == STORAGE_CLASS == "standard"
    assert body["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert body["provisioner"] == PROVISIONER
    assert body["reclaimPolicy"] == "Delete"


def test_a_claim_gets_a_host_path_volume_bound_to_it_alone() -> None:
    claim = {
        "metadata": {"namespace": "ns", "name": "state", "uid": "u-1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    volume = volume_for(claim, Path("/node/volumes/pvc-u-1"))
    assert volume["metadata"]["name"] == "pvc-u-1"
    assert volume["spec"]["claimRef"] == {"namespace": "ns", "name": "state", "uid": "u-1"}
    assert volume["spec"]["capacity"] == {"storage": "1Gi"}
    assert volume["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert volume["spec"]["hostPath"] == {"path": "/node/volumes/pvc-u-1", "type": "Directory"}
    assert volume["spec"]["storageClassName"] == STORAGE_CLASS
