"""A DIY backend in a shared store (a PostgreSQL table, an S3 bucket), read through its client.

`BlobBackend` knows pulumi's key layout (`checkpoint.Layout`); a `BlobStore`
knows one store's client: listing keys under a prefix, reading them and
deleting them. The pulumi CLI writes the stacks; the operator only reads
them, clears provably stale locks and prunes old history, as on file://.
Writes to these stores replace a key atomically, so there is nothing to
repair after a killed CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from egress_proxies.errors import EgressProxiesError
from egress_proxies.stacks.backends.checkpoint import (
    KEPT_HISTORY_FILES,
    NOBODY,
    GoneHolders,
    Layout,
    LockOwner,
    StackState,
    parse_checkpoint,
)
from egress_proxies.stacks.backends.url import BackendUrl

logger = logging.getLogger(__name__)


class BackendUnavailableError(EgressProxiesError, OSError):
    """The state backend cannot be used now: unreachable, refused, or missing its bucket or table.

    The message is one line that names the problem and holds no password.
    """


class BlobStore(Protocol):
    """One store's client: keys are relative to the backend's root."""

    def check(self) -> None:
        """Raise BackendUnavailableError unless the store answers and holds its bucket or table."""

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`."""

    def get(self, key: str) -> bytes | None:
        """One key's value; None if it does not exist."""

    def get_all(self, prefix: str) -> Mapping[str, bytes]:
        """Every key under `prefix` with its value, in as few round trips as the store allows."""

    def delete(self, keys: Sequence[str]) -> None:
        """Delete `keys` (a missing one is fine)."""


class BlobBackend:
    """A shared DIY backend for one Pulumi project, read through `store`."""

    def __init__(self, url: BackendUrl, store: BlobStore, project: str) -> None:
        self.url = url.text
        self.project = project
        self._store = store
        self._layout = Layout(project)

    def __repr__(self) -> str:
        return f"<BlobBackend {self.url} project={self.project} store={self._store!r}>"

    def check(self) -> None:
        """Raise BackendUnavailableError unless the backend can be used now."""
        self._store.check()

    def exists(self, stack: str) -> bool:
        """True if the stack has been created on the backend."""
        return self._store.get(self._layout.checkpoint(stack)) is not None

    def stacks(self) -> list[str]:
        """Names of every stack of the project (one listing)."""
        names = (self._layout.stack_of_checkpoint(k) for k in self._store.keys(self._layout.stacks))
        return sorted(name for name in names if name is not None)

    def read(self, stack: str) -> StackState | None:
        """Parse one stack's checkpoint; None if the stack does not exist."""
        document = self._store.get(self._layout.checkpoint(stack))
        return None if document is None else parse_checkpoint(stack, document)

    def states(self) -> list[StackState]:
        """Every stack's state, read in one sweep of the store."""
        states = []
        for key, document in sorted(self._store.get_all(self._layout.stacks).items()):
            name = self._layout.stack_of_checkpoint(key)
            if name is not None:
                states.append(parse_checkpoint(name, document))
        return states

    def locked(self, stack: str) -> bool:
        """True while any lock exists for the stack."""
        return any(
            self._layout.stack_of_lock(key) == stack
            for key in self._store.keys(self._layout.lock_prefix(stack))
        )

    def lock_holders(self) -> set[str]:
        """The hosts (pods) holding a lock on any stack."""
        owners = (LockOwner.parse(doc) for doc in self._store.get_all(self._layout.locks).values())
        return {owner.hostname for owner in owners if owner is not None}

    def clear_stale_locks(self, gone: GoneHolders = NOBODY) -> list[str]:
        """Delete every lock whose holder is provably gone (`LockOwner.gone`); what was cleared."""
        cleared: list[str] = []
        for key, document in self._store.get_all(self._layout.locks).items():
            stack = self._layout.stack_of_lock(key)
            owner = LockOwner.parse(document)
            if stack is None or owner is None or not owner.gone(gone):
                continue
            self._store.delete([key])
            cleared.append(stack)
            logger.warning(
                "cleared the stale lock of stack %s (pid %s on %s is gone)",
                stack,
                owner.pid,
                owner.hostname,
            )
        return cleared

    def repair(self, stack: str) -> list[str]:
        """Nothing to repair: a shared store replaces a key in one write."""
        return []

    def prune_history(self, stack: str, keep: int = KEPT_HISTORY_FILES) -> None:
        """Keep only the newest history entries of a stack (pulumi never deletes them)."""
        keys = sorted(self._store.keys(self._layout.history(stack)))
        old = keys[: max(0, len(keys) - keep * 2)]  # a .history.json + a .checkpoint.json each
        if old:
            self._store.delete(old)
