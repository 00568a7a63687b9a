"""Discovery tokens from a mounted Secret directory (one file per key), re-read as it changes.

The kubelet rewrites a mounted Secret's files when the Secret changes, so a
rotation (add the new key, roll the clients, drop the old key) reaches the
API without a restart. The directory is checked at most once per second.
"""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.discovery.auth import InvalidTokenSecretError, tokens_from_secret_data

logger = logging.getLogger(__name__)

_RECHECK_SECONDS = 1.0


class TokenDirectory:
    """A TokenSource over a directory of token files (hidden files are ignored)."""

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self._path = path
        self._clock = clock or SystemClock()
        self._checked = -_RECHECK_SECONDS
        self._signature: tuple[tuple[str, int], ...] = ()
        self._tokens: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<TokenDirectory {self._path} [tokens: {len(self._tokens)}]>"

    def __call__(self) -> frozenset[str]:
        """The tokens valid now; a broken file keeps the last good set (and is logged)."""
        now = self._clock.monotonic()
        if now - self._checked < _RECHECK_SECONDS:
            return self._tokens
        self._checked = now
        files = sorted(
            path
            for path in self._path.glob("*")
            if path.is_file() and not path.name.startswith(".")
        )
        signature = tuple((path.name, path.stat().st_mtime_ns) for path in files)
        if signature == self._signature:
            return self._tokens
        try:
            self._tokens = tokens_from_secret_data(_read(files))
        except InvalidTokenSecretError as error:
            logger.error("discovery tokens in %s not reloaded: %s", self._path, error)
            return self._tokens
        self._signature = signature
        logger.info("discovery tokens loaded from %s: %d", self._path, len(self._tokens))
        return self._tokens


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
