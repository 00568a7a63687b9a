"""Lease credentials: signed, expiring basic-auth credentials for one lease on one proxy.

A managed proxy's squid checks them itself with the proxy's signing key (the
helper `squid_lease_auth.pl` beside the inline programs), so no request waits
on the lease API:

    username = <handle>.<expiry>.<tag>
    password = first 32 hex digits of HMAC-SHA256(key, "v1|<namespace/name>|<username>")

`handle` is a one-way digest of the lease id (the id itself entitles its holder
to release and report, so it never reaches a proxy or its logs); `expiry` is
the lease's end in Unix seconds; `tag` names the bearer token the lease was
asked for with, keyed per proxy (`open` when the API takes no tokens). The
proxy refuses credentials past their expiry, whose handle its revocation list
names (a lease released or reported banned) or whose tag is no longer among
the valid tokens' (a token removed from the token Secret).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable

from egress_proxies.values import ProxyCredentials, ProxyKey

OPEN_TAG = "open"
_HANDLE_LENGTH = 24
_TAG_LENGTH = 16
_PASSWORD_LENGTH = 32
# How far a revocation request's timestamp may be from the API's clock, in seconds.
SIGNATURE_SKEW = 60


def lease_handle(lease_id: str) -> str:
    """The name a proxy knows a lease by: a one-way digest of its id."""
    return hashlib.sha256(f"lease|{lease_id}".encode()).hexdigest()[:_HANDLE_LENGTH]


def token_tag(key: str, token: str | None) -> str:
    """The tag of the bearer token a lease was asked for with, as one proxy knows it."""
    if token is None:
        return OPEN_TAG
    return _mac(key, f"token|{token}")[:_TAG_LENGTH]


def token_tags(key: str, tokens: Iterable[str]) -> list[str]:
    """The tags a proxy accepts: the valid tokens' (or `open` when there are none)."""
    tags = sorted(token_tag(key, token) for token in tokens)
    return tags or [OPEN_TAG]


def lease_credentials(
    key: str, proxy: ProxyKey, lease_id: str, expires_at: float, token: str | None
) -> ProxyCredentials:
    """The credentials of one lease on `proxy`, good until `expires_at` (rounded up)."""
    username = f"{lease_handle(lease_id)}.{math.ceil(expires_at)}.{token_tag(key, token)}"
    password = _mac(key, f"v1|{proxy}|{username}")[:_PASSWORD_LENGTH]
    return ProxyCredentials(username, password)


def revocations_signature(key: str, proxy: ProxyKey, timestamp: int) -> str:
    """What a proxy's helper signs its revocation-list request with: `<timestamp>.<mac>`."""
    return f"{timestamp}.{_mac(key, f'revocations|{proxy}|{timestamp}')}"


def signature_valid(key: str, proxy: ProxyKey, presented: str, now: float) -> bool:
    """Whether `presented` is `revocations_signature` for a timestamp near `now`."""
    timestamp, _, _ = presented.partition(".")
    if not timestamp.isdigit() or abs(int(timestamp) - now) > SIGNATURE_SKEW:
        return False
    expected = revocations_signature(key, proxy, int(timestamp))
    return hmac.compare_digest(expected.encode(), presented.encode())


def _mac(key: str, message: str) -> str:
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()
