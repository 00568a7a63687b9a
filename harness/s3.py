"""A real S3-compatible server on loopback (versitygw over a directory), for the s3:// backend.

    with S3Server() as s3:
        s3.create_bucket("stacks")
        s3.url("stacks", "operator")   # "s3://stacks/operator?endpoint=http://127.0.0.1:40123&..."
        s3.env                         # {"AWS_ACCESS_KEY_ID": ..., "AWS_SECRET_ACCESS_KEY": ...}

versitygw (built by tools/build.sh from the Go module proxy) serving its
posix backend from a temporary directory: a bucket is a directory, an
object a file. Tied to this process (`setpriv --pdeathsig`).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from pathlib import Path

from egress_proxies import toolchain
from harness.process import ManagedProcess
from harness.squid import LOOPBACK, free_ports

_START_TIMEOUT = 20.0
REGION = "us-east-1"


class S3Server(ManagedProcess):
    """One versitygw on a free loopback port, with one root access key."""

    def __init__(
        self,
        *,
        access_key: str = "egress-proxies-test",
        secret_key: str = "egress-proxies-test-secret",  # noqa: S107
    ) -> None:
        [self.port] = free_ports(1)
        self.access_key = access_key
        self.secret_key = secret_key
        self.run_dir = Path(tempfile.mkdtemp(prefix="egress-proxies-s3-"))
        self.root = self.run_dir / "buckets"
        self.root.mkdir()
        self.log = self.run_dir / "versitygw.log"

    def __repr__(self) -> str:
        state = "not started" if self.child is None else repr(self.child)
        return f"<S3Server {self.endpoint} {state}>"

    @property
    def endpoint(self) -> str:
        """The server's http:// URL."""
        return f"http://{LOOPBACK}:{self.port}"

    def url(self, bucket: str, prefix: str = "") -> str:
        """The backend URL of `bucket`/`prefix` on this server (no secret in it)."""
        path = f"/{prefix}" if prefix else ""
        return (
            f"s3://{bucket}{path}?endpoint={self.endpoint}&region={REGION}"
            "&use_path_style=true&disable_https=true"
        )

    @property
    def env(self) -> dict[str, str]:
        """The credentials a client needs besides the URL."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def create_bucket(self, name: str) -> None:
        """A new empty bucket (the posix backend's bucket is a directory)."""
        (self.root / name).mkdir()

    def start(self) -> None:
        """Start versitygw (again, on the same port and data) and wait until it accepts."""
        argv = [
            str(toolchain.find("versitygw")),
            "--port",
            f"{LOOPBACK}:{self.port}",
            "--access",
            self.access_key,
            "--secret",
            self.secret_key,
            "--region",
            REGION,
            "--quiet",
            "posix",
            "--nometa",
            str(self.root),
        ]
        child = self._spawn(f"versitygw-{self.port}", argv, pid_dir=self.run_dir / "pids")
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._answers():
            if not child.alive() or time.monotonic() > deadline:
                tail = child.log_tail()
                self.stop()
                raise RuntimeError(f"versitygw did not start: {tail}")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the server and remove its buckets."""
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _answers(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False
