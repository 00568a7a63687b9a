"""Reflector sinks that keep a Fleet: Proxies, and the Secrets holding their credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from egress_proxies.catalog.fleet import Fleet


class ProxySink:
    """Writes reflected Proxies into a Fleet (the ReflectorSink protocol)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def replace(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """A relist: put every Proxy, forget those no longer listed."""
        listed = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects}
        for body in self._fleet.proxies():
            meta = body["metadata"]
            if (meta["namespace"], meta["name"]) not in listed:
                self._fleet.remove_proxy(meta["namespace"], meta["name"])
        for obj in objects:
            self._fleet.put_proxy(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        """A Proxy was added or changed."""
        self._fleet.put_proxy(obj)

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
