"""The operator's claim on its state dir: one live operator per state dir.

Two operators writing one file:// backend would fight over every stack, so
the first one holds an exclusive flock on `operator.lock` for its whole life
(the kernel drops it when the process dies, even by SIGKILL) and a second
one refuses to start. The claim also keeps this operator's peer name, so a
restarted operator is the same kopf peer and is not paused by the keep-alive
its killed predecessor left behind.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
from pathlib import Path

from egress_proxies.errors import EgressProxiesError
from egress_proxies.users import user_name

LOCK_FILE = "operator.lock"
IDENTITY_FILE = "peer-identity"


class StateDirBusyError(RuntimeError, EgressProxiesError):
    """Another live operator holds the state dir."""


class StateDirClaim:
    """An exclusive flock on the state dir, held until `release` or process exit."""

    def __init__(self, state_dir: Path, fd: int) -> None:
        self.state_dir = state_dir
        self._fd: int | None = fd

    def __repr__(self) -> str:
        held = "held" if self._fd is not None else "released"
        return f"<StateDirClaim {self.state_dir} [{held}]>"

    @classmethod
    def acquire(cls, state_dir: Path) -> StateDirClaim:
        """Claim `state_dir` (created if missing), or raise StateDirBusyError."""
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirBusyError(
                f"another operator (pid {holder}) is using the state dir {state_dir}: "
                "stop it, or give this one its own --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(state_dir, fd)

    def peer_identity(self) -> str:
        """This state dir's kopf peer name: made once (user@host/random), then reused."""
        path = self.state_dir / IDENTITY_FILE
        if path.exists():
            stored = path.read_text().strip()
            if stored:
                return stored
        identity = f"{user_name()}@{socket.gethostname()}/{secrets.token_hex(4)}"
        path.write_text(identity + "\n")
        return identity

    def release(self) -> None:
        """Give the state dir up (closing the file drops the flock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
