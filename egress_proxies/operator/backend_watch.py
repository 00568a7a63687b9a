"""The state backend's health: checked every few seconds, and readiness false while it fails.

An unreachable backend, refused credentials or a missing bucket or table
make every stack operation fail (retried with backoff, nothing written); the
watch says why in one line when it starts failing, again when it recovers,
and `problem` keeps the operator's /readyz at 503 meanwhile, so a Service
or a rolling update never counts on an operator that cannot save a stack.
"""

from __future__ import annotations

import asyncio
import logging

from egress_proxies.clock import Clock
from egress_proxies.stacks.backends import BackendUnavailableError, StateBackend

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 10.0  # seconds between checks
_NOT_CHECKED = "the state backend has not been checked yet"


class BackendWatch:
    """Checks the state backend every `interval` seconds; `problem` is why it fails, or None."""

    def __init__(self, backend: StateBackend, clock: Clock, interval: float = CHECK_INTERVAL):
        self._backend = backend
        self._clock = clock
        self._interval = interval
        self.problem: str | None = _NOT_CHECKED

    def __repr__(self) -> str:
        return f"<BackendWatch {self._backend.url} [{self.problem or 'ok'}]>"

    async def check(self) -> str | None:
        """Check once; log a change of state. Returns the problem, or None."""
        try:
            await asyncio.to_thread(self._backend.check)
        except BackendUnavailableError as error:
            problem: str | None = str(error)
        else:
            problem = None
        if problem is not None and problem != self.problem:
            logger.error("%s; stack operations wait for it (readiness false)", problem)
        elif problem is None and self.problem not in (None, _NOT_CHECKED):
            logger.warning("state backend %s answers again", self._backend.url)
        self.problem = problem
        return problem

    async def run(self) -> None:
        """Check every interval until cancelled."""
        while True:
            await self.check()
            await self._clock.sleep(self._interval)
