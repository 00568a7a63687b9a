"""A pool's conditions, decided from its spec, its members and this round's plan.

No I/O and no clock. Beside `Available` (enough Ready members for the
rollout's floor), `Progressing` and `ScalingLimited`, the summary that
GitOps tools and `kubectl wait` read (kstatus):

- `Ready`: `replicas` members, all Ready, all from the current template,
  and none still draining (a drained member holding a lease is removed only
  once it is released, or once the longest lease ran out).
- `Reconciling`: True while the pool is not Ready and not stalled; its
  reason says what it waits for.
- `Stalled`: True when a member failed permanently (its Provisioned
  condition reads PermanentError): the pool's template cannot be provisioned,
  and nothing will change until the template does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egress_proxies.model import (
    PENDING,
    READY,
    RECONCILING,
    STALLED,
    Condition,
    ConditionStatus,
)
from egress_proxies.pool_model import AVAILABLE, PROGRESSING, SCALING_LIMITED, ProxyPoolSpec
from egress_proxies.pools.plan import Member, Plan

# Reasons of Ready (False) and Reconciling (True).
REPLICAS_READY = "ReplicasReady"
PERMANENT_ERROR = "PermanentError"
REPLICAS_NOT_READY = "ReplicasNotReady"
ROLLING = "Rolling"
SCALING_DOWN = "ScalingDown"
DRAINING = "Draining"
RECONCILED = "Reconciled"
NO_PERMANENT_ERROR = "NoPermanentError"


@dataclass(frozen=True)
class Round:
    """What the conditions are decided from."""

    spec: ProxyPoolSpec
    members: Sequence[Member]
    step: Plan
    wanted_hash: str
    limited: str | None  # why autoscaling is held at its bounds, if it is
    generation: int


def _waiting_for(r: Round) -> tuple[str, str] | None:
    """Why the pool is not Ready, or None when it is."""
    active = [m for m in r.members if not m.draining]
    ready = sum(1 for m in active if m.ready)
    stale = max(sum(1 for m in active if m.template_hash != r.wanted_hash), r.step.stale)
    draining = len(r.members) - len(active)
    replicas = r.spec.replicas
    if stale:
        return ROLLING, f"{stale} proxies to replace, {ready} of {replicas} Ready"
    if ready < replicas or len(active) < replicas:
        return REPLICAS_NOT_READY, f"{ready} of {replicas} proxies Ready"
    if len(active) > replicas:
        return SCALING_DOWN, f"{len(active)} proxies, {replicas} wanted"
    if draining:
        return DRAINING, f"{draining} proxies still draining"
    return None


def _failure(r: Round) -> str | None:
    failed = sorted((m.name, m.failure) for m in r.members if m.failure and not m.draining)
    if not failed:
        return None
    name, failure = failed[0]
    return f"proxy {name} failed permanently: {failure}"


def pool_conditions(r: Round, previous: Sequence[Condition], now: str) -> list[Condition]:
    """Available, Progressing, ScalingLimited, Ready, Reconciling and Stalled for this round."""
    active = [m for m in r.members if not m.draining]
    ready = sum(1 for m in active if m.ready)
    spec = r.spec
    floor = max(spec.replicas - spec.strategy.max_unavailable, 0)
    settled = r.step.idle and r.step.stale == 0 and ready == len(active) == spec.replicas
    waiting = _waiting_for(r)
    failure = _failure(r)
    if failure is not None:
        summary = [
            (READY, False, PERMANENT_ERROR, failure),
            (RECONCILING, False, RECONCILED, ""),
            (STALLED, True, PERMANENT_ERROR, failure),
        ]
    elif waiting is not None:
        summary = [
            (READY, False, *waiting),
            (RECONCILING, True, *waiting),
            (STALLED, False, NO_PERMANENT_ERROR, ""),
        ]
    else:
        message = f"{ready} of {spec.replicas} proxies Ready and up to date"
        summary = [
            (READY, True, REPLICAS_READY, message),
            (RECONCILING, False, RECONCILED, ""),
            (STALLED, False, NO_PERMANENT_ERROR, ""),
        ]
    decided = [
        (
            AVAILABLE,
            ready >= floor and (ready > 0 or spec.replicas == 0),
            "MinimumReplicasReady" if ready >= floor else "MinimumReplicasUnavailable",
            f"{ready} of {spec.replicas} proxies Ready",
        ),
        (
            PROGRESSING,
            not settled,
            "Converged" if settled else "Converging",
            f"{len(active)} proxies, {r.step.stale} to replace, "
            f"{len(r.members) - len(active)} draining",
        ),
        (
            SCALING_LIMITED,
            r.limited is not None,
            r.limited or "WithinBounds",
            "demand asks for more than maxReplicas" if r.limited else "",
        ),
        *summary,
    ]
    return [
        _condition(previous, now, kind, true, reason, message, r.generation)
        for kind, true, reason, message in decided
    ]


def _condition(
    previous: Sequence[Condition],
    now: str,
    kind: str,
    true: bool,
    reason: str,
    message: str,
    generation: int,
) -> Condition:
    status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
    # The CRD's default (reason Pending, from 1970) is replaced, timed from now.
    before = next((c for c in previous if c.type == kind and c.reason != PENDING), None)
    moment = before.last_transition_time if before is not None and before.status == status else now
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=moment,
        observed_generation=generation,
    )
