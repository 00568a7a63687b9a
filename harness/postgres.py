"""A real PostgreSQL server on loopback, for the postgres:// state backend's tests.

    with PostgresServer(password="s3cret") as db:
        db.url        # "postgres://pulumi@127.0.0.1:40123/postgres?sslmode=disable" (no password)
        db.env        # {"PGPASSWORD": "s3cret"}
        db.stop(); db.start()   # same port, same data

Debian's postgres in a fresh cluster (initdb) in its own temporary directory,
password authentication (scram) on 127.0.0.1 only, tied to this process
(`setpriv --pdeathsig`). PostgreSQL refuses to run as root, so under root the
server runs as Debian's `postgres` user.

For pods: `PostgresServer(host=cluster.host_address, clients="10.K.0.0/16")`
listens on the dev cluster's host address and lets in logins from the
cluster's block. `make demo-ha` runs one in the foreground with its data in
the demo's state dir, kept across runs:

    python -m harness.postgres serve DIR --host H --port P --clients CIDR --password-file F
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
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
    """One PostgreSQL cluster, user `pulumi` with `password`, on `host` (a free port by default).

    `clients` (a CIDR) may log in besides loopback. `run_dir` keeps the data
    there, across closes and runs (the cluster is made once); by default it
    is a temporary directory that `close` removes.
    """

    # A fast shutdown: PostgreSQL ends every session and exits once they are gone. Its
    # backends lead process groups of their own, so a SIGKILL of the postmaster's group
    # would leave them serving open connections for a while.
    graceful_stop: float | None = 30.0
    stop_signal = signal.SIGINT

    def __init__(
        self,
        *,
        password: str = "pulumi-test-password",  # noqa: S107
        host: str = LOOPBACK,
        port: int | None = None,
        clients: str | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.host = host
        [self.port] = [port] if port else free_ports(1, host)
        self.password = password
        self.clients = clients
        self._kept = run_dir is not None
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="egress-proxies-postgres-"))
        self.data = self.run_dir / "data"
        self.log = self.run_dir / "postgres.log"
        self._user = "postgres" if os.geteuid() == 0 else None
        if not (self.data / "PG_VERSION").exists():
            self._initdb()

    def __repr__(self) -> str:
        state = "not started" if self.child is None else repr(self.child)
        return f"<PostgresServer {self.host}:{self.port} {state}>"

    @property
    def url(self) -> str:
        """The backend URL (no password: that is `env`'s)."""
        return f"postgres://{USER}@{self.host}:{self.port}/{DATABASE}?sslmode=disable"

    @property
    def env(self) -> dict[str, str]:
        """The variables a client needs besides the URL."""
        return {"PGPASSWORD": self.password}

    def start(self) -> None:
        """Start postgres (again, on the same port and data) and wait until it accepts logins."""
        self._admit_clients()
        argv = [
            str(toolchain.postgres_bin() / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={self.host}",
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
        """Stop the server and remove its data (unless it lives in a `run_dir` given)."""
        self.stop()
        if not self._kept:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _admit_clients(self) -> None:
        """Let `clients` log in with the password (pg_hba.conf is read at start)."""
        if self.clients is None:
            return
        hba = self.data / "pg_hba.conf"
        line = f"host all {USER} {self.clients} scram-sha-256"
        if line not in hba.read_text().splitlines():
            with hba.open("a") as conf:
                conf.write(line + "\n")

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
            with socket.create_connection((self.host, self.port), timeout=0.5):
                pass
        except OSError:
            return False
        ready = subprocess.run(
            [str(toolchain.postgres_bin() / "pg_isready"), "-h", self.host, "-p", str(self.port)],
            capture_output=True,
            check=False,
        )
        return ready.returncode == 0


def serve(argv: list[str]) -> int:
    """`serve DIR ...`: one server in the foreground until SIGTERM or SIGINT (`make demo-ha`)."""
    parser = argparse.ArgumentParser(prog="python -m harness.postgres serve")
    parser.add_argument("dir", type=Path, help="where the data lives (made on the first run)")
    parser.add_argument("--host", required=True, help="the address to listen on")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", help="a CIDR whose logins are let in besides loopback")
    parser.add_argument("--password-file", type=Path, required=True, help="user pulumi's password")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    server = PostgresServer(
        password=args.password_file.read_text().strip(),
        host=args.host,
        port=args.port,
        clients=args.clients,
        run_dir=args.dir.resolve(),
    )
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with server:
        print(server.url, flush=True)
        while not stopping and server.running():
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        print("usage: python -m harness.postgres serve DIR --host H --port P ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[2:]))
