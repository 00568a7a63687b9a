"""Discovery tokens from a mounted Secret directory (one file per key), re-read as it changes.

The kubelet rewrites a mounted Secret's files when the Secret changes, so a
rotation (add the new key, roll the clients, drop the old key) reaches the
API without a restart. The directory is checked at most once per second.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Callable, Mapping, Sized
from pathlib import Path
from typing import Generic, TypeVar

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.discovery.auth import InvalidTokenSecretError, named_tokens_from_secret_data

logger = logging.getLogger(__name__)

_RECHECK_SECONDS = 1.0
T = TypeVar("T")


class MountedSecret(Generic[T]):
    """A mounted Secret's directory (one file per key; hidden files ignored), parsed as it changes.

    `parse` takes the data as a Secret carries it (base64 values) and raises
    InvalidTokenSecretError on bad content: the last good value is kept (and
    the error logged), so a broken rotation never locks everyone out.
    """

    def __init__(
        self,
        path: Path,
        parse: Callable[[dict[str, str]], T],
        empty: T,
        what: str,
        clock: Clock | None = None,
    ) -> None:
        self.path = path
        self._parse = parse
        self._what = what
        self._clock = clock or SystemClock()
        self._checked = -_RECHECK_SECONDS
        self._signature: tuple[tuple[str, int], ...] = ()
        self.value = empty

    def __call__(self) -> T:
        """The parsed content now (the directory is re-read at most once a second)."""
        now = self._clock.monotonic()
        if now - self._checked < _RECHECK_SECONDS:
            return self.value
        self._checked = now
        files = sorted(
            path for path in self.path.glob("*") if path.is_file() and not path.name.startswith(".")
        )
        signature = tuple((path.name, path.stat().st_mtime_ns) for path in files)
        if signature == self._signature:
            return self.value
        try:
            self.value = self._parse(_read(files))
        except InvalidTokenSecretError as error:
            logger.error("%s in %s not reloaded: %s", self._what, self.path, error)
            return self.value
        self._signature = signature
        logger.info("%s loaded from %s: %d", self._what, self.path, _size(self.value))
        return self.value


def _size(value: object) -> int:
    return len(value) if isinstance(value, Sized) else 1


class TokenDirectory:
    """A TokenSource over a directory of token files (hidden files are ignored).

    Each token's name is its file's name (the Secret's key): `names()`.
    """

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self._secret = MountedSecret(
            path, named_tokens_from_secret_data, dict[str, str](), "discovery tokens", clock
        )
        self._named: dict[str, str] | None = None
        self._tokens = frozenset[str]()

    def __repr__(self) -> str:
        return f"<TokenDirectory {self._secret.path} [tokens: {len(self._secret.value)}]>"

    def __call__(self) -> frozenset[str]:
        """The tokens valid now; a broken file keeps the last good set (and is logged)."""
        named = self._secret()
        if named is not self._named:
            self._named, self._tokens = named, frozenset(named)
        return self._tokens

    def names(self) -> Mapping[str, str]:
        """Each token's name (its file's name), as of the last call."""
        return self._secret.value


def _read(files: list[Path]) -> dict[str, str]:
    """Each file's bytes, base64 as in a Secret's data; an unreadable file names itself."""
    data = {}
    for path in files:
        try:
            data[path.name] = base64.b64encode(path.read_bytes()).decode()
        except OSError as error:
            raise InvalidTokenSecretError(
                f"cannot read token file {path.name!r} ({error.strerror}): the process "
                f"(uid {os.getuid()}) needs read access, e.g. the pod's fsGroup"
            ) from None
    return data
