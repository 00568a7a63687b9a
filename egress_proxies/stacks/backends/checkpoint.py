"""What the operator reads in a Pulumi DIY backend, whatever stores it: the key layout,
checkpoints and lock files.

Every DIY backend (a directory, a PostgreSQL table, an S3 bucket) holds the
same keys, project-scoped:

    .pulumi/stacks/<project>/<stack>.json                  the checkpoint
    .pulumi/locks/organization/<project>/<stack>/<id>.json {"pid", "hostname", ...}
    .pulumi/history/<project>/<stack>/*                    update history
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from egress_proxies.clock import parse_k8s_time

STACK_TYPE = "pulumi:pulumi:Stack"
_SECRET_SIGNATURE = "4dabf18193072939515e22adb298388d"  # noqa: S105 (pulumi's public marker)
KEPT_HISTORY_FILES = 20
CHECKPOINT_SUFFIX = ".json"


@dataclass(frozen=True)
class StackState:
    """What one stack's checkpoint says: its outputs (secrets hidden) and unfinished operations."""

    name: str
    outputs: Mapping[str, Any]
    pending_operations: int
    resource_count: int


@dataclass(frozen=True)
class Layout:
    """The keys of one project's stacks, relative to the backend's root."""

    project: str

    @property
    def stacks(self) -> str:
        """The prefix of every checkpoint key."""
        return f".pulumi/stacks/{self.project}/"

    def checkpoint(self, stack: str) -> str:
        """The key of the stack's checkpoint."""
        return f"{self.stacks}{stack}{CHECKPOINT_SUFFIX}"

    @property
    def locks(self) -> str:
        """The prefix of every lock key."""
        return f".pulumi/locks/organization/{self.project}/"

    def lock_prefix(self, stack: str) -> str:
        """The prefix of the stack's lock keys."""
        return f"{self.locks}{stack}/"

    def history(self, stack: str) -> str:
        """The prefix of the stack's history keys."""
        return f".pulumi/history/{self.project}/{stack}/"

    def stack_of_checkpoint(self, key: str) -> str | None:
        """The stack a checkpoint key belongs to; None for any other key (a backup, a temp file)."""
        name = key.removeprefix(self.stacks)
        if name == key or "/" in name or not name.endswith(CHECKPOINT_SUFFIX):
            return None
        return name.removesuffix(CHECKPOINT_SUFFIX)

    def stack_of_lock(self, key: str) -> str | None:
        """The stack a lock key locks; None for any other key."""
        rest = key.removeprefix(self.locks)
        stack, _, name = rest.partition("/")
        if rest == key or not name.endswith(".json") or "/" in name:
            return None
        return stack


def parse_checkpoint(stack: str, document: bytes | str) -> StackState:
    """A stack's state from its checkpoint document (pulumi's JSON)."""
    latest = (json.loads(document).get("checkpoint") or {}).get("latest") or {}
    resources = latest.get("resources") or []
    outputs: dict[str, Any] = {}
    for resource in resources:
        if resource.get("type") == STACK_TYPE:
            outputs = {
                key: None if _is_secret(value) else value
                for key, value in (resource.get("outputs") or {}).items()
            }
    return StackState(
        name=stack,
        outputs=outputs,
        pending_operations=len(latest.get("pending_operations") or []),
        resource_count=len(resources),
    )


@dataclass(frozen=True)
class GoneHolders:
    """Lock holders (hosts) the caller proved gone, and since when.

    `hosts`: every lock taken there is stale (a replica's pod that no longer
    exists: a new pod never reuses the name). `expired`: the host's only
    operator stopped renewing its peering keep-alive, which expired at the
    time given; a lock taken there before that time is stale, a later one
    (someone else's, say a `pulumi` run by hand) is not judged.
    """

    hosts: frozenset[str] = frozenset()
    expired: Mapping[str, datetime.datetime] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<GoneHolders [pods gone: {len(self.hosts)} | expired: {len(self.expired)}]>"


NOBODY = GoneHolders()


@dataclass(frozen=True)
class LockOwner:
    """Who holds a stack's lock, as its lock file says, and when it took it."""

    pid: int
    hostname: str
    taken: datetime.datetime | None = None

    @classmethod
    def parse(cls, document: bytes | str) -> LockOwner | None:
        """The owner a lock file names; None for a lock file that does not parse."""
        try:
            owner = json.loads(document)
            return cls(
                pid=int(owner.get("pid", 0)),
                hostname=str(owner.get("hostname", "")),
                taken=_lock_time(owner.get("timestamp")),
            )
        except (ValueError, TypeError, AttributeError):
            return None

    def gone(self, gone: GoneHolders = NOBODY) -> bool:
        """True if the holder provably died: it ran on this host and its pid runs no pulumi,
        or `gone` says its host's replica is gone (and, by keep-alive, since before the lock).

        A lock held from any other host is never judged otherwise: its process
        cannot be seen from this one.
        """
        if self.hostname in gone.hosts:
            return True
        expired = gone.expired.get(self.hostname)
        if expired is not None and self.taken is not None and self.taken < expired:
            return True
        return self.hostname == socket.gethostname() and not pulumi_running(self.pid)


def _lock_time(stamp: object) -> datetime.datetime | None:
    """A lock's `timestamp` (Go's RFC 3339, in nanoseconds) as aware UTC; None if unreadable."""
    if not isinstance(stamp, str):
        return None
    try:  # Python reads at most microseconds: drop the digits past six.
        return parse_k8s_time(re.sub(r"(\.\d{6})\d+", r"\1", stamp))
    except ValueError:
        return None


def pulumi_running(pid: int) -> bool:
    """True if `pid` runs a pulumi CLI (a recycled pid running something else does not count)."""
    if pid <= 0:
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return Path(os.fsdecode(argv0)).name == "pulumi"


def _is_secret(value: object) -> bool:
    return isinstance(value, dict) and _SECRET_SIGNATURE in value
