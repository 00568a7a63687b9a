"""The seams of the handler shell: what it needs from the API server, the stacks and the status.

`shell.py` is typed against these Protocols, not against `KubeClient`,
`StackRunner` and `StatusWriter`, so its unit tests run it over small fakes
while the e2e tests run it over the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from egress_proxies.model import ProxyStatus
from egress_proxies.stacks.backends import StackState

JsonObject = dict[str, Any]


class ApiClient(Protocol):
    """The Kubernetes API calls the handlers make (paths as the REST API spells them)."""

    async def get(self, path: str) -> JsonObject:
        """The object at `path`; NotFoundError if there is none."""
        ...

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """Create `body` in the collection at `path`."""
        ...

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """Merge-patch the object at `path`."""
        ...

    async def delete(self, path: str, *, grace_seconds: int | None = None) -> JsonObject | None:
        """Delete the object at `path` (None when it was gone already)."""
        ...

    async def request(
        self, method: str, path: str, *, body: JsonObject | None = None
    ) -> JsonObject:
        """Any other call, e.g. a DELETE with preconditions."""
        ...


class Stacks(Protocol):
    """The per-Proxy Pulumi stacks."""

    async def state(self, stack: str) -> StackState | None:
        """The stack's last checkpoint; None when it does not exist."""
        ...

    async def up(
        self, stack: str, uid: str, program: Callable[[], None], *, refresh: bool = False
    ) -> Mapping[str, Any]:
        """Create or update the stack's resources; its outputs. StackOperationError on failure."""
        ...

    async def destroy(self, stack: str) -> None:
        """Destroy the stack's resources and remove it. StackOperationError on failure."""
        ...

    async def forget(self, stack: str) -> None:
        """Remove the stack from the backend, leaving its resources to another owner."""
        ...


class StatusSink(Protocol):
    """Where a Proxy's status goes: the one writer, serialized per Proxy."""

    async def update(
        self,
        body: Mapping[str, Any],
        mutate: Callable[[ProxyStatus], ProxyStatus],
        *,
        deleting: bool = False,
    ) -> ProxyStatus:
        """Apply `mutate` to the current status and write it when it changed."""
        ...

    def latest(self, namespace: str, name: str, uid: str) -> ProxyStatus | None:
        """The status last written for this Proxy (this UID), if this sink wrote one."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is known about a deleted Proxy."""
        ...
