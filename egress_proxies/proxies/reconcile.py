"""The reconcile state machine: pure functions from (spec, status, observed) to a decision.

No I/O here. The kopf handlers gather what they observe (the stack's
checkpoint, the cloud-init Secret, the instance as the pod watch last saw
it, which providers are enabled), ask `decide` what to do, and carry the
`Decision` out: the status fields the reconciler owns (`owned_status`),
the annotations to set, the Events, the one stack operation (up, destroy or
none; release drops the finalizer), and when to look again. The outcome of
the operation comes back through `after_up`, `after_failure` or
`after_destroy_failure` as another Decision. Every step of a Proxy's
lifecycle (docs/operator.md) is a branch of these functions and is
unit-tested without a cluster.

A watched instance (a Squid pod) makes the Proxy Provisioned only once it
is ready; one that died, was deleted, or cannot start within the policy's
deadlines is replaced after a backoff that grows with each failure in a
row, and each failure is an Event.

How a condition is set (`set_condition`, `replace_condition`) lives here,
beside the machine that sets Provisioned most; the health pump (Healthy)
and the readiness summary (Ready, Reconciling, Stalled) set theirs with it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from egress_proxies.clock import k8s_time, parse_k8s_time
from egress_proxies.model import (
    HEALTHY,
    INSTANCE_FAILED,
    PERMANENT_ERROR,
    PROVISIONED,
    Backoff,
    Condition,
    ConditionStatus,
    Mode,
    ProviderName,
    ProxySpec,
    ProxyStatus,
    find_condition,
)
from egress_proxies.providers.instance import InstanceHealth, InstanceObservation
from egress_proxies.proxies.backoff import DEFAULT_POLICY, RetryPolicy
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.backends import StackState
from egress_proxies.stacks.errors import ErrorClass, summarize_error
from egress_proxies.stacks.naming import credentials_secret_name, stack_name
from egress_proxies.vocabulary import RECONCILE_HANDLED_ANNOTATION, SPEC_HASH_ANNOTATION

QUOTA_RETRY_SECONDS = 300.0
CLOUD_INIT_RETRY_SECONDS = 30.0
DESTROY_RETRY_SECONDS = 10.0


# Reasons of the Provisioned condition.
CREATED = "Created"
PROVISIONING = "Provisioning"
REPLACING = "Replacing"
DELETING = "Deleting"
EXTERNAL_ENDPOINT = "ExternalEndpoint"
QUOTA_EXCEEDED = "QuotaExceeded"
TRANSIENT_ERROR = "TransientError"
CLOUD_INIT_ERROR = "CloudInitError"
STARTING = "Starting"
INSTANCE_MISSING = "InstanceMissing"  # the Event when the GC or the GCE poll saw it gone
RECREATING = "Recreating"


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
    reconcile_request: str | None = None  # the GC's pending request to recreate the instance


@dataclass(frozen=True)
class Observed:
    """What the handler saw outside the Proxy: its stack and its cloud-init."""

    stack: StackState | None = None
    cloud_init: str | None = None
    cloud_init_error: str | None = None
    instance_missing: bool = False  # the GC saw the stack's instance gone from its provider
    watches_instances: bool = False  # the provider's instances are watched (pods)
    instance: InstanceObservation | None = None  # the watched instance as last seen
    provider_enabled: bool = True  # this operator has a program for the spec's provider


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the Proxy."""

    type: str  # "Normal" or "Warning"
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """What to do, the status to show meanwhile, and when to look again."""

    action: Action
    status: ProxyStatus  # only the fields `owned_status` takes are the reconciler's
    spec_hash: str | None = None
    retry_after: float | None = None  # seconds; None = wait for the next event
    permanent: bool = False  # the handler ends as failed until the spec changes
    annotations: Mapping[str, str] = field(default_factory=dict)  # set on the Proxy
    refresh: bool = False  # `up` must first refresh the stack from the provider
    replace_instance: InstanceObservation | None = None  # delete this incarnation before `up`
    events: tuple[Event, ...] = ()

    def owned_status(self, current: ProxyStatus) -> ProxyStatus:
        """`current` with the reconciler's fields taken from this decision."""
        return owned_status(current, self.status)

    @property
    def failure(self) -> str:
        """Why a permanent decision failed (the Provisioned condition's message)."""
        provisioned = find_condition(self.status.conditions, PROVISIONED)
        return (provisioned.message if provisioned else "") or "permanent error"


def owned_status(current: ProxyStatus, decided: ProxyStatus) -> ProxyStatus:
    """Take the reconciler's fields from `decided`, keep the health engine's from `current`.

    A new address means a new instance: its health is unknown until probed.
    """
    provisioned = find_condition(decided.conditions, PROVISIONED)
    conditions = replace_condition(current.conditions, PROVISIONED, provisioned)
    new_address = (decided.ip, decided.port) != (current.ip, current.port)
    if new_address:
        conditions = replace_condition(conditions, HEALTHY, None)
    return current.model_copy(
        update={
            "observed_generation": decided.observed_generation,
            "ip": decided.ip,
            "port": decided.port,
            "instance_id": decided.instance_id,
            "stack": decided.stack,
            "credentials_secret": decided.credentials_secret,
            "backoff": decided.backoff,
            "conditions": conditions,
            "latency_millis": None if new_address else current.latency_millis,
            "last_health_check_time": None if new_address else current.last_health_check_time,
        }
    )


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


def decide(
    view: ProxyView,
    observed: Observed,
    now: datetime.datetime,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> Decision:
    """The next step for a Proxy."""
    if view.deleting:
        return _decide_delete(view, observed, now)
    if view.spec.mode == Mode.EXTERNAL:
        return _decide_external(view, now)
    decision = _decide_managed(view, observed, now, policy)
    if decision.action == Action.UP and not observed.provider_enabled:
        message = f"provider {view.spec.provider} is not enabled"
        return after_failure(view, ErrorClass.PERMANENT, message, now, policy)
    if decision.action == Action.ADOPT and decision.spec_hash:
        return replace(decision, annotations={SPEC_HASH_ANNOTATION: decision.spec_hash})
    return decision


def _decide_delete(view: ProxyView, observed: Observed, now: datetime.datetime) -> Decision:
    if observed.stack is None:
        return Decision(Action.RELEASE, view.status)
    status = _provisioned(view, ConditionStatus.FALSE, DELETING, "destroying the stack", now)
    return Decision(Action.DESTROY, status)


def _decide_external(view: ProxyView, now: datetime.datetime) -> Decision:
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


def _decide_managed(
    view: ProxyView, observed: Observed, now: datetime.datetime, policy: RetryPolicy
) -> Decision:
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
        and stack.outputs.get(stack_outputs.SPEC_HASH) == wanted
        and not stack.pending_operations
        and not observed.instance_missing
    ):
        adopt = Action.ADOPT if view.recorded_hash != wanted else Action.NONE
        if observed.watches_instances and observed.instance is not None:
            return _decide_instance(view, observed.instance, stack, wanted, adopt, now, policy)
        return Decision(adopt, _with_outputs(view, stack.outputs, now), spec_hash=wanted)
    waiting = _backoff_wait(view, now)
    if waiting is not None:
        return waiting
    reason = REPLACING if stack is not None and stack.resource_count else PROVISIONING
    message = "replacing the instance" if reason == REPLACING else "creating the instance"
    if observed.instance_missing:
        reason, message = PROVISIONING, "the instance was deleted out of band; recreating it"
    status = _provisioned(view, ConditionStatus.FALSE, reason, message, now)
    events = (Event("Warning", INSTANCE_MISSING, message),) if observed.instance_missing else ()
    return Decision(
        Action.UP, status, spec_hash=wanted, refresh=observed.instance_missing, events=events
    )


def _decide_instance(
    view: ProxyView,
    instance: InstanceObservation,
    stack: StackState,
    wanted: str,
    adopt: Action,
    now: datetime.datetime,
    policy: RetryPolicy,
) -> Decision:
    """The stack is current: the Proxy is as ready as its instance."""
    if instance.health == InstanceHealth.READY:
        status = _with_outputs(view, {**stack.outputs, stack_outputs.IP: instance.ip}, now)
        return Decision(adopt, status, spec_hash=wanted)
    age = (now - instance.since).total_seconds()
    cause: str | None = None
    if instance.health in (InstanceHealth.DEAD, InstanceHealth.GONE):
        cause = instance.cause
    elif instance.health == InstanceHealth.STUCK:
        deadline = policy.start_timeout.total_seconds()
        cause = instance.cause if age >= deadline else None
    else:
        deadline = policy.ready_timeout.total_seconds()
        if age >= deadline:
            cause = f"not ready after {deadline:.0f}s" + (
                f" ({instance.cause})" if instance.cause else ""
            )
    if cause is None:
        waiting = "waiting for the instance to become ready" + (
            f": {instance.cause}" if instance.cause else ""
        )
        status = _with_outputs(view, {**stack.outputs, stack_outputs.IP: None}, now)
        status = _with_condition(
            status, view.generation, PROVISIONED, ConditionStatus.FALSE, STARTING, waiting, now
        )
        return Decision(adopt, status, spec_hash=wanted, retry_after=max(1.0, deadline - age))
    return _instance_failed(view, instance, cause, wanted, now, policy)


def _instance_failed(
    view: ProxyView,
    instance: InstanceObservation,
    cause: str,
    wanted: str,
    now: datetime.datetime,
    policy: RetryPolicy,
) -> Decision:
    """Record a dead instance once, then replace it when its backoff has passed."""
    backoff = view.status.backoff
    recorded = (
        backoff is not None
        and backoff.failed_instance == instance.key
        and backoff.next_retry_time is not None
    )
    if backoff is not None and recorded and backoff.next_retry_time is not None:
        remaining = _seconds_until(backoff.next_retry_time, now)
        if remaining > 0:
            message = f"{cause} (failure {backoff.failures}; retry at {backoff.next_retry_time})"
            status = _provisioned(view, ConditionStatus.FALSE, INSTANCE_FAILED, message, now)
            return Decision(Action.NONE, status, spec_hash=wanted, retry_after=remaining)
        message = f"replacing the instance: {cause}"
        status = _provisioned(view, ConditionStatus.FALSE, RECREATING, message, now)
        return Decision(
            Action.UP,
            status.model_copy(update={"ip": None}),
            spec_hash=wanted,
            refresh=True,
            replace_instance=instance,
            events=(Event("Normal", RECREATING, f"replacing {instance.instance_id}: {cause}"),),
        )
    status, delay = _count_failure(view, now, policy, failed_instance=instance.key)
    failures = status.backoff.failures if status.backoff else 1
    message = f"{cause} (failure {failures}; retry in {delay:.0f}s)"
    status = _with_condition(
        status, view.generation, PROVISIONED, ConditionStatus.FALSE, INSTANCE_FAILED, message, now
    )
    return Decision(
        Action.NONE,
        _observed(status.model_copy(update={"ip": None}), view),
        spec_hash=wanted,
        retry_after=delay,
        events=(Event("Warning", INSTANCE_FAILED, f"{instance.instance_id}: {cause}"),),
    )


def _count_failure(
    view: ProxyView,
    now: datetime.datetime,
    policy: RetryPolicy,
    *,
    failed_instance: str | None = None,
) -> tuple[ProxyStatus, float]:
    """The status with one more failure in a row recorded, and the delay before the retry."""
    previous = view.status.backoff
    in_window = (
        previous is not None
        and previous.last_failure_time is not None
        and now - parse_k8s_time(previous.last_failure_time) < policy.failure_window
    )
    failures = (previous.failures if previous is not None and in_window else 0) + 1
    delay = policy.delay(failures, view.uid)
    backoff = Backoff(
        failures=failures,
        last_failure_time=k8s_time(now),
        # Whole seconds, as a Kubernetes timestamp holds them.
        next_retry_time=k8s_time(now + datetime.timedelta(seconds=round(delay))),
        failed_instance=failed_instance,
        generation=view.generation,
    )
    return view.status.model_copy(update={"backoff": backoff}), delay


def _backoff_wait(view: ProxyView, now: datetime.datetime) -> Decision | None:
    """Hold a retry of this generation until its backoff has passed."""
    backoff = view.status.backoff
    if backoff is None or backoff.next_retry_time is None or backoff.generation != view.generation:
        return None
    remaining = _seconds_until(backoff.next_retry_time, now)
    if remaining <= 0:
        return None
    return Decision(Action.NONE, view.status, retry_after=remaining)


def _seconds_until(stamp: str, now: datetime.datetime) -> float:
    return (parse_k8s_time(stamp) - now).total_seconds()


def _missing_provider_block(spec: ProxySpec) -> str | None:
    if spec.provider is None:
        return "spec.provider is required for a Managed proxy"
    if spec.provider == ProviderName.KUBERNETES and spec.kubernetes is None:
        return "spec.kubernetes is required when provider is kubernetes"
    if spec.provider == ProviderName.GCP and spec.gcp is None:
        return "spec.gcp is required when provider is gcp"
    return None


def after_up(
    view: ProxyView,
    outputs: Mapping[str, Any],
    stack: str,
    now: datetime.datetime,
    spec_hash: str | None = None,
) -> Decision:
    """Once `up` succeeded: outputs shown, pending retry run, hash (and GC request) recorded."""
    status = _with_outputs(view, outputs, now)
    backoff = status.backoff
    if backoff is not None:
        backoff = backoff.model_copy(update={"next_retry_time": None})
    status = status.model_copy(
        update={
            "stack": stack,
            "backoff": backoff,
            "credentials_secret": credentials_secret_name(view.uid),
        }
    )
    annotations = {SPEC_HASH_ANNOTATION: spec_hash} if spec_hash else {}
    if view.reconcile_request is not None:
        annotations[RECONCILE_HANDLED_ANNOTATION] = view.reconcile_request
    return Decision(Action.NONE, status, spec_hash=spec_hash, annotations=annotations)


def after_destroy_failure(view: ProxyView) -> Decision:
    """A failed destroy keeps the finalizer and is tried again shortly; deletion never latches."""
    return Decision(Action.DESTROY, view.status, retry_after=DESTROY_RETRY_SECONDS)


def after_failure(
    view: ProxyView,
    error_class: ErrorClass,
    message: str,
    now: datetime.datetime,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> Decision:
    """Quota waits (never Failed), permanent latches Failed for this generation, transient retries.

    A transient failure retries after the policy's backoff, which grows with
    each failure in a row. A deletion never latches: wedging an object that
    is being deleted would leave no way out but removing the finalizer by hand.
    """
    short = summarize_error(message)
    if error_class == ErrorClass.QUOTA:
        status = _provisioned(view, ConditionStatus.FALSE, QUOTA_EXCEEDED, short, now)
        return Decision(Action.NONE, status, retry_after=QUOTA_RETRY_SECONDS)
    if error_class == ErrorClass.PERMANENT and not view.deleting:
        status = _provisioned(view, ConditionStatus.FALSE, PERMANENT_ERROR, short, now)
        return Decision(Action.NONE, status, permanent=True)
    counted, delay = _count_failure(view, now, policy)
    status = _with_condition(
        counted, view.generation, PROVISIONED, ConditionStatus.FALSE, TRANSIENT_ERROR, short, now
    )
    return Decision(Action.NONE, _observed(status, view), retry_after=delay)


def _with_outputs(
    view: ProxyView, outputs: Mapping[str, Any], now: datetime.datetime
) -> ProxyStatus:
    """The status a stack's outputs give, with the stack and credentials Secret it names.

    Both names follow from the Proxy alone, so a stack whose `up` finished
    after its handler was cancelled (an operator stopped mid-`up`) is adopted
    with them too: without the Secret's name the health probes would go
    without credentials and get 407 for ever.
    """
    ip, port = outputs.get(stack_outputs.IP), outputs.get(stack_outputs.PORT)
    status = view.status.model_copy(
        update={
            "ip": ip,
            "port": int(port) if port is not None else None,
            "instance_id": outputs.get(stack_outputs.INSTANCE_ID),
            "stack": stack_name(view.namespace, view.name),
            "credentials_secret": credentials_secret_name(view.uid),
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
    view: ProxyView, state: ConditionStatus, reason: str, message: str, now: datetime.datetime
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
    now: datetime.datetime,
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
                now=k8s_time(now),
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
    return replace_condition(conditions, kind, updated)


def replace_condition(
    conditions: list[Condition], kind: str, condition: Condition | None
) -> list[Condition]:
    """The conditions with the one of type `kind` replaced in place, appended, or (None) removed.

    In place: a list that changes order but not content would be a status write for nothing.
    """
    kept = [c for c in conditions if c.type != kind]
    if condition is None:
        return kept
    at = next((i for i, c in enumerate(conditions) if c.type == kind), len(conditions))
    return [*conditions[:at], condition, *conditions[at + 1 :]]
