"""A real PostgreSQL server on loopback, for the postgres:// state backend's tests.

    with PostgresServer(password="s3cret") as db:
        db.url        # "postgres://pulumi@127.0.0.1:40123/postgres?sslmode=disable" (no password)
        db.env        # {"PGPASSWORD": "s3cret"}
        db.stop(); db.start()   # same port, same data

Debian's postgres in a fresh cluster (initdb) in its own temporary directory,
password authentication (scram) on 127.0.0.1 only, tied to this process
(`setpriv --pdeathsig`). PostgreSQL refuses to run as root, so under root the
server runs as Debian's `postgres` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from egress_proxies import toolchain
from harness.process import ManagedProcess
from harness.squid import LOOPBACK, free_ports

_START_TIMEOUT = 30.0
USER = "pulumi"
DATABASE = "postgres"  # the database initdb creates


class PostgresServer(ManagedProcess):
    """One PostgreSQL cluster on a free loopback port, user `pulumi` with `password`."""

    def __init__(self, *, password: str = "pulumi-test-password") -> None:  # noqa: S107
        [self.port] = free_ports(1)
        self.password = password
        self.run_dir = Path(tempfile.mkdtemp(prefix="egress-proxies-postgres-"))
        self.data = self.run_dir / "data"
        self.log = self.run_dir / "postgres.log"
        self._user = "postgres" if os.geteuid() == 0 else None
        self._initdb()

    def __repr__(self) -> str:
        state = "not started" if self.child is None else repr(self.child)
        return f"<PostgresServer {LOOPBACK}:{self.port} {state}>"

    @property
    def url(self) -> str:
        """The backend URL (no password: that is `env`'s)."""
        return f"postgres://{USER}@{LOOPBACK}:{self.port}/{DATABASE}?sslmode=disable"

    @property
    def env(self) -> dict[str, str]:
        """The variables a client needs besides the URL."""
        return {"PGPASSWORD": self.password}

    def start(self) -> None:
        """Start postgres (again, on the same port and data) and wait until it accepts logins."""
        argv = [
            str(toolchain.postgres_bin() / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={LOOPBACK}",
            "-c",
            f"unix_socket_directories={self.run_dir}",
            "-c",
            "fsync=off",
        ]
        child = self._spawn(
            f"postgres-{self.port}", argv, pid_dir=self.run_dir / "pids", user=self._user
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._answers():
            if not child.alive() or time.monotonic() > deadline:
                tail = child.log_tail()
                self.stop()
                raise RuntimeError(f"postgres did not start: {tail}")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the server and remove its data."""
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _initdb(self) -> None:
        password_file = self.run_dir / "password"
        password_file.write_text(self.password + "\n")
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.run_dir, entry.pw_uid, entry.pw_gid)
            os.chown(password_file, entry.pw_uid, entry.pw_gid)
        command = [
            str(toolchain.postgres_bin() / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "--no-sync",
        ]
        if self._user is not None:
            command = [
                "setpriv",
                "--reuid",
                self._user,
                "--regid",
                self._user,
                "--init-groups",
                "--",
                *command,
            ]
        subprocess.run(command, check=True, capture_output=True, cwd=self.run_dir)
        password_file.unlink()
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("max_connections = 200\n")

    def _answers(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                pass
        except OSError:
            return False
        ready = subprocess.run(
            [str(toolchain.postgres_bin() / "pg_isready"), "-h", LOOPBACK, "-p", str(self.port)],
            capture_output=True,
            check=False,
        )
        return ready.returncode == 0
