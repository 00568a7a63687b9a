"""The granted-lease body fast path equals the LeaseGranted model's JSON, byte for byte."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.discovery.responses import GrantedBodies, leased_proxy, pace_body
from egress_proxies.discovery.schemas import LeaseGranted
from egress_proxies.leases import Lease, LeaseId, Pace
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials

pytestmark = pytest.mark.unit

RECORD = ProxyRecord(
    key=proxy_key("ns", "p1"),
    uid="uid-1",
    namespace="ns",
    name="p1",
    scheme="http",
    host="10.0.0.1",
    port=3128,
    health_check=HealthCheck(),
    attributes={"pool": "eu", "note": 'quote " and é \u2028'},
    credentials=ProxyCredentials("us:er", "p@ss/wörd"),
    healthy=True,
    latency_millis=12,
)
PACE = Pace(rate=1.0, burst=1, lowered_at=None)


def model_json(lease: Lease, credentials: ProxyCredentials | None = None) -> str:
    handed = lease.proxy.credentials if credentials is None else credentials
    return LeaseGranted(
        lease_id=lease.lease_id,
        proxy=leased_proxy(lease.proxy, handed),
        target=lease.target,
        ttl_seconds=lease.ttl_seconds,
        expires_at=datetime.fromtimestamp(lease.expires_at, UTC),
        pace=pace_body(lease.pace or PACE),
    ).model_dump_json()


@pytest.mark.parametrize(
    "record",
    [
        RECORD,
        replace(RECORD, credentials=None, latency_millis=None, attributes={}),
        replace(RECORD, host="fd00::1", scheme="https"),
    ],
)
@pytest.mark.parametrize("target", [None, "example.com", 'we"ird\\tar\x01get é'])
@pytest.mark.parametrize("expires_at", [1_700_000_000.0, 1_700_000_000.5, 1_700_000_000.1234567])
@pytest.mark.parametrize("pace", [PACE, Pace(rate=2.3456789, burst=2, lowered_at=1_700_000_000.25)])
def test_rendered_body_equals_the_model(
    record: ProxyRecord, target: str | None, expires_at: float, pace: Pace
) -> None:
    lease = Lease(LeaseId("A" * 22), record, target, 300, expires_at, pace=pace)
    assert GrantedBodies().render(lease) == model_json(lease)


def test_a_changed_record_is_rendered_anew() -> None:
    bodies = GrantedBodies()
    first = Lease(LeaseId("A" * 22), RECORD, None, 60, 1_700_000_000.0, pace=PACE)
    bodies.render(first)
    moved = replace(first, proxy=replace(RECORD, host="10.0.0.2"))
    assert bodies.render(moved) == model_json(moved)
    assert repr(bodies) == "<GrantedBodies [proxies cached: 1]>"


@pytest.mark.parametrize(
    "own",
    [
        ProxyCredentials("5d0c6e1b9a2f.1700000000.open", "9b1f0c2d7e4a"),
        ProxyCredentials("Odd User", "p@ss:w/rd"),  # not spliced: rendered whole
    ],
)
def test_a_lease_with_credentials_of_its_own_carries_them(own: ProxyCredentials) -> None:
    keyed = replace(RECORD, credentials=ProxyCredentials("crawler", "operator-only", "key"))
    bodies = GrantedBodies()
    for lease_id in ("A" * 22, "B" * 22):  # the second from the cached template
        lease = Lease(LeaseId(lease_id), keyed, "example.com", 60, 1_700_000_000.0, pace=PACE)
        body = bodies.render(lease, own)
        assert body == model_json(lease, own)
        assert "operator-only" not in body


def test_the_operator_credentials_of_a_signing_proxy_are_never_handed_out() -> None:
    keyed = replace(RECORD, credentials=ProxyCredentials("crawler", "operator-only", "key"))
    lease = Lease(LeaseId("A" * 22), keyed, None, 60, 1_700_000_000.0, pace=PACE)
    body = GrantedBodies().render(lease)
    assert "operator-only" not in body
    assert '"credentials":null' in body
