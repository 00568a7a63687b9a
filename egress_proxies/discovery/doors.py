"""Each lease's own credentials for its proxy, and the revocation list each proxy pulls.

A managed proxy with a signing key gets credentials per lease
(leases/credentials.py); any other proxy (External, or managed from before
signing keys) hands out the credentials it has. A managed proxy's squid asks
`GET /v1/proxies/{namespace}/{name}/revocations` every second, signed with
its key instead of a bearer token (it holds none): the handles of leases
released on it before their end, the new ends of renewed ones (so credentials
of an earlier grant keep working, as they did for older clients), and the
tags of the tokens valid now.
"""

from __future__ import annotations

import math

from aiohttp import web

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.discovery.auth import TokenSource
from egress_proxies.discovery.errors import DiscoveryApiError, json_response
from egress_proxies.discovery.index import IndexedCatalog
from egress_proxies.discovery.schemas import Revocations
from egress_proxies.leases import Lease, LeaseStore
from egress_proxies.leases.credentials import (
    lease_credentials,
    lease_handle,
    signature_valid,
    token_tags,
)
from egress_proxies.values import ProxyCredentials

SIGNATURE_HEADER = "X-Proxy-Signature"


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (None without one)."""
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class ProxyDoors:
    """Issues lease credentials and answers the proxies' revocation requests."""

    def __init__(
        self,
        catalog: IndexedCatalog,
        store: LeaseStore,
        tokens: TokenSource,
        clock: Clock | None = None,
    ) -> None:
        self._catalog = catalog
        self._store = store
        self._tokens = tokens
        self._clock = clock or SystemClock()

    def __repr__(self) -> str:
        return f"<ProxyDoors [tokens: {len(self._tokens())}]>"

    def credentials(self, lease: Lease, authorization: str | None) -> ProxyCredentials | None:
        """The lease's own credentials, or None when its proxy hands out its configured ones."""
        key = _signing_key(lease.proxy)
        if key is None:
            return None
        token = bearer_token(authorization) if self._tokens() else None
        return lease_credentials(key, lease.proxy.key, lease.lease_id, lease.expires_at, token)

    async def revocations(self, request: web.Request) -> web.Response:
        """GET /v1/proxies/{namespace}/{name}/revocations, signed by the proxy's key."""
        key = proxy_key(request.match_info["namespace"], request.match_info["name"])
        record = self._catalog.current().record(key)
        signing_key = None if record is None else _signing_key(record)
        presented = request.headers.get(SIGNATURE_HEADER, "")
        now = self._clock.time()
        if signing_key is None or not signature_valid(signing_key, key, presented, now):
            # One answer for an unknown proxy and a bad signature: neither says which.
            raise DiscoveryApiError(403, "forbidden", "not signed by this proxy's key")
        ends = await self._store.lease_ends(key)
        body = Revocations(
            revoked=sorted(lease_handle(lease_id) for lease_id in ends.revoked),
            renewed={lease_handle(i): math.ceil(end) for i, end in ends.renewed.items()},
            tokens=token_tags(signing_key, self._tokens()),
        )
        return json_response(body.model_dump_json())


def _signing_key(record: ProxyRecord) -> str | None:
    credentials = record.credentials
    if not record.managed or credentials is None:
        return None
    return credentials.signing_key
