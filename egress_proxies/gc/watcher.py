"""Polls one provider's instances every few seconds and acts on `gc/watch_plan.py`'s plan.

The orphan sweep notices a vanished instance only every ten minutes; this
poll brings that down to one interval for the instances of live Proxies.
It acts as the sweep does: it deletes through the inventory, and asks the
handlers (the only stack writers) for a reconcile through the same trigger.
A poll that cannot read Proxies or the provider does nothing; a poll is run
only while the gate allows (kopf peering: one operator at work).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.gc.plan import LiveProxy
from egress_proxies.gc.sweeper import (
    Gate,
    Trigger,
    always_sweep,
    read_stack_records,
)
from egress_proxies.gc.watch_plan import plan_watch
from egress_proxies.kube import KubeApiError
from egress_proxies.providers.inventory import InstanceId, Inventory, InventoryError
from egress_proxies.stacks.backends import BackendUnavailableError, StateBackend

logger = logging.getLogger(__name__)

DEFAULT_WATCH_INTERVAL = datetime.timedelta(seconds=30)

ProxySource = Callable[[], Awaitable[Sequence[LiveProxy]]]  # every Proxy; KubeApiError/OSError


@dataclass(frozen=True)
class WatchReport:
    """What one poll did, or why it did nothing."""

    skipped: str | None = None
    deleted: tuple[str, ...] = ()
    reconciled: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()


class InstanceWatcher:
    """Deletes stopped instances of live Proxies and asks for vanished ones to be recreated."""

    def __init__(
        self,
        proxies: ProxySource,
        backend: StateBackend,
        inventory: Inventory,
        trigger: Trigger,
        *,
        interval: datetime.timedelta = DEFAULT_WATCH_INTERVAL,
        gate: Gate = always_sweep,
        clock: Clock | None = None,
    ) -> None:
        self._proxies = proxies
        self._backend = backend
        self._inventory = inventory
        self._trigger = trigger
        self._interval = interval
        self._gate = gate
        self._clock = clock or SystemClock()
        self._deleting: frozenset[InstanceId] = frozenset()
        self._asked: frozenset[str] = frozenset()
        self.last: WatchReport | None = None

    def __repr__(self) -> str:
        last = "never" if self.last is None else (self.last.skipped or "ok")
        return (
            f"<InstanceWatcher {self._inventory.provider} [interval: {self._interval} | "
            f"deleting: {len(self._deleting)} | awaiting recreate: {len(self._asked)} | "
            f"last: {last}]>"
        )

    async def run(self) -> None:
        """Poll every interval until cancelled, while the gate allows."""
        while True:
            await self._clock.sleep(self._interval.total_seconds())
            try:
                reason = await self._gate()
                if reason:
                    logger.debug("instance poll not run: %s", reason)
                    continue
                await self.poll()
            except Exception:
                logger.exception("instance poll failed")

    async def poll(self) -> WatchReport:
        """One poll: read, plan, act."""
        self.last = report = await self._poll()
        if report.skipped:
            logger.warning(
                "instance poll of %s skipped: %s", self._inventory.provider, report.skipped
            )
        return report

    async def _poll(self) -> WatchReport:
        try:
            proxies = await self._proxies()
        except (KubeApiError, OSError) as error:
            return WatchReport(skipped=f"listing Proxies failed: {error}")
        try:
            listing = await self._inventory.list_tagged()
        except InventoryError as error:
            return WatchReport(skipped=f"listing {self._inventory.provider} failed: {error}")
        try:
            stacks = await asyncio.to_thread(read_stack_records, self._backend)
        except BackendUnavailableError as error:
            return WatchReport(skipped=f"reading the stacks failed: {error}")
        plan = plan_watch(proxies, stacks, listing, deleting=self._deleting, asked=self._asked)
        deleted, reconciled, failures = [], [], []
        deleting, asked = set(plan.deleting), set(plan.asked)
        for instance in plan.delete:
            logger.warning(
                "instance %s of a live Proxy is stopped; deleting it so it is recreated",
                instance.instance_id,
            )
            try:
                await self._inventory.delete(instance.instance_id)
            except InventoryError as error:
                deleting.discard(instance.instance_id)
                failures.append(f"{instance.instance_id}: {error}")
                continue
            deleted.append(instance.instance_id)
        for stack in plan.reconcile:
            namespace, name = stack.split(".", 1)
            logger.warning("the instance of %s/%s is gone; re-reconciling", namespace, name)
            try:
                await self._trigger(namespace, name)
            except (KubeApiError, OSError) as error:
                asked.discard(stack)
                failures.append(f"{stack}: {error}")
                continue
            reconciled.append(stack)
        self._deleting, self._asked = frozenset(deleting), frozenset(asked)
        return WatchReport(
            deleted=tuple(deleted), reconciled=tuple(reconciled), failures=tuple(failures)
        )
