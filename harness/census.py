"""A census of a namespace's Proxies kept by a watch of the test's own: every moment counted.

    async with ProxyCensus(kube, namespace, pool="big") as census:
        ...  # restart the operator, scale the pool
    assert census.peak <= replicas + max_surge

Sampling with list calls misses a Proxy that lived between two samples; the
census sees every ADDED, MODIFIED and DELETED event from one list on, so
`peak` is the most Proxies in service (neither deleting nor draining) that
existed at any one time, the count `replicas + maxSurge` bounds (as a
Deployment's surge does not count terminating pods); `peak_all` counts the
draining ones too.
It resumes a watch the server ended from the last version seen; a 410 Gone
means events were lost, and the census says so instead of guessing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import PROXIES
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL
from harness.cluster import wait_for


class CensusGapError(AssertionError):
    """The census's watch lost events (410 Gone): its counts are no proof."""


class ProxyCensus:
    """Counts a namespace's Proxies (of one pool, if given) at every watch event."""

    def __init__(self, kube: KubeClient, namespace: str, *, pool: str | None = None) -> None:
        self._kube = kube
        self._path = PROXIES.path(namespace)
        self._selector = f"{POOL_LABEL}={pool}" if pool else None
        self.live: set[str] = set()  # existing, not being deleted, not draining
        self.draining: set[str] = set()  # existing, not being deleted, draining
        self.created: list[str] = []  # every name first seen after the census began
        self.deleting: list[str] = []  # each name once, when it is first seen deleting or gone
        self.peak = 0
        self.peak_all = 0
        self.events = 0
        self.phases: dict[str, list[str]] = {}  # each Proxy's phases in order, repeats dropped
        self._known: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._version = ""
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return (
            f"<ProxyCensus [live: {len(self.live)} | draining: {len(self.draining)} | "
            f"peak: {self.peak} | peak with draining: {self.peak_all} | "
            f"created: {len(self.created)} | deleting: {len(self.deleting)}]>"
        )

    async def __aenter__(self) -> ProxyCensus:
        params = {"labelSelector": self._selector} if self._selector else None

        async def listed() -> dict[str, Any] | None:
            try:
                return await self._kube.request("GET", self._path, params=params)
            except KubeApiError as error:
                if error.status == 429:  # a new cluster's CRD storage still (re)initializing
                    return None
                raise

        listing = await wait_for(listed, timeout=60, interval=0.5)
        for item in listing.get("items") or []:
            self._see(item, deleted=False, listed=True)
        self._version = listing["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._watch(), name="proxy census")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._error is not None and kind is None:
            raise self._error

    def check(self) -> None:
        """Raise what the watch met (a gap), if anything."""
        if self._error is not None:
            raise self._error

    async def _watch(self) -> None:
        while True:
            try:
                async for event in self._kube.watch(
                    self._path,
                    resource_version=self._version,
                    timeout_seconds=60,
                    label_selector=self._selector,
                ):
                    self._apply(event)
            except CensusGapError as error:
                self._error = error
                return

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise CensusGapError(f"the census's watch ended: {obj.get('message', obj)}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self._version = version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.events += 1
            self._see(obj, deleted=kind == "DELETED", listed=False)

    def flapped(self) -> dict[str, list[str]]:
        """The Proxies whose phase left Ready after it had been Ready (not while deleting)."""
        return {
            name: phases
            for name, phases in self.phases.items()
            if "Ready" in phases and any(p != "Ready" for p in phases[phases.index("Ready") :])
        }

    def _see(self, obj: Mapping[str, Any], *, deleted: bool, listed: bool) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        if not deleted and not meta.get("deletionTimestamp"):
            phase = (obj.get("status") or {}).get("phase", "")
            seen = self.phases.setdefault(name, [])
            if not seen or seen[-1] != phase:
                seen.append(phase)
        if name not in self._known:
            self._known.add(name)
            if not listed:
                self.created.append(name)
        present = self.live | self.draining
        if deleted or meta.get("deletionTimestamp"):
            if name not in self.deleting and not (listed and name not in present):
                self.deleting.append(name)
            self.live.discard(name)
            self.draining.discard(name)
        elif DRAINING_ANNOTATION in (meta.get("annotations") or {}):
            self.live.discard(name)
            self.draining.add(name)
        else:
            self.live.add(name)
        self.peak = max(self.peak, len(self.live))
        self.peak_all = max(self.peak_all, len(self.live) + len(self.draining))
