"""Bearer-token authentication: several valid tokens at once, asked for on every request.

Tokens come from a Secret, one per key, so a rotation adds the new token, rolls
the clients, then removes the old one, with no restart. Comparison is
constant-time over fixed-length digests and visits every token; a header once
found valid is remembered until the token set changes, so a client's later
requests skip the digest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Mapping

from egress_proxies.discovery.errors import DiscoveryApiError
from egress_proxies.errors import EgressProxiesError

logger = logging.getLogger(__name__)

TokenSource = Callable[[], frozenset[str]]
"""Returns the tokens valid right now; called once per request."""

TokenNames = Callable[[], Mapping[str, str]]
"""Returns each valid token's name (its Secret key), by token; called once per request."""

MIN_TOKEN_LENGTH = 16
# Spellings of valid headers remembered ("Bearer t", "bearer  t "...); more starts over.
MAX_ACCEPTED_HEADERS = 256
_TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="egress-proxies"'}


class InvalidTokenSecretError(ValueError, EgressProxiesError):
    """A token Secret entry that cannot be a bearer token (the message names the key only)."""


def tokens_from_secret_data(data: Mapping[str, str] | None) -> frozenset[str]:
    """The tokens in a Secret's `data`: one base64 value per key, surrounding whitespace ignored.

    Empty values are skipped (a key being rotated out). A value that is not base64,
    not UTF-8, holds spaces or control characters, or is shorter than 16 characters
    raises InvalidTokenSecretError, so a broken Secret never half-applies.
    """
    return frozenset(named_tokens_from_secret_data(data))


def named_tokens_from_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    """The tokens in a Secret's `data` (as `tokens_from_secret_data`), each with its key."""
    tokens: dict[str, str] = {}
    for key, value in (data or {}).items():
        try:
            token = base64.b64decode(value, validate=True).decode("utf-8").strip()
        except (binascii.Error, ValueError) as error:
            raise InvalidTokenSecretError(f"key {key!r} is not base64-encoded UTF-8") from error
        if not token:
            continue
        if not _TOKEN_CHARACTERS.fullmatch(token):
            raise InvalidTokenSecretError(f"key {key!r} holds whitespace or control characters")
        if len(token) < MIN_TOKEN_LENGTH:
            raise InvalidTokenSecretError(
                f"key {key!r} is shorter than {MIN_TOKEN_LENGTH} characters"
            )
        tokens[token] = key
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class BearerAuth:
    """Checks a request's bearer token: token digests and whether auth is on."""

    def __init__(
        self, tokens: TokenSource, *, allow_no_auth: bool, names: TokenNames | None = None
    ) -> None:
        self._tokens = tokens
        self._names = names
        self._allow_no_auth = allow_no_auth
        self._seen: frozenset[str] | None = None
        self._digests: tuple[bytes, ...] = ()
        self._digest_names: tuple[str | None, ...] = ()
        # Authorization headers already found valid for the current tokens (with the
        # token's name), so a client's next request skips the digest: a dict lookup hashes
        # the whole header and compares contents only on an equal hash, which a wrong
        # token does not have.
        self._accepted: dict[str, str | None] = {}

    def check(self, header: str | None) -> str | None:
        """The name of the valid token the Authorization header carries (None: unnamed).

        Raises a 401 DiscoveryApiError unless it carries a valid token.
        """
        digests = self.refresh()
        if not digests and self._allow_no_auth:
            return None
        if header is None:
            raise DiscoveryApiError(401, "unauthorized", "missing bearer token", _CHALLENGE)
        if header in self._accepted:
            return self._accepted[header]
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise DiscoveryApiError(
                401, "unauthorized", "expected 'Authorization: Bearer <token>'", _CHALLENGE
            )
        presented_digest = _digest(presented.strip())
        matched, name = False, None
        for digest, digest_name in zip(digests, self._digest_names, strict=True):
            if hmac.compare_digest(presented_digest, digest):
                matched, name = True, digest_name
        if not matched:
            raise DiscoveryApiError(401, "unauthorized", "invalid bearer token", _CHALLENGE)
        if len(self._accepted) >= MAX_ACCEPTED_HEADERS:
            self._accepted.clear()
        self._accepted[header] = name
        return name

    def refresh(self) -> tuple[bytes, ...]:
        """Re-read the tokens (digests of the valid ones), logging when auth turns on or off."""
        tokens = self._tokens()
        # With names, a new set object may rename the same tokens (a Secret key renamed).
        if tokens is not self._seen and (self._names is not None or tokens != self._seen):
            names = self._names() if self._names is not None else {}
            self._digests = tuple(_digest(token) for token in tokens)
            self._digest_names = tuple(names.get(token) for token in tokens)
            self._accepted = {}
            self._log_transition(had_tokens=bool(self._seen), has_tokens=bool(tokens))
            self._seen = tokens
        return self._digests

    def _log_transition(self, *, had_tokens: bool, has_tokens: bool) -> None:
        if has_tokens:
            if not had_tokens:
                logger.info("discovery API authentication is on")
        elif self._allow_no_auth:
            logger.warning(
                "discovery API authentication is DISABLED: no tokens are configured "
                "and allow_no_auth is set; anyone who can reach the port can lease proxies"
            )
        else:
            logger.error(
                "discovery API has no valid tokens: every request except /healthz, "
                "/readyz and /openapi.json is refused until the token Secret provides one"
            )
