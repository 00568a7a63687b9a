"""A list+watch reflector: one collection mirrored into a sink, no API call per read.

    reflector = Reflector(client, PROXIES.path(), sink)
    task = asyncio.create_task(reflector.run())   # reflector.synced is set once listed

It lists the collection (the sink gets `replace` with every object), then
watches from the list's resourceVersion (`put` / `remove` per event, bookmarks
only advance the version). A watch that ends is resumed from the last version
seen; 410 Gone (the version was compacted away) relists; any other error
waits a bounded, doubling backoff and relists. The decisions are the pure
`next_step`; `run` is the thin shell that carries them out.

`synced` says the sink holds the whole collection: it is set when a list has
been applied and cleared the moment a list or watch fails, since events may
be missed from then until the relist. A watch that the server ends cleanly
(its timeout) is resumed from the version seen and stays synced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol
from urllib.parse import urlencode

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.kube.client import JsonObject
from egress_proxies.kube.errors import KubeApiError

logger = logging.getLogger(__name__)

GONE = 410
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 30.0


class ReflectorSink(Protocol):
    """Where a reflector writes what it sees."""

    def replace(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """The full collection after a (re)list: forget anything not in it."""
        ...

    def put(self, obj: Mapping[str, Any]) -> None:
        """An object was added or modified."""
        ...

    def remove(self, obj: Mapping[str, Any]) -> None:
        """An object was deleted."""
        ...


class ListWatchClient(Protocol):
    """The two calls a reflector makes (KubeClient satisfies it)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """One request (a list: GET of a collection)."""
        ...

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> Any:  # an async iterator of watch events
        """Watch events from a resource version."""
        ...


class Action(Enum):
    """What the reflector does next."""

    LIST = "list"
    WATCH = "watch"


@dataclass(frozen=True)
class Step:
    """The next action, after how long, and the backoff to carry on with."""

    action: Action
    delay: float
    backoff: float


def next_step(outcome: BaseException | None, resource_version: str | None, backoff: float) -> Step:
    """Decide what follows a list or watch that ended with `outcome` (None: ended cleanly).

    A clean end resumes the watch at once (and resets the backoff); 410 Gone
    relists at once; any other error relists after `backoff` seconds and
    doubles it up to MAX_BACKOFF.
    """
    if outcome is None:
        if resource_version is None:
            return Step(Action.LIST, 0.0, INITIAL_BACKOFF)
        return Step(Action.WATCH, 0.0, INITIAL_BACKOFF)
    if isinstance(outcome, KubeApiError) and outcome.status == GONE:
        return Step(Action.LIST, 0.0, backoff)
    return Step(Action.LIST, backoff, min(backoff * 2, MAX_BACKOFF))


class WatchEventError(KubeApiError):
    """A watch stream carried an ERROR event (410 Gone when its version was compacted)."""


class Reflector:
    """Mirrors one collection (optionally label-selected) into a sink."""

    def __init__(
        self,
        client: ListWatchClient,
        path: str,
        sink: ReflectorSink,
        *,
        label_selector: str | None = None,
        watch_timeout: int = 300,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._path = path
        self._sink = sink
        self._label_selector = label_selector
        self._watch_timeout = watch_timeout
        self._clock = clock or SystemClock()
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.lists = 0
        self.errors = 0

    def __repr__(self) -> str:
        state = "synced" if self.synced.is_set() else "unsynced"
        return (
            f"<Reflector {self._path} [{state} | resourceVersion: {self.resource_version} | "
            f"lists: {self.lists} | errors: {self.errors}]>"
        )

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        step = Step(Action.LIST, 0.0, INITIAL_BACKOFF)
        while True:
            if step.delay:
                await self._clock.sleep(step.delay)
            outcome: BaseException | None = None
            try:
                if step.action is Action.LIST:
                    await self.list_once()
                else:
                    await self.watch_once()
            except Exception as error:  # any failure backs off and relists; none ends the tier
                outcome = error
                self.errors += 1
                self.synced.clear()
                logger.warning("reflector %s: %s", self._path, error)
            step = next_step(outcome, self.resource_version, step.backoff)

    async def list_once(self) -> None:
        """One list: replace the sink's contents and remember the resourceVersion."""
        params = {"labelSelector": self._label_selector} if self._label_selector else None
        body = await self._client.request("GET", self._path, params=params)
        self._sink.replace(body.get("items") or [])
        self.resource_version = body["metadata"]["resourceVersion"]
        self.lists += 1
        self.synced.set()

    async def watch_once(self) -> None:
        """One watch from the last resourceVersion until the server ends it."""
        assert self.resource_version is not None
        path = self._path
        if self._label_selector:
            path = f"{path}?{urlencode({'labelSelector': self._label_selector})}"
        async for event in self._client.watch(
            path, resource_version=self.resource_version, timeout_seconds=self._watch_timeout
        ):
            self._apply(event)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code", 500))
            raise WatchEventError(code, obj.get("reason", ""), obj.get("message", ""))
        if kind in ("ADDED", "MODIFIED"):
            self._sink.put(obj)
        elif kind == "DELETED":
            self._sink.remove(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
