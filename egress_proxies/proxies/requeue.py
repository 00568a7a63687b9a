"""Look at a Proxy again later: a timer per Proxy that rings it (`wakeup.py`) when it fires.

The state machine's `retry_after` ends up here rather than in a kopf
TemporaryError: kopf keeps a delayed handler asleep even when a new event
arrives, so a pod that became ready (or a fixed spec) would wait out the
whole backoff. A touched annotation is an ordinary update: the handlers run
at once on any event, and at the latest when the timer fires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from egress_proxies.clock import Clock, SystemClock, k8s_micro_time

logger = logging.getLogger(__name__)

Touch = Callable[[str, str, str], Awaitable[None]]  # (namespace, name, stamp)


class Requeue:
    """One pending wake-up per Proxy; a newer request replaces the older one."""

    def __init__(self, touch: Touch, clock: Clock | None = None) -> None:
        self._touch = touch
        self._clock = clock or SystemClock()
        self._timers: dict[tuple[str, str], asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        return f"<Requeue [{len(self._timers)} pending]>"

    def after(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the Proxy again in `delay` seconds (at least 1)."""
        self.cancel(namespace, name)
        key = (namespace, name)
        self._timers[key] = asyncio.create_task(
            self._fire(key, max(1.0, delay)), name=f"requeue {namespace}/{name}"
        )

    def cancel(self, namespace: str, name: str) -> None:
        """Drop a pending wake-up (the Proxy is deleted, or being handled now)."""
        timer = self._timers.pop((namespace, name), None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def close(self) -> None:
        """Cancel every pending wake-up."""
        timers = list(self._timers.values())
        self._timers.clear()
        for timer in timers:
            timer.cancel()
        for timer in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer

    async def _fire(self, key: tuple[str, str], delay: float) -> None:
        await self._clock.sleep(delay)
        self._timers.pop(key, None)
        stamp = k8s_micro_time(self._clock.utcnow())
        try:
            await self._touch(key[0], key[1], stamp)
        except Exception as error:  # a failed touch must not lose the wake-up
            logger.warning("requeue of %s/%s failed (%s); retrying in 5s", *key, error)
            self.after(key[0], key[1], 5.0)
