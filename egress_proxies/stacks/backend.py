"""Reading the file:// Pulumi backend directly: stacks, their outputs, their locks.

The pulumi CLI is the only writer of the backend. Reading it needs no CLI
process: a reconcile that changes nothing, and a GC sweep over thousands of
stacks, only parse JSON files. Layout (pulumi's DIY backend, project-scoped):

    .pulumi/stacks/<project>/<stack>.json            the checkpoint
    .pulumi/locks/organization/<project>/<stack>/*.json   {"pid", "hostname", ...}
    .pulumi/history/<project>/<stack>/*                update history

Beside every file the CLI's blob library (gocloud fileblob) writes a
`<file>.attrs` sidecar, and writes it in place, not by rename: a CLI killed
in that instant leaves an empty sidecar, and every later command on the
stack then fails with `failed to load checkpoint: EOF`. A missing sidecar is
fine to the library, so `repair` deletes damaged ones before each operation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STACK_TYPE = "pulumi:pulumi:Stack"
_SECRET_SIGNATURE = "4dabf18193072939515e22adb298388d"  # noqa: S105 (pulumi's public marker)
_KEPT_HISTORY_FILES = 20


@dataclass(frozen=True)
class StackState:
    """What one stack's checkpoint says: its outputs (secrets hidden) and unfinished operations."""

    name: str
    outputs: Mapping[str, Any]
    pending_operations: int
    resource_count: int


class FileBackend:
    """A file:// backend rooted at a directory, for one Pulumi project."""

    def __init__(self, root: Path, project: str) -> None:
        self.root = root
        self.project = project

    def __repr__(self) -> str:
        return f"<FileBackend {self.url} project={self.project}>"

    @property
    def url(self) -> str:
        """The backend URL pulumi is given."""
        return f"file://{self.root}"

    def _stack_file(self, stack: str) -> Path:
        return self.root / ".pulumi" / "stacks" / self.project / f"{stack}.json"

    def _lock_dir(self, stack: str) -> Path:
        return self.root / ".pulumi" / "locks" / "organization" / self.project / stack

    def exists(self, stack: str) -> bool:
        """True if the stack has been created on the backend."""
        return self._stack_file(stack).exists()

    def stacks(self) -> list[str]:
        """Names of every stack of the project (one directory listing)."""
        directory = self.root / ".pulumi" / "stacks" / self.project
        if not directory.is_dir():
            return []
        return sorted(path.name.removesuffix(".json") for path in directory.glob("*.json"))

    def read(self, stack: str) -> StackState | None:
        """Parse one stack's checkpoint; None if the stack does not exist."""
        try:
            document = json.loads(self._stack_file(stack).read_text())
        except FileNotFoundError:
            return None
        latest = (document.get("checkpoint") or {}).get("latest") or {}
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

    def clear_stale_locks(self) -> list[str]:
        """Delete every lock whose owning process on this host is gone. Returns what was cleared.

        A lock held by a live process, or by another host, is never touched:
        `pulumi cancel` would delete live locks too, so it is not used.
        """
        cleared: list[str] = []
        locks = self.root / ".pulumi" / "locks" / "organization" / self.project
        if not locks.is_dir():
            return cleared
        hostname = socket.gethostname()
        for lock in locks.glob("*/*.json"):
            try:
                owner = json.loads(lock.read_text())
            except (OSError, ValueError):
                continue
            if owner.get("hostname") == hostname and not _pid_alive(int(owner.get("pid", 0))):
                lock.unlink(missing_ok=True)
                _sidecar(lock).unlink(missing_ok=True)
                cleared.append(lock.parent.name)
                logger.warning(
                    "cleared the stale lock of stack %s (pid %s is gone)",
                    lock.parent.name,
                    owner.get("pid"),
                )
        return cleared

    def repair(self, stack: str) -> list[Path]:
        """Delete the stack's damaged sidecars, and its temp files unless a CLI holds its lock.

        Returns what was deleted. Call it after `clear_stale_locks`: a live
        operation's lock keeps its temp files (its checkpoint being written).
        """
        checkpoint = self._stack_file(stack)
        candidates = [*checkpoint.parent.glob(f"{checkpoint.name}*.attrs")]
        lock_dir = self._lock_dir(stack)
        if lock_dir.is_dir():
            candidates += [
                path for path in lock_dir.glob("*.attrs") if not path.with_suffix("").exists()
            ]
        removed = [path for path in candidates if _damaged_or_orphaned(path)]
        if not self.locked(stack):
            removed += checkpoint.parent.glob(f"{checkpoint.name}.*.tmp")
        for path in removed:
            path.unlink(missing_ok=True)
            logger.warning("deleted %s, left by a pulumi process that was killed", path.name)
        return removed

    def locked(self, stack: str) -> bool:
        """True while any lock file exists for the stack."""
        directory = self._lock_dir(stack)
        return directory.is_dir() and any(directory.glob("*.json"))

    def prune_history(self, stack: str, keep: int = _KEPT_HISTORY_FILES) -> None:
        """Keep only the newest history files of a stack (pulumi never deletes them)."""
        directory = self.root / ".pulumi" / "history" / self.project / stack
        if not directory.is_dir():
            return
        files = sorted(directory.iterdir(), key=lambda path: path.name)
        for path in files[: max(0, len(files) - keep * 2)]:  # a .history.json + a .checkpoint.json
            with contextlib.suppress(OSError):
                path.unlink()


def _sidecar(path: Path) -> Path:
    return path.with_name(f"{path.name}.attrs")


def _damaged_or_orphaned(sidecar: Path) -> bool:
    """True for a sidecar that does not parse, or whose file is gone (a stale lock's)."""
    if not sidecar.with_suffix("").exists():
        return True
    try:
        json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return True
    return False


def _is_secret(value: object) -> bool:
    return isinstance(value, dict) and _SECRET_SIGNATURE in value


def _pid_alive(pid: int) -> bool:
    """True if `pid` runs a pulumi CLI (a recycled pid running something else does not count)."""
    if pid <= 0:
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return Path(os.fsdecode(argv0)).name == "pulumi"
