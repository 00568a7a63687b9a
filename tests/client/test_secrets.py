"""No token, password or proxy URL with credentials in any repr, message or log line."""

from __future__ import annotations

import logging
import random

import pytest
from egress_proxies_client import NoProxyAvailableError, Pool, ProxyBannedError

from tests.client.served import serve_in_thread
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client


def test_no_secret_in_reprs_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(record("only")) as served:
        token = served.tokens.one
        pool = Pool(
            served.url, token, sleep=served.sleep, clock=served.clock.time, rng=random.Random()
        )
        shown: list[str] = [repr(pool)]
        with pytest.raises(ProxyBannedError) as banned, pool.lease(target="t.example") as lease:
            assert lease.proxy_url == "http://user-only:p%40ss%3Aw%2Frd@127.0.0.1:3128"
            shown += [repr(lease), str(lease.grant), repr(lease.grant)]
            lease.check(403, {})
        shown += [str(banned.value), repr(banned.value), repr(lease)]
        with pytest.raises(NoProxyAvailableError) as refused:
            pool.acquire(target="t.example", wait=0)
        shown += [str(refused.value), repr(refused.value)]
        pool.close()
    shown += [record.getMessage() for record in caplog.records]
    assert any("leased <Lease" in line for line in shown), "the log shows the lease"
    assert any("crawl/only" in line for line in shown)
    for secret in (token, "p@ss", "p%40ss"):
        assert not [line for line in shown if secret in line], secret
    # The lease id is in request paths (httpx and the server log those), not in reprs.
    assert not [line for line in shown[:8] if lease.lease_id in line]
