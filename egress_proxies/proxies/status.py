"""The one writer of Proxy status.

Both the reconciler (Provisioned, address, stack, observedGeneration) and the
health engine (Healthy, latencyMillis, lastHealthCheckTime) hand their
changes to this writer; it applies them one at a time per Proxy to the last
status it wrote, derives the phase and the summary conditions (Ready,
Reconciling, Stalled: readiness.py) from the result in one place, and
patches the API only when something changed. Two writers racing over the
phase cannot happen: there is one. Each change it writes is also where the
Proxy's lifecycle Events come from (lifecycle.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.clock import Clock, SystemClock, k8s_time
from egress_proxies.events import EventSink, Regarding
from egress_proxies.kube import KubeApiError, NotFoundError
from egress_proxies.kube.resources import PROXIES
from egress_proxies.model import GROUP, KIND, VERSION, ProxyStatus, compute_phase
from egress_proxies.proxies.lifecycle import lifecycle_events
from egress_proxies.proxies.ports import ApiClient
from egress_proxies.proxies.readiness import summarize
from egress_proxies.vocabulary import DRAINING_ANNOTATION

logger = logging.getLogger(__name__)

Mutation = Callable[[ProxyStatus], ProxyStatus]

_KNOWN_FIELDS = {field.alias or name for name, field in ProxyStatus.model_fields.items()}


def regarding(body: Mapping[str, Any]) -> Regarding:
    """The Proxy of `body` as the subject of an Event."""
    meta = body["metadata"]
    return Regarding(f"{GROUP}/{VERSION}", KIND, meta["namespace"], meta["name"], meta["uid"])


def status_of(body: Mapping[str, Any]) -> ProxyStatus:
    """The typed status of a Proxy body (fields the model does not know are ignored)."""
    raw = body.get("status") or {}
    return ProxyStatus.model_validate({k: v for k, v in raw.items() if k in _KNOWN_FIELDS})


class StatusWriter:
    """Serializes status changes per Proxy and writes only differences."""

    def __init__(self, client: ApiClient, events: EventSink, clock: Clock | None = None) -> None:
        self._client = client
        self._events = events  # where the lifecycle Events go
        self._clock = clock or SystemClock()
        # The status last written per Proxy, with the UID of the Proxy it was
        # written for: a Proxy deleted and created again under its name starts over.
        # Kept as JSON: a parsed ProxyStatus costs about 4.4 KiB, its JSON 0.7 KiB,
        # and it is read back only when the Proxy's status changes again.
        self._written: dict[ProxyKey, tuple[str, bytes]] = {}
        self._locks: dict[ProxyKey, asyncio.Lock] = {}
        self.patches = 0

    def __repr__(self) -> str:
        return f"<StatusWriter [proxies: {len(self._written)} | patches: {self.patches}]>"

    async def update(
        self, body: Mapping[str, Any], mutate: Mutation, *, deleting: bool = False
    ) -> ProxyStatus:
        """Apply `mutate` to the Proxy's current status and patch if the result differs."""
        meta = body["metadata"]
        key = proxy_key(meta["namespace"], meta["name"])
        async with self._locks.setdefault(key, asyncio.Lock()):
            current = self._last(key, meta["uid"])
            if current is None:
                current = status_of(body)
            updated = summarize(
                mutate(current),
                generation=int(meta.get("generation", 1)),
                deleting=deleting,
                draining=DRAINING_ANNOTATION in (meta.get("annotations") or {}),
                now=k8s_time(self._clock.utcnow()),
            )
            updated = updated.model_copy(
                update={"phase": compute_phase(updated, deleting=deleting)}
            )
            if updated == current:
                return current
            if not await self._patch(meta["namespace"], meta["name"], updated):
                return updated
            self._written[key] = (meta["uid"], updated.model_dump_json(by_alias=True).encode())
            for event in lifecycle_events(current, updated):
                self._events.record(regarding(body), event.type, event.reason, event.message)
            return updated

    def latest(self, namespace: str, name: str, uid: str) -> ProxyStatus | None:
        """The status last written for the Proxy (newer than a body kopf may still hold)."""
        return self._last(proxy_key(namespace, name), uid)

    def _last(self, key: ProxyKey, uid: str) -> ProxyStatus | None:
        held = self._written.get(key)
        if held is None or held[0] != uid:
            return None
        return ProxyStatus.model_validate_json(held[1])

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is known about a deleted Proxy."""
        key = proxy_key(namespace, name)
        self._written.pop(key, None)
        self._locks.pop(key, None)

    async def reread_written(self) -> None:
        """Take each Proxy's status from the API again: another replica may have written since.

        Called when this replica starts work after others may have
        (`operator/takeover.py`). The API's status, not the body kopf holds:
        kopf's body may predate this replica's own last write, and a status
        built on it would undo fields written since (a lost `credentialsSecret`
        leaves a Proxy probed without credentials for good). A Proxy gone from
        the API is forgotten; one the read fails for keeps what this replica
        wrote, the newest it knows.
        """
        for key in list(self._written):
            namespace, name = key.split("/", 1)
            async with self._locks.setdefault(key, asyncio.Lock()):
                try:
                    body = await self._client.get(PROXIES.path(namespace, name))
                except NotFoundError:
                    self._written.pop(key, None)
                    continue
                except (KubeApiError, OSError) as error:  # TransportError is an OSError
                    logger.warning("status of %s not read again: %s", key, error)
                    continue
                uid = body["metadata"]["uid"]
                self._written[key] = (uid, status_of(body).model_dump_json(by_alias=True).encode())

    async def _patch(self, namespace: str, name: str, status: ProxyStatus) -> bool:
        """Write the whole status; False when the Proxy is gone."""
        # Nulls in a merge patch delete fields, so the patch is the whole status
        # (conditions are replaced as a list: their unset fields are simply left out).
        document = status.model_dump(mode="json", by_alias=True)
        document["conditions"] = [
            condition.model_dump(mode="json", by_alias=True, exclude_none=True)
            for condition in status.conditions
        ]
        body = {"status": document}
        try:
            await self._client.patch(PROXIES.path(namespace, name, "status"), body)
        except NotFoundError:
            return False
        self.patches += 1
        logger.debug("status of %s/%s: phase %s", namespace, name, status.phase)
        return True
