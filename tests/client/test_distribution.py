"""The client is a light, separate distribution with a deliberate public surface."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import egress_proxies_client
import pytest

pytestmark = pytest.mark.client

CLIENT = Path(__file__).parents[2] / "clients" / "python"


def test_importing_the_client_loads_nothing_of_the_operator() -> None:
    probe = (
        "import sys, egress_proxies_client; "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'egress_proxies', 'pulumi', 'kopf', 'aiohttp', 'pydantic', 'scrapy', 'twisted'}); "
        "print(heavy)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert found.stdout.strip() == "[]"


def test_it_depends_on_httpx_only_with_scrapy_as_an_extra() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["httpx"]
    assert [d.split(">")[0] for d in project["optional-dependencies"]["scrapy"]] == ["scrapy"]


def test_public_api() -> None:
    assert set(egress_proxies_client.__all__) == {
        "ApiError",
        "ApiUnavailableError",
        "AsyncLease",
        "AsyncPool",
        "AuthenticationError",
        "Backoff",
        "BanPolicy",
        "Classification",
        "EgressProxiesError",
        "Grant",
        "Lease",
        "LeaseEndedError",
        "NoMatchCounts",
        "NoProxyAvailableError",
        "Pace",
        "Pool",
        "ProxyBannedError",
        "ProxyInfo",
        "ProxyRateLimitedError",
        "ProxyRefusedError",
        "TargetPausedError",
        "TokenBucket",
        "Verdict",
        "parse_retry_after",
    }
    errors = [getattr(egress_proxies_client, n) for n in egress_proxies_client.__all__]
    roots = {e for e in errors if isinstance(e, type) and issubclass(e, Exception)}
    assert all(issubclass(e, egress_proxies_client.EgressProxiesError) for e in roots)
