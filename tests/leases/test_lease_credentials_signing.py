"""Lease credentials are a pure function of key, proxy, lease, end and token."""

from __future__ import annotations

import re

import pytest

from egress_proxies.discovery.doors import bearer_token
from egress_proxies.leases.credentials import (
    OPEN_TAG,
    SIGNATURE_SKEW,
    lease_credentials,
    lease_handle,
    revocations_signature,
    signature_valid,
    token_tag,
    token_tags,
)
from egress_proxies.values import ProxyKey

pytestmark = pytest.mark.unit

KEY, OTHER_KEY = "a" * 64, "b" * 64
PROXY, OTHER_PROXY = ProxyKey("crawl/p1"), ProxyKey("crawl/p2")
LEASE = "D6x7ILWBoTz9-AStHE_B5Q"


def test_the_username_names_a_handle_the_end_and_the_token_never_the_lease_id() -> None:
    credentials = lease_credentials(KEY, PROXY, LEASE, 1_750_000_000.2, "token-1234567890ab")
    handle, end, tag = credentials.username.split(".")
    assert handle == lease_handle(LEASE) and LEASE not in credentials.username
    assert end == "1750000001"  # rounded up: never shorter than the lease
    assert tag == token_tag(KEY, "token-1234567890ab")
    # Spliceable into JSON and a URL as they are: lowercase hex and dots.
    assert re.fullmatch(r"[0-9a-f.]+", credentials.username + credentials.password)


def test_another_proxy_key_end_or_token_signs_differently() -> None:
    base = lease_credentials(KEY, PROXY, LEASE, 100.0, None)
    assert base == lease_credentials(KEY, PROXY, LEASE, 100.0, None)
    for other in (
        lease_credentials(OTHER_KEY, PROXY, LEASE, 100.0, None),
        lease_credentials(KEY, OTHER_PROXY, LEASE, 100.0, None),
        lease_credentials(KEY, PROXY, LEASE, 200.0, None),
        lease_credentials(KEY, PROXY, LEASE, 100.0, "token-1234567890ab"),
    ):
        assert other.password != base.password


def test_token_tags_are_per_proxy_and_open_without_tokens() -> None:
    assert token_tag(KEY, None) == OPEN_TAG
    assert token_tags(KEY, []) == [OPEN_TAG]
    assert token_tag(KEY, "t" * 20) != token_tag(OTHER_KEY, "t" * 20)
    assert token_tags(KEY, ["t" * 20, "u" * 20]) == sorted(
        [token_tag(KEY, "t" * 20), token_tag(KEY, "u" * 20)]
    )


def test_a_revocation_signature_holds_for_its_proxy_key_and_time_only() -> None:
    now = 1_750_000_000
    signature = revocations_signature(KEY, PROXY, now)
    assert signature_valid(KEY, PROXY, signature, now + SIGNATURE_SKEW)
    assert not signature_valid(KEY, PROXY, signature, now + SIGNATURE_SKEW + 1)
    assert not signature_valid(OTHER_KEY, PROXY, signature, now)
    assert not signature_valid(KEY, OTHER_PROXY, signature, now)
    for bad in ("", "garbage", f"-{now}.00", f"{now}", f"{now}.{'0' * 64}"):
        assert not signature_valid(KEY, PROXY, bad, now)


def test_the_bearer_token_of_a_header() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None
