"""Where the operator and the dev cluster find etcd, kube-apiserver, pulumi, squid, redis-server.

`tools/build.sh` builds the Go binaries into a cache and links them into one
bin directory; squid, redis-server and PostgreSQL come from Debian. Nothing here builds anything: a
missing binary is an error that says which command fixes it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from egress_proxies.errors import EgressProxiesError

SQUID_PATHS = (Path("/usr/sbin/squid"), Path("/usr/local/sbin/squid"))
REDIS_SERVER_PATHS = (Path("/usr/bin/redis-server"), Path("/usr/local/bin/redis-server"))


class MissingToolError(RuntimeError, EgressProxiesError):
    """A binary the dev cluster needs is not installed."""


def cache_dir() -> Path:
    """The tool cache shared by every checkout on this machine."""
    override = os.environ.get("EGRESS_PROXIES_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "egress-proxies"


def bin_dir() -> Path:
    """The directory holding links to the built Go binaries."""
    return cache_dir() / "bin"


def find(name: str) -> Path:
    """The path of a built tool (pulumi, etcd, kube-apiserver, ...)."""
    candidate = bin_dir() / name
    if candidate.exists():
        return candidate
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    raise MissingToolError(f"{name} not found in {bin_dir()}: run `make tools` to build it")


def squid() -> Path:
    """The squid binary from Debian's package."""
    for path in SQUID_PATHS:
        if path.exists():
            return path
    raise MissingToolError("squid is not installed: run `make tools` (apt-get install squid)")


def redis_server() -> Path:
    """Debian's redis-server (tests and the dev setup; production uses a managed Redis)."""
    for path in REDIS_SERVER_PATHS:
        if path.exists():
            return path
    raise MissingToolError(
        "redis-server is not installed: run `make tools` (apt-get install redis-server)"
    )


def postgres_bin() -> Path:
    """The directory of Debian's PostgreSQL server programs (initdb, postgres; tests only)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    raise MissingToolError(
        "PostgreSQL is not installed: run `make tools` (apt-get install postgresql)"
    )


def environment_with_tools(base: dict[str, str] | None = None) -> dict[str, str]:
    """A process environment with the tool bin dir first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    return env
