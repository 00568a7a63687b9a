"""A crawler's lease traffic for tests that restart or kill what serves it.

`LeaseHolder` holds up to `held` leases on one pool: each turn it ends the
oldest once it holds that many, leases anew and renews every lease it holds,
recording each status. Where its requests go is the subclass's `_call`: the
replica that answers /readyz, or one Service URL. A call that got no answer
returns None and is not recorded in the statuses; `trace` keeps every call in
order (seconds since the holder began, what it asked, the status or None, and
the error code of a refusal), so a test that fails waiting on the holder can
say what it saw: `unusual` names the calls not answered as expected.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["LeaseHolder"]


class LeaseHolder:
    """Leases, renews and ends leases on `pool` until stopped; see the module docstring."""

    def __init__(self, pool: str, *, held: int, pace_seconds: float) -> None:
        self._pool = pool
        self._most = held
        self._pace = pace_seconds
        self.statuses: list[int] = []  # every answer to a lease or an end
        self.renewals: list[int] = []  # every answer to a renewal
        self.leases: list[str] = []  # every lease granted
        self.held: list[str] = []  # the leases held now
        # (seconds, what, status or None, the error code of a refusal or "")
        self.trace: list[tuple[float, str, int | None, str]] = []
        self._began = time.monotonic()

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        raise NotImplementedError

    def since(self, seconds: float) -> list[tuple[float, str, int | None, str]]:
        """The calls made from `seconds` (since the holder began) on."""
        return [call for call in self.trace if call[0] >= seconds]

    def unusual(self) -> list[tuple[float, str, int | None, str]]:
        """Every call not answered as a healthy service answers it (no answer, or a status
        other than `lease` 201, `renew` 200, `end` 204), each with the call made before it."""
        expected = {"lease": 201, "renew": 200, "end": 204}
        picked: list[tuple[float, str, int | None, str]] = []
        for index, call in enumerate(self.trace):
            if call[2] != expected[call[1]]:
                if index and self.trace[index - 1] not in picked:
                    picked.append(self.trace[index - 1])
                picked.append(call)
        return picked

    def now(self) -> float:
        """Seconds since the holder began: the clock of `trace`."""
        return round(time.monotonic() - self._began, 2)

    async def _traced(
        self, what: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        answered = await self._call(method, path, body)
        if answered is None:
            self.trace.append((self.now(), what, None, ""))
        else:
            status, answer = answered
            code = str(answer.get("error", "")) if status >= 300 else ""
            self.trace.append((self.now(), what, status, code))
        return answered

    async def crawl(self, stop: asyncio.Event) -> None:
        """Hold up to `held` leases: renew them, and end the oldest and lease anew, until `stop`."""
        while not stop.is_set():
            if len(self.held) >= self._most:
                ended = await self._traced("end", "DELETE", f"/v1/leases/{self.held[0]}")
                if ended is not None:
                    self.statuses.append(ended[0])
                    self.held.pop(0)
            lease = {"selector": {"pool": self._pool}, "ttlSeconds": 120, "target": "example.com"}
            answered = await self._traced("lease", "POST", "/v1/leases", lease)
            if answered is not None:
                status, body = answered
                self.statuses.append(status)
                if status == 201:
                    self.held.append(body["leaseId"])
                    self.leases.append(body["leaseId"])
            for lease_id in self.held:
                renewed = await self._traced(
                    "renew", "POST", f"/v1/leases/{lease_id}/renew", {"ttlSeconds": 120}
                )
                if renewed is not None:
                    self.renewals.append(renewed[0])
            await asyncio.sleep(self._pace)
