"""The pool controller: gathers a pool's members and demand, asks the planners, carries it out.

One round per pool per timer tick. The members come from the operator's
watch-fed fleet (no list call), and a round does nothing until that watch is
synced (it has delivered its list since the start or the last relist), so a
restart never counts a pool from a partial view. Proxies it created, drained
or deleted but the watch has not shown yet are remembered ("expectations",
as the ReplicaSet controller keeps them), so a slow watch never doubles a
step; a create whose answer was lost is remembered too (its name was chosen
here), so it is never repeated under another name.
"""

from __future__ import annotations

import datetime
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.clock import Clock, SystemClock, k8s_time, parse_k8s_time
from egress_proxies.kube import ConflictError, KubeApiError, KubeClient, NotFoundError
from egress_proxies.kube.client import annotate
from egress_proxies.kube.resources import PROXIES, PROXY_POOLS
from egress_proxies.model import (
    KIND,
    PERMANENT_ERROR,
    PROVISIONED,
)
from egress_proxies.pool_model import (
    POOL_KIND,
    Demand,
    ProxyPoolSpec,
    ProxyPoolStatus,
    template_hash,
)
from egress_proxies.pools import autoscale
from egress_proxies.pools.conditions import Round, pool_conditions
from egress_proxies.pools.demand import DemandBook
from egress_proxies.pools.plan import Member, Plan, plan
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL, TEMPLATE_HASH_LABEL

logger = logging.getLogger(__name__)

EXPECTATION_SECONDS = 60.0
CONVERGED, UNSYNCED = "converged", "unsynced"  # a round's outcomes
WAIT_WINDOW_SECONDS = 60.0
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

PostEvent = Callable[[str, str, str], None]  # (type, reason, message)
Gate = Callable[[], Awaitable[str | None]]  # why this replica is not the one at work, or None


async def never_standing_by() -> str | None:
    """The gate of a standalone operator: it is always the one at work."""
    return None


class MemberSource(Protocol):
    """The Proxies the operator knows (the fleet)."""

    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        """The bodies of the Proxies labelled as members of the pool `namespace/pool`."""
        ...


class ScalingRecorder(Protocol):
    """Counts the pools' rounds, scaling decisions and replacements."""

    def round(self, pool: str, outcome: str) -> None:
        """One round: CONVERGED, or UNSYNCED (skipped on a partial view)."""
        ...

    def scaled(self, pool: str, direction: str) -> None:
        """One autoscaling decision."""
        ...

    def drained(self, pool: str, reason: str) -> None:
        """One Proxy drained (scale down, template roll, bans, age)."""
        ...


@dataclass
class PoolComponents:
    """What the controller uses, built by the composition root."""

    client: KubeClient
    members: MemberSource
    # Active leases per {proxy, target} pair: the LeaseStore's `pair_counts`.
    lease_counts: Callable[[], Awaitable[Mapping[ProxyKey, Mapping[str | None, int]]]]
    demand: DemandBook
    max_lease_seconds: float
    metrics: ScalingRecorder | None = None
    clock: Clock = field(default_factory=SystemClock)
    # Whether `members` holds every Proxy now (the fleet's Proxy watch is synced).
    synced: Callable[[], bool] = lambda: True
    # The resourceVersion up to which `members` has seen every change (None: unknown).
    watched_version: Callable[[], int | None] = lambda: None
    # Why this replica is not the one at work (kopf may run a round on a replica it is
    # about to pause, and a pause does not stop a round already running), or None.
    standby: Gate = never_standing_by


@dataclass(frozen=True)
class _Created:
    """A Proxy this controller created (or may have): counted until the watch has passed it."""

    until: datetime.datetime
    template_hash: str
    version: int | None = None  # the create's resourceVersion, once the server answered


@dataclass
class _Expectations:
    created: dict[str, _Created] = field(default_factory=dict)
    drained: dict[str, datetime.datetime] = field(default_factory=dict)  # name -> since
    deleted: dict[str, datetime.datetime] = field(default_factory=dict)  # name -> until


def parse_time(value: str | None) -> datetime.datetime | None:
    """A Kubernetes timestamp that may be absent."""
    return parse_k8s_time(value) if value else None


class PoolController:
    """Converges every ProxyPool; one `converge` call per pool per tick."""

    def __init__(self, components: PoolComponents) -> None:
        self._c = components
        self._expected: dict[str, _Expectations] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self._standing: set[str] = set()  # pools skipped while standing by, said once
        self.rounds = 0

    def __repr__(self) -> str:
        pending = sum(len(e.created) + len(e.deleted) for e in self._expected.values())
        return (
            f"<PoolController [pools: {len(self._expected)} | rounds: {self.rounds} | "
            f"pending: {pending}] {self._c.demand!r}>"
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered about a deleted pool."""
        self._expected.pop(f"{namespace}/{name}", None)
        self._written.pop(f"{namespace}/{name}", None)
        self._standing.discard(f"{namespace}/{name}")

    async def converge(self, body: Mapping[str, Any], post_event: PostEvent) -> None:
        """One round for one pool (none while the members' watch is not synced, or on a
        replica that is not the one at work)."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        pool = f"{namespace}/{name}"
        reason = await self._c.standby()
        if reason is not None:
            if pool not in self._standing:
                self._standing.add(pool)
                logger.info("pool %s: standing by: %s", pool, reason)
            return
        self._standing.discard(pool)
        if not self._c.synced():
            logger.debug("pool %s: the Proxy watch is not synced; no round", pool)
            if self._c.metrics is not None:
                self._c.metrics.round(pool, UNSYNCED)
            return
        self.rounds += 1
        raw_spec = body.get("spec") or {}
        try:
            spec = ProxyPoolSpec.model_validate(raw_spec)
        except ValidationError as error:
            logger.warning("pool %s: invalid spec: %s", pool, error)
            return
        status = _status_of(body)
        now = self._c.clock.utcnow()
        wanted_hash = template_hash(raw_spec.get("template") or {})
        expected = self._expected.setdefault(pool, _Expectations())
        pair_counts = await self._c.lease_counts()
        counts = {key: sum(pairs.values()) for key, pairs in pair_counts.items()}
        bodies = self._c.members.pool_members(namespace, name)
        members = self._members(bodies, namespace, spec, expected, counts, now)
        active = [m for m in members if not m.draining]
        demand = self._demand(pool, bodies, namespace, members, pair_counts, status, now)
        low_use_since = parse_time(status.low_use_since)
        last_scale = status.last_scale_time
        limited: str | None = None
        if spec.autoscale is not None:
            decision = autoscale.decide(
                spec.autoscale,
                autoscale.ScaleInput(
                    replicas=spec.replicas,
                    demand=demand,
                    busy=sum(1 for m in active if m.leases),
                    settled=all(m.ready for m in active) and len(active) >= spec.replicas,
                    low_use_since=low_use_since,
                    now=now,
                ),
            )
            low_use_since, limited = decision.low_use_since, decision.limited
            if decision.reason is not None and decision.replicas != spec.replicas:
                await self._scale(namespace, name, decision.replicas)
                post_event(
                    "Normal",
                    decision.reason,
                    f"replicas {spec.replicas} -> {decision.replicas}: {decision.message}",
                )
                if self._c.metrics is not None:
                    self._c.metrics.scaled(pool, decision.reason)
                logger.info(
                    "pool %s: %s to %d: %s",
                    pool,
                    decision.reason,
                    decision.replicas,
                    decision.message,
                )
                spec = spec.model_copy(update={"replicas": decision.replicas})
                last_scale = k8s_time(now)
        step = plan(spec, wanted_hash, members, now, self._c.max_lease_seconds)
        await self._carry_out(body, spec, wanted_hash, step, expected, post_event, now)
        await self._write_status(
            body,
            spec,
            members,
            step,
            demand,
            low_use_since,
            last_scale,
            limited,
            wanted_hash,
        )
        if self._c.metrics is not None:
            self._c.metrics.round(pool, CONVERGED)

    def _members(
        self,
        bodies: Sequence[Mapping[str, Any]],
        namespace: str,
        spec: ProxyPoolSpec,
        expected: _Expectations,
        counts: Mapping[ProxyKey, int],
        now: datetime.datetime,
    ) -> list[Member]:
        window_start = (now - _seconds(spec.rotation.ban_window_seconds)).timestamp()
        seen: set[str] = set()
        members: list[Member] = []
        for body in bodies:
            meta = body["metadata"]
            proxy = meta["name"]
            seen.add(proxy)
            if meta.get("deletionTimestamp") or proxy in expected.deleted:
                continue
            annotations = meta.get("annotations") or {}
            draining_since = parse_time(annotations.get(DRAINING_ANNOTATION))
            if draining_since is None:
                draining_since = expected.drained.get(proxy)
            else:
                expected.drained.pop(proxy, None)
            key = proxy_key(namespace, proxy)
            members.append(
                Member(
                    name=proxy,
                    created=parse_time(meta.get("creationTimestamp")) or now,
                    ready=(body.get("status") or {}).get("phase") == "Ready",
                    leases=counts.get(key, 0),
                    bans=self._c.demand.bans_since(key, window_start),
                    template_hash=(meta.get("labels") or {}).get(TEMPLATE_HASH_LABEL, ""),
                    draining_since=draining_since,
                    failure=_permanent_failure(body),
                )
            )
        watched = self._c.watched_version()
        for proxy, created in list(expected.created.items()):
            # Seen, or the watch has passed its creation without it (deleted since): done.
            passed = (
                created.version is not None and watched is not None and watched >= created.version
            )
            if proxy in seen or passed or created.until < now:
                del expected.created[proxy]
            else:
                members.append(Member(proxy, now, False, 0, 0, created.template_hash))
        for proxy, until in list(expected.deleted.items()):
            if proxy not in seen or until < now:
                del expected.deleted[proxy]
                self._c.demand.forget_proxy(proxy_key(namespace, proxy))
        return members

    def _demand(
        self,
        pool: str,
        bodies: Sequence[Mapping[str, Any]],
        namespace: str,
        members: Sequence[Member],
        pair_counts: Mapping[ProxyKey, Mapping[str | None, int]],
        status: ProxyPoolStatus,
        now: datetime.datetime,
    ) -> Demand:
        serving = {m.name for m in members if not m.draining}
        carriers = []
        for body in bodies:
            name, spec = body["metadata"]["name"], body.get("spec") or {}
            if (body.get("status") or {}).get("phase") == "Ready" and name in serving:
                carriers.append(
                    autoscale.Carrier(
                        max_leases=int(spec.get("maxLeases", 1)),
                        max_targets=spec.get("maxTargets"),
                        leases=pair_counts.get(proxy_key(namespace, name), {}),
                    )
                )
        # Waits counted since the last scaling step only: the step answered the earlier ones.
        last_scale = parse_time(status.last_scale_time)
        since = max(
            (now - _seconds(WAIT_WINDOW_SECONDS)).timestamp(),
            last_scale.timestamp() if last_scale else 0.0,
        )
        active = sum(
            sum(pair_counts.get(proxy_key(namespace, m.name), {}).values()) for m in members
        )
        return autoscale.pool_demand(carriers, active, self._c.demand.waits_since(pool, since))

    async def _scale(self, namespace: str, name: str, replicas: int) -> None:
        await self._c.client.patch(
            PROXY_POOLS.path(namespace, name),
            {"spec": {"replicas": replicas}},
        )

    async def _carry_out(
        self,
        body: Mapping[str, Any],
        spec: ProxyPoolSpec,
        wanted_hash: str,
        step: Plan,
        expected: _Expectations,
        post_event: PostEvent,
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        pool = f"{namespace}/{name}"
        # Drains first: a member replaced in this round leaves service before its
        # successor joins, so those in service never exceed replicas + maxSurge.
        for drain in step.drain:
            await annotate(
                self._c.client,
                PROXIES.path(namespace, drain.name),
                DRAINING_ANNOTATION,
                k8s_time(now),
            )
            expected.drained[drain.name] = now
            post_event("Normal", "Draining", f"proxy {drain.name}: {drain.reason}")
            logger.info("pool %s: draining proxy %s (%s)", pool, drain.name, drain.reason)
            if self._c.metrics is not None:
                self._c.metrics.drained(pool, drain.reason)
        for _ in range(step.create):
            proxy = _new_proxy(body, spec, wanted_hash)
            proxy_name = proxy["metadata"]["name"]
            # Expected before it is sent: a create whose answer is lost may have been made.
            until = now + _seconds(EXPECTATION_SECONDS)
            expected.created[proxy_name] = _Created(until, wanted_hash)
            try:
                made = await self._c.client.create(PROXIES.path(namespace), proxy)
            except ConflictError:
                # The name exists: this create (retried) made it, or another object holds it;
                # either way it is counted until the watch shows it or the expectation ends.
                logger.info("pool %s: proxy %s exists already", pool, proxy_name)
                continue
            except KubeApiError as error:
                if 400 <= error.status < 500:
                    del expected.created[proxy_name]  # refused: nothing was made
                raise
            expected.created[proxy_name] = _Created(until, wanted_hash, _version(made))
            logger.info("pool %s: created proxy %s", pool, proxy_name)
        if step.create:
            post_event("Normal", "Created", f"created {step.create} proxies")
        for proxy_name in step.delete:
            expected.deleted[proxy_name] = now + _seconds(EXPECTATION_SECONDS)
            if await self._c.client.delete(PROXIES.path(namespace, proxy_name)) is None:
                continue  # gone already: nothing was deleted, nothing to announce
            expected.drained.pop(proxy_name, None)
            post_event("Normal", "Deleted", f"proxy {proxy_name} drained and deleted")
            logger.info("pool %s: deleted drained proxy %s", pool, proxy_name)

    async def _write_status(
        self,
        body: Mapping[str, Any],
        spec: ProxyPoolSpec,
        members: Sequence[Member],
        step: Plan,
        demand: Demand,
        low_use_since: datetime.datetime | None,
        last_scale: str | None,
        limited: str | None,
        wanted_hash: str,
    ) -> None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        active = [m for m in members if not m.draining]
        ready = sum(1 for m in active if m.ready)
        generation = int(meta.get("generation", 1))
        conditions = pool_conditions(
            Round(spec, members, step, wanted_hash, limited, generation),
            _status_of(body).conditions,
            k8s_time(self._c.clock.utcnow()),
        )
        status = ProxyPoolStatus(
            replicas=len(active),
            ready_replicas=ready,
            leased_replicas=sum(1 for m in members if m.leases),
            draining_replicas=len(members) - len(active),
            updated_replicas=sum(1 for m in active if m.template_hash == wanted_hash),
            selector=f"{POOL_LABEL}={name}",
            observed_generation=generation,
            demand=demand,
            low_use_since=k8s_time(low_use_since) if low_use_since is not None else None,
            last_scale_time=last_scale,
            conditions=conditions,
        )
        document = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        pool = f"{namespace}/{name}"
        if self._written.get(pool) == document:
            return
        try:
            await self._c.client.patch(
                PROXY_POOLS.path(namespace, name, "status"),
                {"status": {**_NULLED, **document}},
            )
        except NotFoundError:
            return
        self._written[pool] = document


# Optional status fields a merge patch must clear when they are unset.
_NULLED: dict[str, None] = {"lowUseSince": None, "lastScaleTime": None}

_KNOWN = {f.alias or n for n, f in ProxyPoolStatus.model_fields.items()}


def _version(body: Mapping[str, Any]) -> int | None:
    """An object's resourceVersion as a number (etcd revisions are), or None."""
    version = (body.get("metadata") or {}).get("resourceVersion")
    return int(version) if isinstance(version, str) and version.isdigit() else None


def _seconds(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def _status_of(body: Mapping[str, Any]) -> ProxyPoolStatus:
    raw = body.get("status") or {}
    try:
        return ProxyPoolStatus.model_validate({k: v for k, v in raw.items() if k in _KNOWN})
    except ValidationError:
        return ProxyPoolStatus()


def _permanent_failure(body: Mapping[str, Any]) -> str | None:
    """Why a member failed permanently (its Provisioned condition), or None."""
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == PROVISIONED and condition.get("reason") == PERMANENT_ERROR:
            return str(condition.get("message") or PERMANENT_ERROR)
    return None


def _new_proxy(pool: Mapping[str, Any], spec: ProxyPoolSpec, wanted_hash: str) -> dict[str, Any]:
    meta = pool["metadata"]
    template = pool["spec"]["template"]
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
    labels = {
        **spec.template.metadata.labels,
        POOL_LABEL: meta["name"],
        TEMPLATE_HASH_LABEL: wanted_hash,
    }
    return {
        "apiVersion": PROXIES.api_version,
        "kind": KIND,
        "metadata": {
            "name": f"{meta['name']}-{suffix}",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": PROXY_POOLS.api_version,
                    "kind": POOL_KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": template["spec"],
    }
