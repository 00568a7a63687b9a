"""The file:// backend: a directory on a volume of its own (one replica).

The pulumi CLI is the only writer of the backend's stacks. Reading it needs
no CLI process: a reconcile that changes nothing, and a GC sweep over
thousands of stacks, only parse JSON files (the layout is in `checkpoint`).

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
from pathlib import Path

from egress_proxies.stacks.backends.checkpoint import (
    KEPT_HISTORY_FILES,
    NOBODY,
    GoneHolders,
    LockOwner,
    StackState,
    parse_checkpoint,
)

logger = logging.getLogger(__name__)


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
            return parse_checkpoint(stack, self._stack_file(stack).read_bytes())
        except FileNotFoundError:
            return None

    def states(self) -> list[StackState]:
        """Every stack's state (one directory listing, then one read per stack)."""
        return [state for name in self.stacks() if (state := self.read(name)) is not None]

    def check(self) -> None:
        """A directory is always there (it is created on start)."""

    def lock_holders(self) -> set[str]:
        """The hosts holding a lock on any stack."""
        locks = self.root / ".pulumi" / "locks" / "organization" / self.project
        holders = set()
        for lock in locks.glob("*/*.json") if locks.is_dir() else ():
            with contextlib.suppress(OSError):
                owner = LockOwner.parse(lock.read_bytes())
                if owner is not None:
                    holders.add(owner.hostname)
        return holders

    def clear_stale_locks(self, gone: GoneHolders = NOBODY) -> list[str]:
        """Delete every lock whose owning process on this host is gone, or whose holder `gone`
        proves gone. Returns what was cleared.

        A lock held by a live process, or by another host, is never touched:
        `pulumi cancel` would delete live locks too, so it is not used.
        """
        cleared: list[str] = []
        locks = self.root / ".pulumi" / "locks" / "organization" / self.project
        if not locks.is_dir():
            return cleared
        for lock in locks.glob("*/*.json"):
            try:
                owner = LockOwner.parse(lock.read_bytes())
            except OSError:
                continue
            if owner is not None and owner.gone(gone):
                lock.unlink(missing_ok=True)
                _sidecar(lock).unlink(missing_ok=True)
                cleared.append(lock.parent.name)
                logger.warning(
                    "cleared the stale lock of stack %s (pid %s is gone)",
                    lock.parent.name,
                    owner.pid,
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

    def prune_history(self, stack: str, keep: int = KEPT_HISTORY_FILES) -> None:
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
