"""The pool's pure decision: from its spec and its members, which Proxies to create, drain, delete.

No I/O and no clock: the controller (`pools/controller.py`) gathers the
members, calls `plan`, and carries the result out. Rules, in order:

- A member is *stale* when its template hash differs from the pool's (a
  template roll), or it was banned `maxBans` times within the window, or it
  is older than `maxAge` (rotation). Stale members are replaced surge-first.
- Members above `replicas` are drained: stale ones first, then idle ones,
  then the least healthy, then the oldest; fresh ones only while there are
  more fresh ones than `replicas`.
- Draining a Ready member never takes the Ready count below
  `max(replicas - maxUnavailable, rotation.minAvailable)`.
- New members are created up to `replicas` fresh ones, never more than
  `replicas + maxSurge` non-draining ones.
- A draining member is deleted once it holds no lease, or once the longest
  lease it could hold has run out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from egress_proxies.pool_model import ProxyPoolSpec

BANNED, TOO_OLD, TEMPLATE_CHANGED, SCALED_DOWN = "Banned", "MaxAge", "TemplateChanged", "ScaledDown"


@dataclass(frozen=True)
class Member:
    """One Proxy of the pool as the controller sees it."""

    name: str
    created: datetime
    ready: bool
    leases: int
    bans: int  # within the rotation's ban window
    template_hash: str
    draining_since: datetime | None = None
    failure: str | None = None  # why it failed permanently (PermanentError), if it did

    @property
    def draining(self) -> bool:
        """Whether the pool is already removing it."""
        return self.draining_since is not None


@dataclass(frozen=True)
class Drain:
    """A member to drain, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What the controller does this round."""

    create: int = 0
    drain: tuple[Drain, ...] = ()
    delete: tuple[str, ...] = ()
    stale: int = 0  # non-draining members still to be replaced

    @property
    def idle(self) -> bool:
        """Nothing to do."""
        return not (self.create or self.drain or self.delete)


def stale_reason(
    spec: ProxyPoolSpec, template_hash: str, member: Member, now: datetime
) -> str | None:
    """Why a member must be replaced, or None."""
    if member.template_hash != template_hash:
        return TEMPLATE_CHANGED
    rotation = spec.rotation
    if rotation.max_bans is not None and member.bans >= rotation.max_bans:
        return BANNED
    max_age = rotation.max_age_seconds
    if max_age is not None and (now - member.created).total_seconds() >= max_age:
        return TOO_OLD
    return None


def plan(
    spec: ProxyPoolSpec,
    template_hash: str,
    members: Sequence[Member],
    now: datetime,
    max_lease_seconds: float,
) -> Plan:
    """The next step towards `spec.replicas` fresh, Ready members."""
    desired = spec.replicas
    active = [m for m in members if not m.draining]
    reasons = {m.name: stale_reason(spec, template_hash, m, now) for m in active}
    floor = max(desired - spec.strategy.max_unavailable, min(spec.rotation.min_available, desired))
    ready = sum(1 for m in active if m.ready)
    drains: list[Drain] = []

    def removal_order(m: Member) -> tuple[bool, bool, bool, datetime]:
        return reasons[m.name] is None, m.leases > 0, m.ready, m.created

    def try_drain(m: Member, reason: str) -> bool:
        nonlocal ready
        if m.ready and ready - 1 < floor:
            return False
        ready -= 1 if m.ready else 0
        drains.append(Drain(m.name, reason))
        return True

    remaining = sorted(active, key=removal_order)
    excess = len(active) - desired
    # Fresh members go only when there are more of them than wanted: stale ones are replaced.
    fresh_excess = sum(1 for m in active if reasons[m.name] is None) - desired
    for m in list(remaining):
        if excess <= 0:
            break
        is_fresh = reasons[m.name] is None
        if is_fresh and fresh_excess <= 0:
            continue
        if try_drain(m, reasons[m.name] or SCALED_DOWN):
            remaining.remove(m)
            excess -= 1
            fresh_excess -= 1 if is_fresh else 0
    for m in list(remaining):
        reason = reasons[m.name]
        if reason is not None and try_drain(m, reason):
            remaining.remove(m)
    fresh = sum(1 for m in remaining if reasons[m.name] is None)
    create = max(0, min(desired - fresh, desired + spec.strategy.max_surge - len(remaining)))
    delete = tuple(
        m.name
        for m in members
        if m.draining_since is not None
        and (m.leases == 0 or (now - m.draining_since).total_seconds() >= max_lease_seconds)
    )
    stale = sum(1 for m in remaining if reasons[m.name] is not None)
    return Plan(create=create, drain=tuple(drains), delete=delete, stale=stale)
