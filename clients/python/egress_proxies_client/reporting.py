"""Sending the leases' ok counts in the background: a thread for Pool, a task for AsyncPool.

Each wakes every `interval` seconds, or at once when a lease's batch is full, and
calls `flush`, which reports what is due for every paced lease. Neither sleeps
on the pool's injected clock: a virtual clock would never let it wake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

logger = logging.getLogger("egress_proxies_client")


class ThreadReporter:
    """A daemon thread running `flush` every `interval` seconds or when woken; started lazily."""

    def __init__(self, interval: float, flush: Callable[[], None]) -> None:
        self._interval = interval
        self._flush = flush
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "running" if self._thread is not None else "idle"
        return f"<ThreadReporter [{state}, every {self._interval:g} s]>"

    def wake(self) -> None:
        """Flush soon (a batch is full); starts the thread on first use."""
        self.touch()
        self._wake.set()

    def touch(self) -> None:
        """Make sure the thread runs, without waking it."""
        with self._lock:
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="egress-proxies-reports", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after one last flush) and wait for it."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self._flush()
            except Exception:  # a reporting failure must never kill the thread
                logger.exception("reporting ok counts failed")


class TaskReporter:
    """An asyncio task awaiting `flush` every `interval` seconds or when woken; started lazily."""

    def __init__(self, interval: float, flush: Callable[[], Awaitable[None]]) -> None:
        self._interval = interval
        self._flush = flush
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "running" if self._task is not None else "idle"
        return f"<TaskReporter [{state}, every {self._interval:g} s]>"

    def wake(self) -> None:
        """Flush soon; starts the task on first use (call from the pool's loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def touch(self) -> None:
        """Make sure the task runs, without waking it."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the task and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            self._wake.clear()
            try:
                await self._flush()
            except Exception:  # a reporting failure must never end the task
                logger.exception("reporting ok counts failed")
