"""Standalone real squid processes on loopback, for tests and benchmarks.

A `SquidProcess` runs Debian's squid as the `proxy` user (tied to this
process by `setpriv --pdeathsig`, like the dev cluster's pods) on one or more
`127.0.0.1` ports — at most 128, squid's limit per process. It is open, or
authenticated with the project's own `squid_config.squid_conf`: a bcrypt
`passwd_line` (an External proxy's static credentials), or, given
`lease_proxy`, exactly like a managed proxy: the lease-credentials helper with
the credentials' signing key, pulling its revocation list from
`revocations_url` (None: signature and expiry only).

    with SquidProcess(ports=3, credentials=ProxyCredentials("u", "p")) as squid:
        squid.proxy_urls   # ["http://127.0.0.1:40123", ...]
        squid.stop(); squid.start()   # same ports again
        squid.pause(); squid.resume()  # SIGSTOP / SIGCONT: accepts, never answers

`own_sources=True` sends each port's traffic from its own loopback address
(127.0.0.2, .3, ...), so a site limiting each source address sees one client per
port, as it sees one per squid pod; `hosts` maps names to addresses for squid
alone (its `hosts_file`), so one local server answers for several host names.

The run directory lives under /tmp, not under pytest's 0700 tmp dirs: squid
runs as `proxy`, which must traverse it. Starting, stopping, pausing and
resuming are `harness.process.ManagedProcess`'s.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import tempfile
import time
from pathlib import Path

from egress_proxies import toolchain
from egress_proxies.stacks.inputs import ProxyCredentials
from egress_proxies.stacks.programs.squid_config import (
    HELPER_FILE,
    LeaseAuth,
    lease_auth_helper,
    passwd_line,
    squid_conf,
)
from egress_proxies.values import SIGNING_KEY
from harness.process import ManagedProcess

SQUID_USER = "proxy"
MAX_PORTS_PER_PROCESS = 128
LOOPBACK = "127.0.0.1"
_START_TIMEOUT = 20.0

_OPEN_CONF = """\
# An open forward proxy for tests: loopback only, no cache, no leaks.
http_access allow all
cache deny all
forwarded_for delete
via off
httpd_suppress_version_string on
"""


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _process_directives(run_dir: Path) -> str:
    return f"""
# Process files in this run's own directory.
pid_filename {run_dir}/squid.pid
cache_log stdio:{run_dir}/cache.log
access_log stdio:{run_dir}/access.log
netdb_filename none
coredump_dir {run_dir}
pinger_enable off
shutdown_lifetime 1 seconds
"""


class SquidProcess(ManagedProcess):
    """One squid process listening on `ports` loopback ports, open or with basic auth."""

    def __init__(
        self,
        ports: int = 1,
        *,
        credentials: ProxyCredentials | None = None,
        host: str = LOOPBACK,
        own_sources: bool = False,
        hosts: dict[str, str] | None = None,
        lease_proxy: str | None = None,
        revocations_url: str | None = None,
    ) -> None:
        if not 1 <= ports <= MAX_PORTS_PER_PROCESS:
            raise ValueError(f"one squid listens on 1 to {MAX_PORTS_PER_PROCESS} ports")
        self.host = host
        self.ports = tuple(free_ports(ports, host))
        self.credentials = credentials
        self.own_sources = own_sources
        self.hosts = dict(hosts or {})
        self.run_dir = Path(tempfile.mkdtemp(prefix="egress-proxies-squid-", dir="/tmp"))
        self.lease_auth = (
            None
            if lease_proxy is None
            else LeaseAuth(
                helper_path=str(self.run_dir / HELPER_FILE),
                secret_dir=str(self.run_dir / "auth"),
                state_dir=str(self.run_dir),
                proxy=lease_proxy,
                revocations_url=revocations_url,
            )
        )
        self.log = self.run_dir / "squid.out"
        self._write_files()

    def __repr__(self) -> str:
        state = "not started" if self.child is None else repr(self.child)
        auth = "lease auth" if self.lease_auth else "auth" if self.credentials else "open"
        return f"<SquidProcess {self.host} ports={len(self.ports)} {auth} {state}>"

    @property
    def proxy_urls(self) -> list[str]:
        """`http://host:port` of every listener, in port order."""
        return [f"http://{self.host}:{port}" for port in self.ports]

    @property
    def access_log(self) -> Path:
        """squid's access log (one line per request or CONNECT tunnel)."""
        return self.run_dir / "access.log"

    def config(self) -> str:
        """The squid.conf this process runs."""
        listeners = "\n".join(f"http_port {self.host}:{port}" for port in self.ports)
        if self.credentials is None:
            body = f"{listeners}\n{_OPEN_CONF}"
        else:
            template = squid_conf(
                self.ports[0], str(self.run_dir / "passwd"), lease_auth=self.lease_auth
            )
            body = template.replace(f"http_port {self.ports[0]}\n", f"{listeners}\n", 1)
        return body + self._routing() + _process_directives(self.run_dir)

    def source_address(self, index: int) -> str:
        """The address port `index` sends from (with `own_sources`; else the host's)."""
        return f"127.0.0.{index + 2}" if self.own_sources else self.host

    def _routing(self) -> str:
        lines: list[str] = []
        if self.own_sources:
            for index, port in enumerate(self.ports):
                lines += (
                    f"acl via_{port} localport {port}",
                    f"tcp_outgoing_address {self.source_address(index)} via_{port}",
                )
        if self.hosts:
            lines.append(f"hosts_file {self.run_dir / 'hosts'}")
        return "\n".join(lines) + "\n"

    def _write_files(self) -> None:
        proxy_user = pwd.getpwnam(SQUID_USER)
        (self.run_dir / "squid.conf").write_text(self.config())
        if self.hosts:
            entries = "".join(f"{address} {name}\n" for name, address in self.hosts.items())
            (self.run_dir / "hosts").write_text(entries)
        if self.credentials is not None and self.lease_auth is None:
            (self.run_dir / "passwd").write_text(passwd_line(self.credentials))
        paths = [self.run_dir, *self.run_dir.iterdir()]
        if self.credentials is not None and self.lease_auth is not None:
            key = self.credentials.signing_key
            assert key is not None, "lease credentials are signed with the proxy's key"
            auth = self.run_dir / "auth"
            auth.mkdir()
            paths.append(auth)
            for name, value in (
                ("username", self.credentials.username),
                ("password", self.credentials.password),
                (SIGNING_KEY, key),
            ):
                (auth / name).write_text(value)
                paths.append(auth / name)
            (self.run_dir / HELPER_FILE).write_text(lease_auth_helper())
            paths.append(self.run_dir / HELPER_FILE)
        os.chmod(self.run_dir, 0o711)  # noqa: S103 (squid's user only traverses it)
        for path in paths:
            os.chown(path, proxy_user.pw_uid, proxy_user.pw_gid)

    def start(self) -> None:
        """Start squid (again, on the same ports) and wait until every port accepts."""
        child = self._spawn(
            f"squid-{self.ports[0]}",
            [str(toolchain.squid()), "-N", "-f", str(self.run_dir / "squid.conf")],
            pid_dir=self.run_dir / "pids",
            user=SQUID_USER,
        )
        deadline = time.monotonic() + _START_TIMEOUT
        pending = list(self.ports)
        while pending:
            if not child.alive() or time.monotonic() > deadline:
                tail = self._cache_log_tail()
                self.stop()
                raise RuntimeError(f"squid did not start listening: {tail}")
            if _accepts(self.host, pending[0]):
                pending.pop(0)
            else:
                time.sleep(0.05)

    def close(self) -> None:
        """Stop squid and remove its run directory."""
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _cache_log_tail(self) -> str:
        for name in ("cache.log", "squid.out"):
            path = self.run_dir / name
            if path.exists() and path.stat().st_size:
                return path.read_text(errors="replace")[-800:]
        return "(no output)"


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
