"""The Squid pod program's objects, declared by type token, are what the typed SDK declared.

A stack created by the pulumi-kubernetes classes (the program before
`stacks/programs/core_objects.py`) is brought up again with the current
program: nothing may change, neither the checkpoint's inputs nor the objects
in the cluster, so upgrading the operator touches no running proxy.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from egress_proxies import toolchain
from egress_proxies.devcluster import KubeClient
from egress_proxies.model import ProxySpec
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.programs import squid_pod
from egress_proxies.stacks.runner import RunnerSettings, StackRunner
from tests.conftest import ClusterHandle

pytestmark = pytest.mark.integration

CORE_TYPES = {f"kubernetes:core/v1:{kind}" for kind in ("Secret", "ConfigMap", "Pod")}
SNAKE = {"stringData": "string_data"}
# How a checkpoint marks a secret value (pulumi's public constants).
SECRET_SIGNATURE_KEY, SECRET_SIGNATURE = (
    "4dabf18193072939515e22adb298388d",
    "1b47061264138c4ac30d75fd1eb44270",
)


def typed_object(kind: str, name: str, body: Mapping[str, Any]) -> pulumi.CustomResource:
    """What the program declared before: the SDK's class for `kind`."""
    cls = getattr(k8s.core.v1, kind)
    resource: pulumi.CustomResource = cls(name, **{SNAKE.get(k, k): v for k, v in body.items()})
    return resource


def core_resources(runner: StackRunner, stack: str) -> dict[str, dict[str, Any]]:
    """The checkpoint's core/v1 resources by URN."""
    assert isinstance(runner.backend, FileBackend)
    path = runner.backend.root / ".pulumi" / "stacks" / "egress-proxies" / f"{stack}.json"
    latest = json.loads(path.read_text())["checkpoint"]["latest"]
    return {r["urn"]: r for r in latest["resources"] if r["type"] in CORE_TYPES}


def without_ciphertexts(value: Any) -> Any:
    """`value` with each secret (its ciphertext differs per deployment) reduced to a marker."""
    if isinstance(value, dict):
        if value.get(SECRET_SIGNATURE_KEY) == SECRET_SIGNATURE:
            return "<secret>"
        return {key: without_ciphertexts(item) for key, item in value.items()}
    return value


def comparable(resource: Mapping[str, Any]) -> dict[str, Any]:
    """A resource's identity, inputs and last-modified time (an update would change it)."""
    return {
        "id": resource["id"],
        "provider": resource["provider"],
        "inputs": without_ciphertexts(resource["inputs"]),
        "additionalSecretOutputs": resource.get("additionalSecretOutputs"),
        "modified": resource.get("modified"),
    }


async def test_a_stack_made_by_the_typed_sdk_is_unchanged_by_the_current_program(
    kube: KubeClient,
    namespace: str,
    dev_cluster: ClusterHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inputs = ProgramInputs(
        namespace=namespace,
        name="same",
        uid="uid-same",
        instance_name="same",
        spec=ProxySpec.model_validate({"provider": "kubernetes", "kubernetes": {}}),
        credentials=ProxyCredentials("crawler", secrets.token_urlsafe(24), secrets.token_hex(32)),
    )
    runner = StackRunner(
        RunnerSettings(
            state_dir=tmp_path / "state",
            passphrase=secrets.token_urlsafe(16),
            pulumi_root=toolchain.cache_dir(),
            extra_env={
                "KUBECONFIG": str(dev_cluster.kubeconfig),
                "PATH": str(toolchain.bin_dir()),
            },
        )
    )
    stack = f"{namespace}.same"
    try:
        with monkeypatch.context() as patched:
            patched.setattr(squid_pod, "CoreObject", typed_object)
            typed_outputs = await runner.up(
                stack, inputs.uid, lambda: squid_pod.squid_pod_program(inputs)
            )
        before = core_resources(runner, stack)
        pod = squid_pod.pod_name(inputs)
        pod_uid = (await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}"))["metadata"]["uid"]

        outputs = await runner.up(stack, inputs.uid, lambda: squid_pod.squid_pod_program(inputs))
        after = core_resources(runner, stack)

        assert len(before) == 2  # the ConfigMap and the Pod: the Secret is the operator's
        assert outputs == typed_outputs
        assert after.keys() == before.keys()
        for urn, resource in after.items():
            was, now = comparable(before[urn]), comparable(resource)
            for field in was:
                assert now[field] == was[field], (urn, field)
        assert not [r for r in after.values() if r["type"].endswith(":Secret")]
        # Neither the signing key nor the operator's password is anywhere in Pulumi's state.
        state = "".join(
            path.read_text(errors="replace")
            for path in (tmp_path / "state").rglob("*")
            if path.is_file()
        )
        assert str(inputs.credentials.signing_key) not in state
        assert inputs.credentials.password not in state
        assert (await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}"))["metadata"][
            "uid"
        ] == pod_uid
        await runner.destroy(stack)
    finally:
        await runner.close()
