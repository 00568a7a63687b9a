"""The watches one process runs, by resource, and whether each holds its whole collection.

    watches = Watches({"proxies": [Reflector(...)], "secrets": [Reflector(...), ...]})
    task = asyncio.create_task(watches.run())
    if not watches.synced("proxies"):
        ...   # a decision that counts Proxies waits

This is the one "synced" every decision that counts or compares objects reads
(as controller-runtime waits for its informers' caches): a resource is synced
while every reflector feeding it has applied a list and has not failed since.
After a start, a 410 Gone or any watch error it is unsynced until the relist
is applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from egress_proxies.kube.reflector import Reflector


class Watches:
    """Named groups of reflectors (a resource may need several: per namespace, per label)."""

    def __init__(self, reflectors: Mapping[str, Sequence[Reflector]]) -> None:
        self._reflectors = {name: tuple(group) for name, group in reflectors.items()}

    def __repr__(self) -> str:
        waiting = self.unsynced()
        state = f"unsynced: {', '.join(waiting)}" if waiting else "synced"
        return f"<Watches [{state}] resources: {', '.join(self._reflectors)}>"

    @property
    def reflectors(self) -> tuple[Reflector, ...]:
        """Every reflector, in the order given."""
        return tuple(r for group in self._reflectors.values() for r in group)

    def synced(self, *resources: str) -> bool:
        """Whether the named resources (all of them when none is named) are whole now."""
        names = resources or tuple(self._reflectors)
        return all(r.synced.is_set() for name in names for r in self._reflectors[name])

    def unsynced(self) -> list[str]:
        """The resources still waiting for a list (for logs and reprs)."""
        return [
            name
            for name, group in self._reflectors.items()
            if not all(r.synced.is_set() for r in group)
        ]

    async def wait_synced(self, *resources: str) -> None:
        """Return once the named resources (all when none is named) are synced."""
        names = resources or tuple(self._reflectors)
        while not self.synced(*names):
            for name in names:
                for reflector in self._reflectors[name]:
                    await reflector.synced.wait()

    async def run(self) -> None:
        """Run every reflector until cancelled."""
        await asyncio.gather(*(r.run() for r in self.reflectors))
