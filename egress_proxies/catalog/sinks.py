"""Reflector sinks that keep a Fleet: Proxies, and the Secrets holding their credentials."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from egress_proxies.catalog.fleet import Fleet

Selects = Callable[[Mapping[str, str]], bool]  # a Proxy's labels -> whether this fleet keeps it


def keep_all(_: Mapping[str, str]) -> bool:
    """The `selects` of an unsharded fleet: every Proxy."""
    return True


class ProxySink:
    """Writes reflected Proxies into a Fleet (the ReflectorSink protocol).

    `selects` keeps only some Proxies (a shard's, by label); one it stops
    selecting is forgotten as if deleted. With several sinks on one fleet
    (one per watched namespace) a relist forgets only its own `namespace`'s.
    """

    def __init__(
        self, fleet: Fleet, *, selects: Selects = keep_all, namespace: str | None = None
    ) -> None:
        self._fleet = fleet
        self._selects = selects
        self._namespace = namespace

    def replace(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """A relist: put every selected Proxy, forget those no longer listed."""
        listed = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects}
        for body in self._fleet.proxies():
            meta = body["metadata"]
            mine = self._namespace is None or meta["namespace"] == self._namespace
            if mine and (meta["namespace"], meta["name"]) not in listed:
                self._fleet.remove_proxy(meta["namespace"], meta["name"])
        for obj in objects:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        """A Proxy was added or changed."""
        meta = obj["metadata"]
        if self._selects(meta.get("labels") or {}):
            self._fleet.put_proxy(obj)
        else:
            self._fleet.remove_proxy(meta["namespace"], meta["name"])

    def remove(self, obj: Mapping[str, Any]) -> None:
        """A Proxy was deleted."""
        self._fleet.remove_proxy(obj["metadata"]["namespace"], obj["metadata"]["name"])


class SecretSink:
    """Writes one label's reflected Secrets into a Fleet (the ReflectorSink protocol)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._known: set[tuple[str, str]] = set()

    def replace(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """A relist: put every Secret, forget those of this label no longer listed."""
        listed = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects}
        for namespace, name in self._known - listed:
            self._fleet.remove_secret(namespace, name)
        self._known = set()
        for obj in objects:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        """A Secret was added or changed."""
        meta = obj["metadata"]
        self._known.add((meta["namespace"], meta["name"]))
        self._fleet.put_secret(meta["namespace"], meta["name"], obj.get("data"))

    def remove(self, obj: Mapping[str, Any]) -> None:
        """A Secret was deleted."""
        meta = obj["metadata"]
        self._known.discard((meta["namespace"], meta["name"]))
        self._fleet.remove_secret(meta["namespace"], meta["name"])
