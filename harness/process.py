"""One managed child process, as the harness starts them: squid, redis-server, the operator,
discovery replicas.

A `ManagedProcess` holds the running `Child` (or None) and knows how to end
it: at once (SIGKILL of its process group: tests want a proxy or a store
gone, not a clean shutdown) or gracefully (`stop_signal`, then wait
`graceful_stop` seconds, for a process under test whose shutdown matters).
It can be paused and resumed (SIGSTOP / SIGCONT of the group: the kernel
still accepts connections, nobody answers) and started again under the same
name and ports. Subclasses say what to run and when it is up; used as a
context manager it is started on entry and closed (stopped, its files
removed) on exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from egress_proxies.devcluster.processes import Child, Identity, spawn


class ManagedProcess:
    """Start, stop, pause and resume one child process; see the module docstring."""

    child: Child | None = None
    log: Path
    # Seconds a signalled process gets before its group is killed; None: SIGKILL at once.
    graceful_stop: float | None = None
    stop_signal: signal.Signals = signal.SIGTERM  # what a graceful stop sends

    @property
    def pid(self) -> int:
        """The running process's id."""
        if self.child is None:
            raise RuntimeError(f"{self!r} is not running")
        return self.child.process.pid

    def running(self) -> bool:
        """Started and not exited."""
        return self.child is not None and self.child.alive()

    def start(self) -> None:
        """Start the process (again); subclasses spawn it with `_spawn` and wait until it is up."""
        raise NotImplementedError

    def _spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        pid_dir: Path,
        user: str | Identity | None = None,
        env: dict[str, str] | None = None,
    ) -> Child:
        if self.running():
            raise RuntimeError(f"{self!r} is already running")
        self.child = spawn(name, argv, pid_dir=pid_dir, log=self.log, user=user, env=env)
        return self.child

    def stop(self) -> None:
        """End the process (see `graceful_stop`) and wait for it; a stopped one is left alone."""
        if self.child is None:
            return
        child, self.child = self.child, None
        if self.graceful_stop is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait(timeout=10)
            child.pid_file.unlink(missing_ok=True)
        elif child.alive():
            os.kill(child.process.pid, self.stop_signal)
            try:
                child.process.wait(timeout=self.graceful_stop)
            finally:
                child.stop()

    def pause(self) -> None:
        """SIGSTOP the process group: connections are accepted, nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process group."""
        self._signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop the process; subclasses also remove what it left on disk."""
        self.stop()

    def log_text(self) -> str:
        """Everything the process wrote to its log."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _signal(self, sig: signal.Signals) -> None:
        if self.child is not None and self.child.alive():
            os.killpg(self.child.process.pid, sig)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
