"""spec.cordoned: a cordoned Proxy stays healthy but is never offered a new lease."""

from __future__ import annotations

import pytest

from egress_proxies.catalog import record_from_body
from egress_proxies.leases import CandidatePool, is_offerable
from harness.console import proxy_body

pytestmark = pytest.mark.unit


def test_a_cordoned_proxy_is_healthy_but_never_offered() -> None:
    serving = record_from_body(proxy_body("a"), None)
    body = proxy_body("b")
    body["spec"]["cordoned"] = True
    cordoned = record_from_body(body, None)
    assert serving is not None and cordoned is not None
    assert (serving.healthy, cordoned.healthy) == (True, True)
    assert (serving.cordoned, cordoned.cordoned) == (False, True)
    assert is_offerable(serving) and not is_offerable(cordoned)
    candidates = CandidatePool.of([serving, cordoned])
    assert candidates.ranked_keys == ("crawl/a",) and candidates.not_offerable == 1
