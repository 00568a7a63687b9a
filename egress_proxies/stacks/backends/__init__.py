"""Where the stacks live: one Pulumi DIY backend, and one reader of it per URL scheme.

    file://      FileBackend over a directory (`file`)
    postgres://  BlobBackend over PostgresStore (`postgres`, psycopg 3)
    s3://        BlobBackend over S3Store (`s3`, boto3)
    gs://        BlobBackend over CloudStore (`cloud`, obstore; untested here)
    azblob://    BlobBackend over CloudStore (`cloud`, obstore; untested here)

The pulumi CLI writes the backend; everything the operator reads from it
(the stack inventory for the GC, outputs, pending operations, locks) goes
through a `StateBackend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from egress_proxies.stacks.backends.blob import BackendUnavailableError, BlobBackend
from egress_proxies.stacks.backends.checkpoint import GoneHolders, StackState
from egress_proxies.stacks.backends.file import FileBackend
from egress_proxies.stacks.backends.url import (
    AZBLOB,
    FILE,
    GS,
    POSTGRES,
    BackendUrl,
    BackendUrlError,
    parse_backend_url,
)

__all__ = [
    "BackendUnavailableError",
    "BackendUrl",
    "BackendUrlError",
    "FileBackend",
    "GoneHolders",
    "StackState",
    "StateBackend",
    "open_backend",
    "parse_backend_url",
]


class StateBackend(Protocol):
    """What the operator reads and tidies in a DIY backend; pulumi writes the rest."""

    @property
    def url(self) -> str:
        """The URL pulumi is given (no password in it)."""

    def check(self) -> None:
        """Raise BackendUnavailableError unless the backend can be used now."""

    def exists(self, stack: str) -> bool:
        """True if the stack has been created on the backend."""

    def stacks(self) -> list[str]:
        """Names of every stack of the project (a listing, no checkpoint read)."""

    def read(self, stack: str) -> StackState | None:
        """One stack's state; None if the stack does not exist."""

    def states(self) -> list[StackState]:
        """Every stack's state, for the GC's inventory."""

    def locked(self, stack: str) -> bool:
        """True while a lock exists for the stack."""

    def lock_holders(self) -> set[str]:
        """The hosts (pods) holding a lock on any stack."""

    def clear_stale_locks(self, gone: GoneHolders = ...) -> list[str]:
        """Delete the locks whose holders are provably gone (on this host, or by `gone`)."""

    def repair(self, stack: str) -> Sequence[Path | str]:
        """Delete what a killed CLI left that breaks the next command; what was deleted."""

    def prune_history(self, stack: str, keep: int = ...) -> None:
        """Keep only the newest history entries of the stack."""


def open_backend(url: BackendUrl | None, state_dir: Path, project: str) -> StateBackend:
    """The reader of `url`; None: the file:// backend under `state_dir` (created if missing)."""
    if url is None or url.kind == FILE:
        root = Path(url.text.removeprefix("file://")) if url else state_dir.resolve() / "backend"
        root.mkdir(parents=True, exist_ok=True)
        return FileBackend(root, project)
    if url.kind == POSTGRES:
        from egress_proxies.stacks.backends.postgres import PostgresStore  # noqa: PLC0415

        return BlobBackend(url, PostgresStore(url), project)
    if url.kind in (GS, AZBLOB):
        from egress_proxies.stacks.backends.cloud import CloudStore  # noqa: PLC0415

        return BlobBackend(url, CloudStore(url), project)
    from egress_proxies.stacks.backends.s3 import S3Store  # noqa: PLC0415

    return BlobBackend(url, S3Store(url), project)
