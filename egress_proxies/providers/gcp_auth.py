"""OAuth access tokens for the Compute API, from google-auth credentials.

google-auth does the protocol: a service-account key (an RS256 JWT exchanged
at the key's `token_uri`), the GCE metadata server (GKE Workload Identity),
or whatever Application Default Credentials find. Its `refresh` does blocking
HTTP, so it runs in a worker thread; callers on the event loop only await.

No token, key or token-endpoint answer ever reaches a repr, a log line or an
error message: a failed refresh is reported by google-auth's one-line summary
(`invalid_grant: Invalid JWT Signature.`), never its response body.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Protocol

import google.auth
import google.auth.credentials
import google.auth.exceptions
import google.auth.transport.requests
from google.auth import compute_engine
from google.oauth2 import service_account

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.errors import EgressProxiesError
from egress_proxies.providers.inventory import InventoryError

COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"
REFRESH_MARGIN = datetime.timedelta(minutes=5)


class AccessTokens(Protocol):
    """A source of OAuth access tokens for the Compute API."""

    async def bearer(self) -> str:
        """A token valid for at least a few more minutes."""
        ...


class CredentialsError(EgressProxiesError):
    """No usable Google credentials were found (the message says where it looked)."""


class GoogleAuthTokens:
    """Tokens of one google-auth credentials object, refreshed in a thread ahead of expiry."""

    def __init__(
        self,
        credentials: google.auth.credentials.Credentials,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._credentials = credentials
        self._clock = clock or SystemClock()
        self._lock = asyncio.Lock()
        self._request = google.auth.transport.requests.Request()

    def __repr__(self) -> str:
        kind = type(self._credentials)
        account = getattr(self._credentials, "service_account_email", None) or "unknown account"
        state = "fresh" if self._fresh() else "none" if self._credentials.token is None else "stale"
        return f"<GoogleAuthTokens {kind.__module__}.{kind.__name__} {account} [token: {state}]>"

    async def bearer(self) -> str:
        """The cached token, or a new one when it expires within `REFRESH_MARGIN`."""
        async with self._lock:
            if not self._fresh():
                await asyncio.to_thread(self._refresh)
            token = self._credentials.token
            if not isinstance(token, str) or not token:
                raise InventoryError(f"{self!r}: the token endpoint returned no token")
            return token

    def close(self) -> None:
        """Release the HTTP connections of the token refreshes."""
        self._request.session.close()

    def _fresh(self) -> bool:
        if self._credentials.token is None:
            return False
        expiry = self._credentials.expiry  # naive UTC, or None: never expires
        if expiry is None:
            return True
        expires_at = float(expiry.replace(tzinfo=datetime.UTC).timestamp())
        return self._clock.time() < expires_at - REFRESH_MARGIN.total_seconds()

    def _refresh(self) -> None:
        try:
            self._credentials.refresh(self._request)
        except google.auth.exceptions.GoogleAuthError as error:
            # The first argument is google-auth's summary; later ones carry the
            # token endpoint's whole answer, which stays out of logs.
            summary = str(error.args[0]) if error.args else type(error).__name__
            raise InventoryError(f"{self!r}: token refresh failed: {summary}") from None


def key_file_tokens(path: Path) -> GoogleAuthTokens:
    """Tokens for a mounted service-account key file; CredentialsError if it is not one."""
    try:
        credentials = service_account.Credentials.from_service_account_file(
            str(path), scopes=[COMPUTE_SCOPE]
        )
    except (ValueError, KeyError, OSError) as error:
        raise CredentialsError(f"{path}: not a usable service-account key: {error}") from None
    return GoogleAuthTokens(credentials)


def metadata_server_tokens() -> GoogleAuthTokens:
    """Tokens of the GCE metadata server: the node's, or the Workload Identity account."""
    return GoogleAuthTokens(compute_engine.Credentials(scopes=[COMPUTE_SCOPE]))


def application_default_tokens(clock: Clock | None = None) -> GoogleAuthTokens:
    """Tokens of Application Default Credentials; CredentialsError when there are none.

    `GOOGLE_APPLICATION_CREDENTIALS` (the key file the pulumi-gcp provider
    reads too), then gcloud's own, then the metadata server. Blocks while it
    looks: call it at startup, not on the event loop.
    """
    try:
        credentials, _ = google.auth.default(scopes=[COMPUTE_SCOPE])
    except google.auth.exceptions.DefaultCredentialsError as error:
        summary = str(error.args[0]) if error.args else type(error).__name__
        raise CredentialsError(f"no Google credentials: {summary}") from None
    return GoogleAuthTokens(credentials, clock=clock)
