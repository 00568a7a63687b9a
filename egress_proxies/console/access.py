"""Who may open the console, and who may act in it: named tokens with a role.

The console's tokens live in a Secret of their own, never in the crawlers' token
Secret, so a crawler token opens nothing here. Each key names a person and a
role, `<user>.<role>`, and holds that person's token:

    alice.act    may look and act (cordon a Proxy, scale a pool)
    bob.view     may look

The mounted Secret is re-read as it changes (at most once a second), like the
crawlers' tokens (discovery/token_files.py), and each value is checked the same
way (`tokens_from_secret_data`). Comparison is constant-time over digests and
visits every token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from egress_proxies.clock import Clock
from egress_proxies.discovery.auth import InvalidTokenSecretError, tokens_from_secret_data
from egress_proxies.discovery.errors import DiscoveryApiError
from egress_proxies.discovery.token_files import MountedSecret

logger = logging.getLogger(__name__)

_KEY = re.compile(r"(?P<user>[A-Za-z0-9][A-Za-z0-9_-]{0,62})\.(?P<role>view|act)")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="egress-proxies console"'}


class Role(StrEnum):
    """What a console user may do."""

    VIEW = "view"
    ACT = "act"


@dataclass(frozen=True)
class ConsoleUser:
    """A person the console knows: the name Events carry, and the role."""

    name: str
    role: Role

    @property
    def may_act(self) -> bool:
        """Whether this user may change anything."""
        return self.role is Role.ACT


ConsoleUsers = Callable[[], Mapping[str, ConsoleUser]]
"""Returns the valid tokens right now, each with its user; called once per request."""


def users_from_secret_data(data: Mapping[str, str] | None) -> dict[str, ConsoleUser]:
    """The users in a console Secret's `data` (`<user>.<role>` keys, base64 token values).

    A key of another shape, or a value `tokens_from_secret_data` refuses, raises
    InvalidTokenSecretError naming the key only; empty values are skipped.
    """
    users: dict[str, ConsoleUser] = {}
    for key, value in (data or {}).items():
        shape = _KEY.fullmatch(key)
        if shape is None:
            raise InvalidTokenSecretError(
                f"key {key!r} is not <user>.view or <user>.act (user: letters, digits, - or _)"
            )
        for token in tokens_from_secret_data({key: value}):
            users[token] = ConsoleUser(shape["user"], Role(shape["role"]))
    return users


class ConsoleTokenDirectory:
    """ConsoleUsers over a mounted console Secret (one file per key; hidden files ignored)."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self._secret = MountedSecret(
            path, users_from_secret_data, dict[str, ConsoleUser](), "console users", clock
        )
        if not self._secret():
            logger.warning(
                "the console is on but %s holds no console user yet: every console request "
                "is refused until the Secret has a <user>.view or <user>.act key",
                path,
            )

    def __repr__(self) -> str:
        return f"<ConsoleTokenDirectory {self._secret.path} [users: {len(self._secret.value)}]>"

    def __call__(self) -> Mapping[str, ConsoleUser]:
        """The users now; a broken file keeps the last good set (and is logged)."""
        return self._secret()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class ConsoleAuth:
    """Finds the console user an Authorization header belongs to, or refuses with 401."""

    def __init__(self, users: ConsoleUsers) -> None:
        self._users = users
        self._seen: Mapping[str, ConsoleUser] | None = None
        self._digests: tuple[tuple[bytes, ConsoleUser], ...] = ()

    def __repr__(self) -> str:
        acting = sum(1 for _, user in self._digests if user.may_act)
        return f"<ConsoleAuth [users: {len(self._digests)} | may act: {acting}]>"

    def user(self, header: str | None) -> ConsoleUser:
        """The user whose token `header` carries ('Bearer <token>')."""
        users = self._users()
        if users is not self._seen:
            self._digests = tuple((_digest(token), user) for token, user in users.items())
            self._seen = users
        if header is None:
            raise DiscoveryApiError(401, "unauthorized", "missing bearer token", _CHALLENGE)
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise DiscoveryApiError(
                401, "unauthorized", "expected 'Authorization: Bearer <token>'", _CHALLENGE
            )
        presented_digest = _digest(presented.strip())
        found: ConsoleUser | None = None
        for digest, user in self._digests:
            if hmac.compare_digest(presented_digest, digest):
                found = user
        if found is None:
            raise DiscoveryApiError(401, "unauthorized", "not a console token", _CHALLENGE)
        return found
