"""Inline program: one authenticated Squid pod in the Proxy's namespace.

Declares a ConfigMap (squid.conf and the lease-credentials helper) and the
Pod, named from the Proxy UID and labelled with it. The pod mounts the
Proxy's credentials Secret read-only (the operator makes it, so the signing
key never passes through Pulumi's state). The pod's name ends
in a digest of everything that shapes it, so a changed spec (or cloud-init,
which reaches the pod as an environment value) is a new pod, created before
the old one is deleted: the new pod never waits for the old name to be free.
Exports `port` and `instanceId` (`pods/<namespace>/<pod name>`, the id the
Kubernetes inventory lists it under).

The pod meets Pod Security "restricted": squid runs as the image's
non-root user with no capabilities and a read-only root filesystem; its pid
file, logs, spool and the helper's revocation list live in emptyDirs, and
`fsGroup` makes the 0440 Secret files readable. `up` does not wait for the pod to become ready
(`pulumi.com/skipAwait`): the operator watches its pods, so a pod that can
never start costs a stack operation seconds, not pulumi-kubernetes'
ten-minute Pod await. Readiness and liveness probes on squid's port: the
kubelet marks the pod Ready (the operator's "instance ready") and kills a
squid that stops accepting.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi

from egress_proxies.model import DEFAULT_SQUID_IMAGE
from egress_proxies.stacks import outputs
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.naming import credentials_secret_name
from egress_proxies.stacks.programs.core_objects import CoreObject
from egress_proxies.stacks.programs.squid_config import (
    HELPER_FILE,
    LeaseAuth,
    lease_auth_helper,
    revocations_url,
    squid_conf,
)
from egress_proxies.values import SIGNING_KEY
from egress_proxies.vocabulary import SHARD_LABEL, UID_LABEL

CONFIG_MOUNT = "/etc/squid/squid.conf"
HELPER_MOUNT = f"/etc/squid/{HELPER_FILE}"
AUTH_MOUNT = "/etc/squid/auth"
SQUID_BINARY = "/usr/sbin/squid"
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
# Writable paths under a read-only root filesystem: each is an emptyDir.
RUN_DIR, LOG_DIR, SPOOL_DIR = "/var/run/squid", "/var/log/squid", "/var/spool/squid"
DEFAULT_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "256Mi"},
}
_SCRATCH_LIMIT = "64Mi"
# How long squid lets open connections finish after SIGTERM (its default, 30 s,
# would hold a deleted pod, its CPU request and its address for half a minute).
SHUTDOWN_SECONDS = 2
# squid.conf lines for a container: process files in the emptyDirs, logs to
# the container's stdout and stderr (so `kubectl logs` and the termination
# message show them), no pinger (it needs raw sockets, which are dropped), and
# a short shutdown.
CONTAINER_DIRECTIVES = f"""\
pid_filename {RUN_DIR}/squid.pid
cache_log /dev/stderr
access_log stdio:/dev/stdout
coredump_dir {SPOOL_DIR}
pinger_enable off
shutdown_lifetime {SHUTDOWN_SECONDS} seconds
"""


def squid_pod_program(inputs: ProgramInputs) -> None:
    """Declare the pod's resources; call only inside a Pulumi program."""
    assert inputs.spec.kubernetes is not None, "the reconciler checks the kubernetes block"
    name = inputs.instance_name
    labels = {UID_LABEL: inputs.uid, "app.kubernetes.io/name": "egress-proxy"}
    if inputs.shard is not None:
        labels[SHARD_LABEL] = inputs.shard
    metadata = {"name": name, "namespace": inputs.namespace, "labels": labels}

    config = CoreObject(
        "ConfigMap",
        "config",
        {
            "metadata": {**metadata, "name": f"{name}-config"},
            "data": {
                "squid.conf": squid_conf(inputs.port, lease_auth=lease_auth(inputs))
                + CONTAINER_DIRECTIVES,
                HELPER_FILE: lease_auth_helper(),
            },
        },
    )
    auth_name = credentials_secret_name(inputs.uid)
    config_name = config.metadata["name"]
    pod = CoreObject(
        "Pod",
        "squid",
        {
            "metadata": {**metadata, "name": pod_name(inputs), "annotations": SKIP_AWAIT},
            "spec": pod_spec(inputs, auth_name, config_name),
        },
    )
    pulumi.export(outputs.PORT, inputs.port)
    pulumi.export(
        outputs.INSTANCE_ID,
        pulumi.Output.concat("pods/", inputs.namespace, "/", pod.metadata["name"]),
    )


def lease_auth(inputs: ProgramInputs) -> LeaseAuth:
    """Where the pod's helper finds its Secret and scratch space, and its revocation list."""
    return LeaseAuth(
        helper_path=HELPER_MOUNT,
        secret_dir=AUTH_MOUNT,
        state_dir=RUN_DIR,
        proxy=f"{inputs.namespace}/{inputs.name}",
        revocations_url=revocations_url(inputs.discovery_url, inputs.namespace, inputs.name),
    )


def pod_name(inputs: ProgramInputs) -> str:
    """`<instance name>-<digest of the pod's shape>`: a new shape is a new name."""
    shape = json.dumps(
        [
            inputs.spec.kubernetes.model_dump(mode="json") if inputs.spec.kubernetes else None,
            inputs.port,
            hashlib.sha256(inputs.cloud_init.encode()).hexdigest() if inputs.cloud_init else None,
            # A new helper or revocation list address reaches squid only in a new pod.
            hashlib.sha256(lease_auth_helper().encode()).hexdigest(),
            inputs.discovery_url,
        ],
        sort_keys=True,
    )
    return f"{inputs.instance_name}-{hashlib.sha256(shape.encode()).hexdigest()[:6]}"


def pod_spec(inputs: ProgramInputs, auth_name: Any, config_name: Any) -> dict[str, Any]:
    """The pod's spec; the names are the Secret's and ConfigMap's (outputs in a program)."""
    kubernetes = inputs.spec.kubernetes
    assert kubernetes is not None
    env = []
    if inputs.cloud_init is not None:
        digest = hashlib.sha256(inputs.cloud_init.encode()).hexdigest()
        env.append({"name": "CLOUD_INIT_SHA256", "value": digest})
    container: dict[str, Any] = {
        "name": "squid",
        # The operator fills an unset image from its --squid-image before `up`.
        "image": kubernetes.image or DEFAULT_SQUID_IMAGE,
        # The image's entrypoint prepares directories as root; squid needs none of that here.
        "command": [SQUID_BINARY],
        "args": ["-f", CONFIG_MOUNT, "-NYC"],
        "ports": [{"name": "proxy", "containerPort": inputs.port}],
        "readinessProbe": {"tcpSocket": {"port": inputs.port}, "periodSeconds": 5},
        # A squid that stops accepting is killed by the kubelet; with restartPolicy
        # Never the pod fails and the operator replaces it.
        "livenessProbe": {
            "tcpSocket": {"port": inputs.port},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": env,
        "resources": kubernetes.resources or DEFAULT_RESOURCES,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "subPath": "squid.conf"},
            {"name": "config", "mountPath": HELPER_MOUNT, "subPath": HELPER_FILE},
            {"name": "auth", "mountPath": AUTH_MOUNT, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
            {"name": "log", "mountPath": LOG_DIR},
            {"name": "spool", "mountPath": SPOOL_DIR},
        ],
    }
    scratch = {"emptyDir": {"sizeLimit": _SCRATCH_LIMIT}}
    return {
        "containers": [container],
        "automountServiceAccountToken": False,
        # The operator replaces a dead squid (and backs off), so the Proxy shows it.
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": kubernetes.run_as_user,
            "runAsGroup": kubernetes.run_as_group,
            "fsGroup": kubernetes.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "config", "configMap": {"name": config_name}},
            {
                "name": "auth",
                "secret": {
                    "secretName": auth_name,
                    "defaultMode": 0o440,
                    "items": [
                        {"key": key, "path": key} for key in ("username", "password", SIGNING_KEY)
                    ],
                },
            },
            {"name": "run", **scratch},
            {"name": "log", **scratch},
            {"name": "spool", **scratch},
        ],
    }
