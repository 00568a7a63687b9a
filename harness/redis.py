"""A real redis-server on loopback, for tests and benchmarks.

    with RedisServer(password="s3cret") as redis:
        redis.url                       # "redis://:s3cret@127.0.0.1:40123/0"
        redis.stop(); redis.start()     # same port, empty again (no persistence)
        redis.pause(); redis.resume()   # SIGSTOP / SIGCONT: accepts, never answers

Debian's redis-server, no persistence, in its own temporary directory; tied
to this process (`setpriv --pdeathsig`) so a killed test run leaves nothing.
Starting, stopping, pausing and resuming are `harness.process.ManagedProcess`'s.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from redis.asyncio import Redis

from egress_proxies import toolchain
from harness.process import ManagedProcess
from harness.squid import LOOPBACK, free_ports

_START_TIMEOUT = 20.0


class RedisServer(ManagedProcess):
    """One redis-server on a free loopback port, optionally with a password (AUTH)."""

    def __init__(self, *, password: str | None = None, host: str = LOOPBACK) -> None:
        self.host = host
        [self.port] = free_ports(1, host)
        self.password = password
        self.run_dir = Path(tempfile.mkdtemp(prefix="egress-proxies-redis-"))
        self.log = self.run_dir / "redis.log"

    def __repr__(self) -> str:
        state = "not started" if self.child is None else repr(self.child)
        auth = "auth" if self.password else "open"
        return f"<RedisServer {self.host}:{self.port} {auth} {state}>"

    @property
    def url(self) -> str:
        """redis://[:password@]host:port/0."""
        userinfo = f":{self.password}@" if self.password else ""
        return f"redis://{userinfo}{self.host}:{self.port}/0"

    def start(self) -> None:
        """Start redis-server (again, on the same port) and wait until it answers PING."""
        argv = [
            str(toolchain.redis_server()),
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            str(self.run_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        child = self._spawn(f"redis-{self.port}", argv, pid_dir=self.run_dir / "pids")
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._answers():
            if not child.alive() or time.monotonic() > deadline:
                tail = child.log_tail()
                self.stop()
                raise RuntimeError(f"redis-server did not start: {tail}")
            time.sleep(0.02)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used so far, from /proc."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def commands_sent(self, action: Callable[[], Awaitable[object]]) -> list[str]:
        """The command names clients (not Lua scripts) sent while `action` ran (MONITOR)."""
        seen: list[str] = []
        async with (
            Redis.from_url(self.url, decode_responses=True) as watcher,
            Redis.from_url(self.url) as marker,
        ):
            await marker.ping()  # connected before the window opens
            async with watcher.monitor() as monitor:

                async def collect() -> None:
                    while True:
                        info = await monitor.next_command()
                        if info["command"] == "PING window":
                            return
                        if info["client_type"] != "lua":
                            seen.append(info["command"].split(" ", 1)[0])

                collecting = asyncio.create_task(collect())
                await asyncio.sleep(0.1)
                await action()
                await marker.execute_command("PING", "window")  # type: ignore[no-untyped-call]
                await asyncio.wait_for(collecting, 10)
        return seen

    def _answers(self) -> bool:
        # RESP inline PING; with a password the server answers -NOAUTH, which is an answer.
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False
