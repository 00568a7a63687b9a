"""The summary conditions: Ready, Reconciling and Stalled, derived from the others.

GitOps tools (Argo CD, Flux) and `kpt` judge a custom resource the way
sigs.k8s.io/cli-utils' kstatus does: `status.observedGeneration` equal to
`metadata.generation`, then `Reconciling=True` means in progress,
`Stalled=True` means failed, and `Ready=True` means current. `kubectl wait
--for=condition=Ready` reads the same Ready condition.

They are a pure function of the Proxy's own conditions (Provisioned, owned
by the reconciler; Healthy, owned by the health engine), whether the pool
is draining it and whether it is being deleted. The status writer applies
`summarize` to every status it writes, as it derives the phase, so they can
never disagree with the conditions they summarize, and they change (and
cost a write) only when those do.
"""

from __future__ import annotations

from dataclasses import dataclass

from egress_proxies.model import (
    HEALTHY,
    INSTANCE_FAILED,
    PENDING,
    PERMANENT_ERROR,
    PROVISIONED,
    READY,
    RECONCILING,
    STALLED,
    ConditionStatus,
    ProxyStatus,
    find_condition,
)
from egress_proxies.proxies.reconcile import set_condition

# Reasons of the Ready condition (PermanentError and InstanceFailed are the Provisioned ones).
AVAILABLE = "Available"
PROVISIONING = "Provisioning"
AWAITING_HEALTH_CHECK = "AwaitingHealthCheck"
UNHEALTHY = "Unhealthy"
DRAINING = "Draining"
DELETING = "Deleting"
# Reasons of Reconciling and Stalled when False.
RECONCILED = "Reconciled"
NO_PERMANENT_ERROR = "NoPermanentError"


@dataclass(frozen=True)
class Summary:
    """The three summary conditions as (status, reason, message)."""

    ready: tuple[bool, str, str]
    reconciling: tuple[bool, str, str]
    stalled: tuple[bool, str, str] = (False, NO_PERMANENT_ERROR, "")


def summary(status: ProxyStatus, *, deleting: bool, draining: bool) -> Summary:
    """What Ready, Reconciling and Stalled say about a Proxy with this status."""
    provisioned = find_condition(status.conditions, PROVISIONED)
    healthy = find_condition(status.conditions, HEALTHY)
    done = (False, RECONCILED, "")
    if deleting:
        message = "the proxy is being deleted"
        return Summary((False, DELETING, message), (True, DELETING, message))
    if provisioned is None:
        message = "waiting for the operator to provision the proxy"
        return Summary((False, PROVISIONING, message), (True, PROVISIONING, message))
    if provisioned.reason == PERMANENT_ERROR:
        failed = (PERMANENT_ERROR, provisioned.message)
        return Summary((False, *failed), done, (True, *failed))
    if provisioned.status != ConditionStatus.TRUE:
        reason = INSTANCE_FAILED if provisioned.reason == INSTANCE_FAILED else PROVISIONING
        return Summary(
            (False, reason, provisioned.message),
            (True, provisioned.reason, provisioned.message),
        )
    if draining:
        return Summary((False, DRAINING, "its pool is draining the proxy: no new leases"), done)
    if healthy is None or healthy.status == ConditionStatus.UNKNOWN:
        message = "provisioned; waiting for the first health checks through the proxy"
        return Summary(
            (False, AWAITING_HEALTH_CHECK, message), (True, AWAITING_HEALTH_CHECK, message)
        )
    if healthy.status == ConditionStatus.FALSE:
        return Summary((False, UNHEALTHY, healthy.message), done)
    return Summary((True, AVAILABLE, "provisioned and healthy"), done)


def summarize(
    status: ProxyStatus, *, generation: int, deleting: bool, draining: bool, now: str
) -> ProxyStatus:
    """`status` with Ready, Reconciling and Stalled set from its other conditions.

    Each carries the generation the reconciler last observed (`generation`
    until it has observed one); a transition time moves only when its status does.
    """
    observed = status.observed_generation or generation
    # The CRD's default (reason Pending, from 1970) is replaced, timed from now.
    conditions = [c for c in status.conditions if c.reason != PENDING]
    result = summary(status, deleting=deleting, draining=draining)
    for kind, (true, reason, message) in (
        (READY, result.ready),
        (RECONCILING, result.reconciling),
        (STALLED, result.stalled),
    ):
        conditions = set_condition(
            conditions,
            kind,
            ConditionStatus.TRUE if true else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            now=now,
            generation=observed,
        )
    return status.model_copy(update={"conditions": conditions})
