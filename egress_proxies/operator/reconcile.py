"""The reconcile state machine: pure functions from (spec, status, observed) to a decision.

No I/O here. The kopf handlers gather what they observe (the stack's
checkpoint, the cloud-init Secret), ask `decide` what to do, perform at most
one stack operation, and fold its outcome back with `after_up`,
`after_destroy` or `after_failure`. Every branch of seed sections 3-4 is a branch
of these functions and is unit-tested without a cluster.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from egress_proxies.model import (
    PERMANENT_ERROR,
    PROVISIONED,
    Condition,
    ConditionStatus,
    Mode,
    ProviderName,
    ProxySpec,
    ProxyStatus,
    find_condition,
)
from egress_proxies.stacks.backend import StackState
from egress_proxies.stacks.errors import ErrorClass

QUOTA_RETRY_SECONDS = 300.0
CLOUD_INIT_RETRY_SECONDS = 30.0

# Reasons of the Provisioned condition.
CREATED = "Created"
PROVISIONING = "Provisioning"
REPLACING = "Replacing"
DELETING = "Deleting"
EXTERNAL_ENDPOINT = "ExternalEndpoint"
QUOTA_EXCEEDED = "QuotaExceeded"
TRANSIENT_ERROR = "TransientError"
CLOUD_INIT_ERROR = "CloudInitError"


class Action(StrEnum):
    """The one side effect a decision asks for."""

    NONE = "none"
    UP = "up"  # create, update or replace the stack's resources
    ADOPT = "adopt"  # the stack already matches: only record the spec hash
    DESTROY = "destroy"  # destroy and remove the stack
    RELEASE = "release"  # nothing left to clean up: drop the finalizer


@dataclass(frozen=True)
class ProxyView:
    """The parts of a Proxy object the state machine reads."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: ProxySpec
    status: ProxyStatus
    deleting: bool = False
    recorded_hash: str | None = None  # the spec-hash annotation


@dataclass(frozen=True)
class Observed:
    """What the handler saw outside the Proxy: its stack and its cloud-init."""

    stack: StackState | None = None
    cloud_init: str | None = None
    cloud_init_error: str | None = None
    instance_missing: bool = False  # the GC saw the stack's instance gone from its provider


@dataclass(frozen=True)
class Decision:
    """What to do, the status to show meanwhile, and when to look again."""

    action: Action
    status: ProxyStatus
    spec_hash: str | None = None
    retry_after: float | None = None  # seconds; None = wait for the next event
    permanent: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)


def spec_hash(spec: ProxySpec, cloud_init: str | None) -> str:
    """A digest of everything that shapes the instance (not attributes, health or leases)."""
    shaping: dict[str, Any] = {
        "provider": spec.provider,
        "kubernetes": spec.kubernetes.model_dump(mode="json") if spec.kubernetes else None,
        "gcp": spec.gcp.model_dump(mode="json") if spec.gcp else None,
        "cloudInit": hashlib.sha256(cloud_init.encode()).hexdigest() if cloud_init else None,
    }
    encoded = json.dumps(shaping, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


def decide(view: ProxyView, observed: Observed, now: str) -> Decision:
    """The next step for a Proxy."""
    if view.deleting:
        return _decide_delete(view, observed, now)
    if view.spec.mode == Mode.EXTERNAL:
        return _decide_external(view, now)
    return _decide_managed(view, observed, now)


def _decide_delete(view: ProxyView, observed: Observed, now: str) -> Decision:
    if observed.stack is None:
        return Decision(Action.RELEASE, view.status)
    status = _provisioned(view, ConditionStatus.FALSE, DELETING, "destroying the stack", now)
    return Decision(Action.DESTROY, status)


def _decide_external(view: ProxyView, now: str) -> Decision:
    endpoint = view.spec.endpoint
    assert endpoint is not None, "the CRD requires an endpoint for External proxies"
    status = view.status.model_copy(
        update={"ip": endpoint.host, "port": endpoint.port, "instance_id": None, "stack": None}
    )
    status = _with_condition(
        status,
        view.generation,
        PROVISIONED,
        ConditionStatus.TRUE,
        EXTERNAL_ENDPOINT,
        f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}",
        now,
    )
    return Decision(Action.NONE, _observed(status, view))


def _decide_managed(view: ProxyView, observed: Observed, now: str) -> Decision:
    latched = find_condition(view.status.conditions, PROVISIONED)
    if (
        latched is not None
        and latched.reason == PERMANENT_ERROR
        and latched.observed_generation == view.generation
    ):
        return Decision(Action.NONE, view.status, permanent=True)
    missing = _missing_provider_block(view.spec)
    if missing:
        return Decision(
            Action.NONE,
            _provisioned(view, ConditionStatus.FALSE, PERMANENT_ERROR, missing, now),
            permanent=True,
        )
    if observed.cloud_init_error is not None:
        status = _provisioned(
            view, ConditionStatus.FALSE, CLOUD_INIT_ERROR, observed.cloud_init_error, now
        )
        return Decision(Action.NONE, status, retry_after=CLOUD_INIT_RETRY_SECONDS)
    wanted = spec_hash(view.spec, observed.cloud_init)
    stack = observed.stack
    if (
        stack is not None
        and stack.outputs.get("specHash") == wanted
        and not stack.pending_operations
        and not observed.instance_missing
    ):
        status = _with_outputs(view, stack.outputs, now)
        if view.recorded_hash != wanted:
            return Decision(Action.ADOPT, status, spec_hash=wanted)
        return Decision(Action.NONE, status, spec_hash=wanted)
    reason = REPLACING if stack is not None and stack.resource_count else PROVISIONING
    message = "replacing the instance" if reason == REPLACING else "creating the instance"
    if observed.instance_missing:
        reason, message = PROVISIONING, "the instance was deleted out of band; recreating it"
    status = _provisioned(view, ConditionStatus.FALSE, reason, message, now)
    return Decision(Action.UP, status, spec_hash=wanted)


def _missing_provider_block(spec: ProxySpec) -> str | None:
    if spec.provider is None:
        return "spec.provider is required for a Managed proxy"
    if spec.provider == ProviderName.KUBERNETES and spec.kubernetes is None:
        return "spec.kubernetes is required when provider is kubernetes"
    if spec.provider == ProviderName.GCP and spec.gcp is None:
        return "spec.gcp is required when provider is gcp"
    return None


def after_up(view: ProxyView, outputs: Mapping[str, Any], stack: str, now: str) -> ProxyStatus:
    """The status once `up` succeeded."""
    status = _with_outputs(view, outputs, now)
    return status.model_copy(update={"stack": stack})


def after_failure(view: ProxyView, error_class: ErrorClass, message: str, now: str) -> Decision:
    """Quota waits (never Failed), permanent latches Failed for this generation, transient retries.

    A deletion never latches: wedging an object that is being deleted would
    leave no way out but removing the finalizer by hand.
    """
    short = summarize_error(message)
    if error_class == ErrorClass.QUOTA:
        status = _provisioned(view, ConditionStatus.FALSE, QUOTA_EXCEEDED, short, now)
        return Decision(Action.NONE, status, retry_after=QUOTA_RETRY_SECONDS)
    if error_class == ErrorClass.PERMANENT and not view.deleting:
        status = _provisioned(view, ConditionStatus.FALSE, PERMANENT_ERROR, short, now)
        return Decision(Action.NONE, status, permanent=True)
    status = _provisioned(view, ConditionStatus.FALSE, TRANSIENT_ERROR, short, now)
    return Decision(Action.NONE, status)


# Most telling first: a cause, then any error line; pulumi's output ends in summaries.
_TELLING = (
    re.compile(r"is forbidden|permission denied|access denied|exceeded|quota", re.IGNORECASE),
    re.compile(r"invalid|not found", re.IGNORECASE),
    re.compile(r"error:", re.IGNORECASE),
)


def summarize_error(text: str) -> str:
    """The line of a pulumi failure worth showing in a condition."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in _TELLING:
        telling = [line for line in lines if pattern.search(line)]
        if telling:
            return telling[-1][:500]
    return lines[-1][:500] if lines else "unknown error"


def _with_outputs(view: ProxyView, outputs: Mapping[str, Any], now: str) -> ProxyStatus:
    ip, port = outputs.get("ip"), outputs.get("port")
    status = view.status.model_copy(
        update={
            "ip": ip,
            "port": int(port) if port is not None else None,
            "instance_id": outputs.get("instanceId"),
        }
    )
    if ip:
        status = _with_condition(
            status, view.generation, PROVISIONED, ConditionStatus.TRUE, CREATED, "", now
        )
    else:
        status = _with_condition(
            status,
            view.generation,
            PROVISIONED,
            ConditionStatus.FALSE,
            PROVISIONING,
            "the instance has no address yet",
            now,
        )
    return _observed(status, view)


def _provisioned(
    view: ProxyView, state: ConditionStatus, reason: str, message: str, now: str
) -> ProxyStatus:
    status = _with_condition(view.status, view.generation, PROVISIONED, state, reason, message, now)
    return _observed(status, view)


def _observed(status: ProxyStatus, view: ProxyView) -> ProxyStatus:
    return status.model_copy(update={"observed_generation": view.generation})


def _with_condition(
    status: ProxyStatus,
    generation: int,
    kind: str,
    /,
    state: ConditionStatus,
    reason: str,
    message: str,
    now: str,
) -> ProxyStatus:
    """Set one condition; its transition time moves only when its status changes."""
    return status.model_copy(
        update={
            "conditions": set_condition(
                status.conditions,
                kind,
                state,
                reason=reason,
                message=message,
                now=now,
                generation=generation,
            )
        }
    )


def set_condition(
    conditions: list[Condition],
    kind: str,
    state: ConditionStatus,
    *,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[Condition]:
    """The conditions with one type replaced (transition time kept when the status is unchanged)."""
    previous = find_condition(conditions, kind)
    since = previous.last_transition_time if previous and previous.status == state else now
    updated = Condition(
        type=kind,
        status=state,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return [c for c in conditions if c.type != kind] + [updated]
