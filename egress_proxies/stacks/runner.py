"""Runs one Pulumi stack per Proxy through the Automation API, off the event loop.

The operations themselves are in `stacks.operations`. The runner serialises
them per stack and runs them either in a thread pool of this process or in
a worker process (`stacks.worker`, when `worker_idle` > 0); either way
`concurrency` operations run at once. With the worker, this process never
imports pulumi (about 35 MiB of an operator's resident memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from egress_proxies.clock import Clock
from egress_proxies.errors import ClosedError
from egress_proxies.stacks.backends import StackState, StateBackend
from egress_proxies.stacks.errors import StackOperationError
from egress_proxies.stacks.settings import RunnerSettings
from egress_proxies.stacks.worker import StackWorker

__all__ = ["RunnerSettings", "StackOperationError", "StackRunner"]


class StackRunner:
    """Creates, updates and destroys per-Proxy stacks on the state backend."""

    def __init__(self, settings: RunnerSettings, clock: Clock | None = None) -> None:
        self._settings = settings
        self.backend: StateBackend = settings.backend()
        self.worker: StackWorker | None = None
        self._operations: Any = None
        self._pool: ThreadPoolExecutor | None = None
        if settings.worker_idle > 0:
            self.worker = StackWorker(settings, clock)
        else:
            # Imported here: with the worker, the operator needs no pulumi of its own.
            from egress_proxies.stacks.operations import StackOperations  # noqa: PLC0415

            self._operations = StackOperations(settings)
            self._pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="pulumi")
        self._locks: dict[str, asyncio.Lock] = {}
        self._running = 0
        self._closed = False

    def __repr__(self) -> str:
        where = repr(self.worker) if self.worker else "threads"
        return (
            f"<StackRunner {self.backend.url} [running: {self._running} | "
            f"concurrency: {self._settings.concurrency} | {where}]>"
        )

    async def close(self) -> None:
        """Wait for running operations, then release the threads or the worker.

        Every later operation raises ClosedError.
        """
        self._closed = True
        if self.worker is not None:
            await self.worker.close()
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown, wait=True)

    async def state(self, stack: str) -> StackState | None:
        """The stack's checkpoint as the backend holds it (no CLI process; off the event loop)."""
        return await asyncio.to_thread(self.backend.read, stack)

    async def up(
        self, stack: str, uid: str, program: Callable[[], None], *, refresh: bool = False
    ) -> Mapping[str, Any]:
        """Create or update the stack with `program`; return its outputs (secrets as None).

        `refresh` first reconciles the state with reality in the same pulumi
        process, for resources deleted out of band. With a worker process the
        program must pickle (a module-level function, or `outputs.BoundProgram`).
        """
        async with self._lock(stack):
            outputs: Mapping[str, Any] = await self._run("up", stack, uid, program, refresh)
            return outputs

    async def destroy(self, stack: str) -> None:
        """Destroy every resource of the stack and remove it; a missing stack is done already."""
        async with self._lock(stack):
            await self._run("destroy", stack)

    async def forget(self, stack: str) -> None:
        """Remove the stack from this backend and leave its resources running (`stack rm --force`).

        For a Proxy another shard has taken over: the resources are its now.
        """
        async with self._lock(stack):
            await self._run("forget", stack)

    def _lock(self, stack: str) -> asyncio.Lock:
        return self._locks.setdefault(stack, asyncio.Lock())

    async def _run(self, operation: str, stack: str, *args: Any) -> Any:
        if self._closed:
            raise ClosedError(f"pulumi {operation} of stack {stack}: the stack runner is closed")
        self._running += 1
        try:
            if self.worker is not None:
                return await self.worker.call(operation, stack, *args)
            loop = asyncio.get_running_loop()
            function = getattr(self._operations, operation)
            return await loop.run_in_executor(self._pool, function, stack, *args)
        finally:
            self._running -= 1
