"""A Squid pod's status, read the way an operator reads it: ready, starting, stuck or dead.

Pure: takes a pod body as the API server returns it. The causes it names are
what a user would look up first: the image and pull error, the container's
exit code and last log line (its termination message), the scheduler's
reason, an eviction's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from egress_proxies.clock import parse_k8s_time
from egress_proxies.kube.resources import PODS
from egress_proxies.providers.instance import (
    UNKNOWN_CREATION,
    InstanceHealth,
    InstanceObservation,
)

# Container waiting reasons from which a pod does not recover without a change.
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
_IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
_CAUSE_LIMIT = 400


def pod_instance_id(namespace: str, name: str) -> str:
    """The inventory id of a pod (`pods/<namespace>/<name>`), as the stack exports it."""
    return f"pods/{namespace}/{name}"


def pod_path(instance_id: str) -> str:
    """The API path of the pod an inventory id names (the inverse of `pod_instance_id`)."""
    _, namespace, name = instance_id.split("/", 2)
    return PODS.path(namespace, name)


def observe_pod(pod: Mapping[str, Any]) -> InstanceObservation:
    """What a pod says about its squid."""
    meta = pod["metadata"]
    status = pod.get("status") or {}
    instance_id = pod_instance_id(meta["namespace"], meta["name"])

    def seen(health: InstanceHealth, cause: str = "", ip: str | None = None) -> InstanceObservation:
        return InstanceObservation(
            key=meta["uid"],
            instance_id=instance_id,
            health=health,
            ip=ip,
            cause=cause[:_CAUSE_LIMIT],
            since=_created(meta.get("creationTimestamp")),
        )

    if meta.get("deletionTimestamp"):
        return seen(InstanceHealth.DEAD, "the pod is being deleted")
    phase = status.get("phase")
    container = _container_status(pod)
    if phase in ("Failed", "Succeeded"):
        return seen(InstanceHealth.DEAD, _ended_cause(status, container))
    if phase == "Running" and _ready(status) and status.get("podIP"):
        return seen(InstanceHealth.READY, ip=status["podIP"])
    waiting = (container.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in STUCK_REASONS:
        return seen(InstanceHealth.STUCK, _waiting_cause(pod, container, waiting))
    unschedulable = _condition(status, "PodScheduled")
    if unschedulable.get("status") == "False" and unschedulable.get("reason") == "Unschedulable":
        return seen(InstanceHealth.STUCK, f"unschedulable: {unschedulable.get('message', '')}")
    return seen(InstanceHealth.STARTING, waiting.get("reason", ""))


def gone(key: str, instance_id: str) -> InstanceObservation:
    """A pod that was deleted."""
    return InstanceObservation(key, instance_id, InstanceHealth.GONE, cause="the pod was deleted")


def _ended_cause(status: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    if status.get("reason"):  # Evicted, NodeLost, Shutdown, ...
        return f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
    terminated = (container.get("state") or {}).get("terminated") or {}
    if not terminated:
        return f"the pod is {status.get('phase', 'Failed')}"
    cause = f"squid exited with code {terminated.get('exitCode', '?')}"
    if terminated.get("reason"):
        cause += f" ({terminated['reason']})"
    last_line = _last_line(terminated.get("message", ""))
    return f"{cause}: {last_line}" if last_line else cause


def _waiting_cause(
    pod: Mapping[str, Any], container: Mapping[str, Any], waiting: Mapping[str, Any]
) -> str:
    reason = waiting["reason"]
    message = _last_line(waiting.get("message", ""))
    if reason in _IMAGE_REASONS:
        image = container.get("image") or _spec_image(pod)
        return f"image {image}: {reason}: {message}".rstrip(": ")
    if reason == "CrashLoopBackOff":
        last = ((container.get("lastState") or {}).get("terminated")) or {}
        if last:
            return f"CrashLoopBackOff: {_ended_cause({}, {'state': {'terminated': last}})}"
    return f"{reason}: {message}".rstrip(": ")


def _spec_image(pod: Mapping[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(containers[0].get("image", ""))


def _container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0] or {}


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _ready(status: Mapping[str, Any]) -> bool:
    return _condition(status, "Ready").get("status") == "True"


def _last_line(text: str) -> str:
    """The line that names the cause: the first FATAL (later ones follow from it), else the last."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = [line for line in lines if "FATAL" in line]
    errors = [line for line in lines if "ERROR" in line]
    return fatal[0] if fatal else (errors or lines or [""])[-1]


def _created(timestamp: str | None) -> datetime:
    return parse_k8s_time(timestamp) if timestamp else UNKNOWN_CREATION
