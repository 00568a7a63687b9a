"""The orphan GC: reads Proxies, stacks and inventories, plans, then acts loudly.

It runs every interval (first sweep one interval after start). Any read
that fails skips the whole sweep: it never guesses. It remembers from sweep
to sweep since when each stack has been without its Proxy (in memory: a
restart starts the count again), and destroys it after the minimum age. An operator restricted
to some namespaces refuses to sweep unless explicitly allowed, because its
view of live Proxies is incomplete.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.errors import EgressProxiesError
from egress_proxies.gc.plan import LiveProxy, StackRecord, SweepPlan, plan_sweep
from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import PROXIES
from egress_proxies.kube.selectors import LabelSelector
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import Inventory, InventoryError, InventoryListing
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.backends import BackendUnavailableError, StateBackend
from egress_proxies.stacks.naming import stack_name
from egress_proxies.stacks.runner import StackOperationError, StackRunner

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = datetime.timedelta(minutes=10)
DEFAULT_MIN_AGE = datetime.timedelta(minutes=10)

Trigger = Callable[[str, str], Awaitable[None]]  # (namespace, name) -> re-reconcile
Gate = Callable[[], Awaitable[str | None]]  # why not to sweep now, or None


async def always_sweep() -> str | None:
    """The gate of a standalone operator: nothing else can be sweeping."""
    return None


class SweepRefusedError(RuntimeError, EgressProxiesError):
    """The sweeper will not run with an incomplete view of the fleet."""


@dataclass(frozen=True)
class SweepReport:
    """What a sweep did (or why it did nothing)."""

    skipped: str | None = None
    deleted: tuple[str, ...] = ()
    destroyed: tuple[str, ...] = ()
    reconciled: tuple[str, ...] = ()
    failures: tuple[str, ...] = field(default=())
    seconds: float = 0.0


class SweepSpans(Protocol):
    """Where a sweep's spans go; the operator's tracing `Spans` satisfies it."""

    def gc_sweep(self) -> AbstractContextManager[object]:
        """The root span of one sweep."""
        ...

    def stack_operation(self, op: str, stack: str) -> AbstractContextManager[object]:
        """A child span for one stack operation (destroy)."""
        ...


class _Untraced:
    """No spans: a sweeper built without tracing."""

    def gc_sweep(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def stack_operation(self, op: str, stack: str) -> AbstractContextManager[object]:
        return contextlib.nullcontext()


class GcMetrics:
    """What the sweeper reports; the Prometheus recorder satisfies it structurally."""

    def deleted(self, provider: str, kind: str) -> None:
        """One instance deleted."""

    def swept(self, seconds: float, finished_at: float) -> None:
        """One sweep finished."""


class StackRecorder(Protocol):
    """Times stack operations and counts their results (telemetry's StackMetrics fits)."""

    def measure(self, op: str) -> AbstractContextManager[None]:
        """A block that records one operation."""
        ...


class _Unrecorded:
    def measure(self, op: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()


class Sweeper:
    """Deletes provably orphaned instances, destroys stacks of gone Proxies, re-reconciles drift."""

    def __init__(
        self,
        client: KubeClient,
        runner: StackRunner,
        inventories: Sequence[Inventory],
        trigger: Trigger,
        *,
        namespaces: tuple[str, ...] = (),
        allow_namespaced: bool = False,
        interval: datetime.timedelta = DEFAULT_INTERVAL,
        min_age: datetime.timedelta = DEFAULT_MIN_AGE,
        metrics: GcMetrics | None = None,
        stack_metrics: StackRecorder | None = None,
        spans: SweepSpans | None = None,
        gate: Gate = always_sweep,
        clock: Clock | None = None,
        shard: str | None = None,
        selector: LabelSelector | None = None,
    ) -> None:
        """`shard`, `selector`: a sharded operator's name and the Proxies it owns.

        A shard's inventories list only its own instances, so it sweeps even
        when it watches only some namespaces.
        """
        if namespaces and not allow_namespaced and shard is None:
            raise SweepRefusedError(
                "the operator watches only some namespaces, so the GC cannot tell orphans "
                "from other operators' instances; pass --gc-allow-namespaced to sweep anyway"
            )
        self._client = client
        self._runner = runner
        self._inventories = list(inventories)
        self._trigger = trigger
        self._namespaces = namespaces
        self._interval = interval
        self._min_age = min_age
        self._metrics = metrics or GcMetrics()
        self._stack_metrics = stack_metrics or _Unrecorded()
        self._spans = spans or _Untraced()
        self._gate = gate
        self._clock = clock or SystemClock()
        self._shard = shard
        self._selector = selector
        self.last: SweepReport | None = None
        self._orphaned_since: Mapping[str, datetime.datetime] = {}

    def __repr__(self) -> str:
        last = "never" if self.last is None else (self.last.skipped or "ok")
        providers = ",".join(inventory.provider for inventory in self._inventories)
        return (
            f"<Sweeper {providers} [interval: {self._interval} | min age: {self._min_age} | "
            f"orphaned stacks: {len(self._orphaned_since)} | last: {last}]>"
        )

    async def run(self) -> None:
        """Sweep every interval until cancelled; the first sweep waits one interval.

        Each turn asks the gate first: when several operators run, only the
        one kopf peering leaves at work sweeps; the others log why not.
        """
        while True:
            await self._clock.sleep(self._interval.total_seconds())
            try:
                reason = await self._gate()
                if reason:
                    logger.info("GC sweep not run: %s", reason)
                    continue
                await self.sweep()
            except Exception:
                logger.exception("GC sweep failed")

    async def sweep(self) -> SweepReport:
        """One sweep."""
        started = self._clock.monotonic()
        with self._spans.gc_sweep():
            report = await self._sweep()
        report = SweepReport(**{**report.__dict__, "seconds": self._clock.monotonic() - started})
        self.last = report
        self._metrics.swept(report.seconds, self._clock.time())
        if report.skipped:
            logger.warning("GC sweep skipped: %s", report.skipped)
        else:
            logger.info(
                "GC sweep finished in %.2fs: deleted %d, destroyed %d, reconciled %d, failed %d",
                report.seconds,
                len(report.deleted),
                len(report.destroyed),
                len(report.reconciled),
                len(report.failures),
            )
        return report

    async def _sweep(self) -> SweepReport:
        try:
            proxies = await list_live_proxies(self._client, self._namespaces, self._selector)
        except (KubeApiError, OSError) as error:
            return SweepReport(skipped=f"listing Proxies failed: {error}")
        listings: dict[ProviderName, InventoryListing] = {}
        for inventory in self._inventories:
            try:
                listings[inventory.provider] = await inventory.list_tagged()
            except InventoryError as error:
                return SweepReport(skipped=f"listing {inventory.provider} failed: {error}")
        try:
            stacks = await asyncio.to_thread(read_stack_records, self._runner.backend)
            # A lock of a pulumi killed mid-operation is otherwise cleared only by the
            # next operation on that stack, which never comes once the stack is removed.
            await asyncio.to_thread(self._runner.backend.clear_stale_locks)
        except BackendUnavailableError as error:
            return SweepReport(skipped=f"reading the stacks failed: {error}")
        plan = plan_sweep(
            proxies,
            stacks,
            listings,
            now=self._clock.utcnow(),
            min_age=self._min_age,
            orphaned_since=self._orphaned_since,
            shard=self._shard,
        )
        self._orphaned_since = plan.orphaned_since
        return await self._act(plan)

    async def _act(self, plan: SweepPlan) -> SweepReport:
        inventories = {inventory.provider: inventory for inventory in self._inventories}
        deleted, destroyed, reconciled, failures = [], [], [], []
        for instance in plan.delete:
            logger.warning(
                "WARNING: GC deleting orphaned instance provider=%s id=%s uid=%s",
                instance.provider,
                instance.instance_id,
                instance.uid_label,
            )
            try:
                await inventories[instance.provider].delete(instance.instance_id)
            except InventoryError as error:
                failures.append(f"{instance.instance_id}: {error}")
                continue
            deleted.append(instance.instance_id)
            self._metrics.deleted(instance.provider, instance.instance_id.split("/", 1)[0])
        for stack in plan.destroy_stacks:
            logger.warning("WARNING: GC destroying stack %s: its Proxy is gone", stack)
            try:
                with (
                    self._stack_metrics.measure("destroy"),
                    self._spans.stack_operation("destroy", stack),
                ):
                    await self._runner.destroy(stack)
            except StackOperationError as error:
                failures.append(f"{stack}: {error}")
                continue
            destroyed.append(stack)
        for stack in plan.reconcile:
            namespace, name = stack.split(".", 1)
            logger.warning("GC: the instance of %s/%s is gone; re-reconciling", namespace, name)
            try:
                await self._trigger(namespace, name)
            except (KubeApiError, OSError) as error:
                failures.append(f"{stack}: {error}")
                continue
            reconciled.append(stack)
        return SweepReport(
            deleted=tuple(deleted),
            destroyed=tuple(destroyed),
            reconciled=tuple(reconciled),
            failures=tuple(failures),
        )


async def list_live_proxies(
    client: KubeClient, namespaces: tuple[str, ...], selector: LabelSelector | None = None
) -> list[LiveProxy]:
    """Every Proxy (deleting or not) in `namespaces`, or in the cluster when none are given.

    All of them, whichever shard owns them; `owned` says which `selector` picks.
    """
    paths = [PROXIES.path(ns) for ns in namespaces] if namespaces else [PROXIES.path()]
    proxies: list[LiveProxy] = []
    for path in paths:
        listing = await client.get(path)
        proxies += [_live(item, selector) for item in listing.get("items", [])]
    return proxies


def read_stack_records(backend: StateBackend) -> list[StackRecord]:
    """What every stack on the backend owns, from its checkpoint (no pulumi process)."""
    records = []
    for state in backend.states():
        outputs = state.outputs
        records.append(
            StackRecord(
                name=state.name,
                uid=outputs.get(stack_outputs.PROXY_UID),
                provider=_provider(outputs.get(stack_outputs.PROVIDER)),
                instance_id=outputs.get(stack_outputs.INSTANCE_ID),
                shard=stack_outputs.text(outputs, stack_outputs.SHARD),
            )
        )
    return records


def _provider(value: object) -> ProviderName | None:
    try:
        return ProviderName(str(value))
    except ValueError:
        return None


def _live(item: dict[str, Any], selector: LabelSelector | None) -> LiveProxy:
    meta = item["metadata"]
    owned = selector is None or selector.matches(meta.get("labels"))
    return LiveProxy(
        stack=stack_name(meta["namespace"], meta["name"]), uid=meta["uid"], owned=owned
    )
