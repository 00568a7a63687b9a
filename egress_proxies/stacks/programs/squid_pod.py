"""Inline program: one authenticated Squid pod in the Proxy's namespace.

Declares a Secret (the bcrypt passwd file), a ConfigMap (squid.conf) and the
Pod, all named from the Proxy UID and labelled with it. The pod is replaced
(deleted first: its name is fixed) whenever its spec changes; a cloud-init
change reaches the pod as an environment value, which forces that too.
Exports `ip`, `port` and `instanceId` (`pods/<namespace>/<pod name>`, the id
the Kubernetes inventory lists it under).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi

# Imported eagerly, not through pulumi_kubernetes' lazy attribute loading: several
# programs run at once in the runner's threads, and the lazy loader is not
# thread-safe (a concurrent first access raised AttributeError: no 'Secret').
from pulumi_kubernetes.core.v1 import ConfigMap, Pod, Secret

# pulumi resolves the input types' hints (ObjectMetaArgs in meta.v1) while it
# serializes resources, so that module is loaded here too.
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs as _ObjectMetaArgs  # noqa: F401

from egress_proxies.model import UID_LABEL
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.programs.squid_config import PASSWD_PATH, passwd_line, squid_conf

CONFIG_MOUNT = "/etc/squid/squid.conf"
AUTH_MOUNT = PASSWD_PATH.rsplit("/", 1)[0]
_AWAIT_TIMEOUT = "5m"


def squid_pod_program(inputs: ProgramInputs) -> None:
    """Declare the pod's resources; call only inside a Pulumi program."""
    assert inputs.spec.kubernetes is not None, "the reconciler checks the kubernetes block"
    name = inputs.instance_name
    labels = {UID_LABEL: inputs.uid, "app.kubernetes.io/name": "egress-proxy"}
    metadata = {"name": name, "namespace": inputs.namespace, "labels": labels}

    auth = Secret(
        "auth",
        metadata={**metadata, "name": f"{name}-auth"},
        string_data=pulumi.Output.secret({"passwd": passwd_line(inputs.credentials)}),
    )
    config = ConfigMap(
        "config",
        metadata={**metadata, "name": f"{name}-config"},
        data={"squid.conf": squid_conf(inputs.port)},
    )
    pod = Pod(
        "squid",
        metadata=metadata,
        spec=_pod_spec(inputs, auth.metadata["name"], config.metadata["name"]),
        opts=pulumi.ResourceOptions(
            delete_before_replace=True,
            custom_timeouts=pulumi.CustomTimeouts(create=_AWAIT_TIMEOUT, update=_AWAIT_TIMEOUT),
        ),
    )
    pulumi.export("ip", pod.status.pod_ip)
    pulumi.export("port", inputs.port)
    pulumi.export(
        "instanceId", pulumi.Output.concat("pods/", inputs.namespace, "/", pod.metadata["name"])
    )


def _pod_spec(
    inputs: ProgramInputs, auth_name: pulumi.Output[str], config_name: pulumi.Output[str]
) -> dict[str, Any]:
    assert inputs.spec.kubernetes is not None
    env = []
    if inputs.cloud_init is not None:
        digest = hashlib.sha256(inputs.cloud_init.encode()).hexdigest()
        env.append({"name": "CLOUD_INIT_SHA256", "value": digest})
    container: dict[str, Any] = {
        "name": "squid",
        "image": inputs.spec.kubernetes.image,
        "args": ["-f", CONFIG_MOUNT, "-NYC"],
        "ports": [{"name": "proxy", "containerPort": inputs.port}],
        "readinessProbe": {"tcpSocket": {"port": inputs.port}, "periodSeconds": 5},
        "env": env,
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "subPath": "squid.conf"},
            {"name": "auth", "mountPath": AUTH_MOUNT, "readOnly": True},
        ],
    }
    if inputs.spec.kubernetes.resources:
        container["resources"] = inputs.spec.kubernetes.resources
    return {
        "containers": [container],
        "automountServiceAccountToken": False,
        "volumes": [
            {"name": "config", "configMap": {"name": config_name}},
            {"name": "auth", "secret": {"secretName": auth_name, "defaultMode": 0o440}},
        ],
    }
