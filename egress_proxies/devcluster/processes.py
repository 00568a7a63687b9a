"""Child processes that cannot outlive the dev cluster.

Three layers keep a crashed run from leaking etcd, kube-apiserver or squid:
each child gets PR_SET_PDEATHSIG (the kernel kills it when the supervisor
dies, even by SIGKILL), runs in its own process group (stopping it stops its
helpers too), and has a pid file that the next `up` or `down` checks and
cleans.

The parent-death signal is set by util-linux's `setpriv`, which execs the
real program in place: a `preexec_fn` would be unsafe in a threaded process,
and setpriv also drops to another user *before* setting the signal. A
credential change clears the signal, so a program that drops privileges
itself (squid started as root) runs in its own PID namespace under a shell
that stays root and keeps the signal: when that namespace's init dies, the
kernel kills everything in it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_SETPRIV = "/usr/bin/setpriv"


_UNSHARE = "/usr/bin/unshare"
# pid 1 of the namespace: runs the program as its child and passes its exit code on.
_NAMESPACE_INIT = ["/bin/sh", "-c", '"$@"; exit $?', "init"]


@dataclass(frozen=True)
class Identity:
    """Who a child runs as: a user name (with its groups), or numeric ids."""

    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()

    def setpriv_flags(self) -> list[str]:
        """setpriv's flags to become this identity (none for the supervisor's own)."""
        if self.user is not None:
            return ["--reuid", self.user, "--regid", self.user, "--init-groups"]
        if self.uid is None:
            return []
        groups = ",".join(str(group) for group in self.groups)
        return [
            "--reuid",
            str(self.uid),
            "--regid",
            str(self.gid if self.gid is not None else 0),
            *(["--groups", groups] if groups else ["--clear-groups"]),
        ]

    @property
    def drops_privileges_itself(self) -> bool:
        """True when the child starts as root (and may switch user on its own)."""
        return self.user is None and self.uid in (None, 0)


def _tied_to_parent(argv: Sequence[str], identity: Identity | None) -> list[str]:
    if identity is None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    if identity.drops_privileges_itself:
        namespace = [_UNSHARE, "--pid", "--fork", "--kill-child=KILL", "--", *_NAMESPACE_INIT]
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *namespace, *argv]
    return [_SETPRIV, *identity.setpriv_flags(), "--pdeathsig", "KILL", "--", *argv]


@dataclass
class Child:
    """A started child: its name, process and where it logs."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    pid_file: Path

    def __repr__(self) -> str:
        state = "running" if self.process.poll() is None else f"exited {self.process.returncode}"
        return f"<Child {self.name} pid={self.process.pid} {state}>"

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the child wrote, for error messages."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the child's process group, SIGKILL it after `timeout`, forget the pid file."""
        terminate_group(self.process.pid, timeout, lambda: self.process.poll() is not None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)
        self.pid_file.unlink(missing_ok=True)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    pid_dir: Path,
    log: Path,
    user: str | Identity | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Child:
    """Start `argv` in its own process group, tied to this process's life.

    `user` is a user name or an `Identity`; an `Identity()` (root) runs the
    program in its own PID namespace so that it stays tied even if it
    switches users itself.
    """
    pid_dir.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    identity = Identity(user=user) if isinstance(user, str) else user
    command = _tied_to_parent(argv, identity)
    with log.open("ab") as log_handle:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            process_group=0,
        )
    # What the process at that pid runs once setpriv has exec'd it.
    executable = command[command.index("--") + 1]
    pid_file = pid_dir / f"{name}.pid"
    pid_file.write_text(f"{process.pid}\n{Path(executable).name}\n")
    return Child(name=name, process=process, log=log, pid_file=pid_file)


def terminate_group(pid: int, timeout: float, exited: Callable[[], bool]) -> None:
    """Send SIGTERM to a process group, then SIGKILL if it is still there after `timeout`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if exited():
                return
            time.sleep(0.05)


def reap_stale(pid_dir: Path) -> list[str]:
    """Kill processes recorded in `pid_dir` by an earlier run that did not clean up.

    A pid is trusted only while /proc shows the executable named in its pid
    file, so a recycled pid belonging to someone else is never signalled.
    Returns a description of each process killed.
    """
    killed: list[str] = []
    if not pid_dir.is_dir():
        return killed
    for pid_file in sorted(pid_dir.glob("*.pid")):
        try:
            pid_text, executable = pid_file.read_text().split()[:2]
            pid = int(pid_text)
        except ValueError:
            pid_file.unlink(missing_ok=True)
            continue
        if process_runs(pid, executable):
            terminate_group(pid, 5.0, functools.partial(_gone, pid))
            killed.append(f"{pid_file.stem} (pid {pid})")
        pid_file.unlink(missing_ok=True)
    return killed


def process_runs(pid: int, executable: str) -> bool:
    """True if `pid` is alive and runs a program named `executable`."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and Path(argv0).name == executable


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state == "Z"
