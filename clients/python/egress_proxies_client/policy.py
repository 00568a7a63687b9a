"""Deciding whether a response or an exception means the site refused the proxy.

A pure decision over plain values (status, headers, body, exception): no I/O, so
the same policy serves the SDK, the CLI and the Scrapy middleware.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from egress_proxies_client.errors import ProxyRefusedError


class Verdict(StrEnum):
    """What a response or exception says about the proxy, as the API's report result."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"
    BANNED = "banned"


@dataclass(frozen=True)
class Classification:
    """A verdict, the reason code reported with it, and the site's Retry-After (seconds).

    `against_proxy` marks failures of the proxy itself (tunnel or connect errors):
    the site never saw the request, so crawlers should not slow down for it.
    """

    verdict: Verdict
    reason: str
    retry_after: float | None = None
    against_proxy: bool = False


# Markers of captcha and bot-challenge pages served with a 200.
DEFAULT_BODY_PATTERNS: Mapping[str, str] = {
    "captcha": r"g-recaptcha|h-captcha|hcaptcha\.com|px-captcha|captcha-delivery\.com",
    "challenge": r"cf-chl-|challenge-platform|Attention Required! \| Cloudflare|"
    r"<title>Just a moment\.\.\.</title>",
}
# Exception class names (anywhere in the MRO) that mean the proxy, not the site, failed:
# httpx, Twisted/Scrapy and the standard library spell them differently, and wrap
# them (Scrapy raises DownloadConnectionRefusedError from Twisted's error): causes count.
DEFAULT_PROXY_EXCEPTIONS = frozenset(
    {
        "DownloadConnectionRefusedError",
        "ProxyError",
        "TunnelError",
        "ConnectError",
        "ConnectTimeout",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "TCPTimedOutError",
        "ConnectionLost",
        "ResponseNeverReceived",
    }
)

# What an override returns: a verdict (or its string), or None to let the rules decide.
Override = Callable[..., Verdict | str | None]


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None when absent/bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


@dataclass(frozen=True)
class BanPolicy:
    """Status codes, body patterns and exceptions that mean "banned" or "rate limited".

    Defaults: 403 banned; 429 and 503 rate limited (with their Retry-After); a
    captcha or challenge marker in the body banned; tunnel and connect failures
    through the proxy banned against the proxy. `override(status=..., headers=...,
    body=...)` or `override(exception=...)` runs first; returning None falls
    through to the rules.
    """

    statuses: Mapping[int, Verdict] = field(
        default_factory=lambda: {
            403: Verdict.BANNED,
            429: Verdict.RATE_LIMITED,
            503: Verdict.RATE_LIMITED,
        }
    )
    body_patterns: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_BODY_PATTERNS))
    proxy_exceptions: frozenset[str] = DEFAULT_PROXY_EXCEPTIONS
    override: Override | None = None
    body_bytes: int = 64 * 1024  # only the head of a body is searched
    _compiled: tuple[tuple[str, re.Pattern[str]], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        compiled = tuple((reason, re.compile(p)) for reason, p in self.body_patterns.items())
        object.__setattr__(self, "_compiled", compiled)

    def classify_response(
        self, status: int, headers: Mapping[str, str], body: str | bytes = b""
    ) -> Classification | None:
        """The response's verdict, or None when it looks like a normal answer."""
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        if self.override is not None:
            decided = self.override(status=status, headers=headers, body=body)
            if decided is not None:
                return _overridden(Verdict(decided), f"http_{status}", retry_after)
        verdict = self.statuses.get(status)
        if verdict is not None:
            kept = retry_after if verdict is Verdict.RATE_LIMITED else None
            return Classification(verdict, f"http_{status}", kept)
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        head = text[: self.body_bytes]
        for reason, pattern in self._compiled:
            if pattern.search(head):
                return Classification(Verdict.BANNED, reason)
        return None

    def classify_exception(self, error: BaseException) -> Classification | None:
        """The exception's verdict, or None when it says nothing about the proxy."""
        if self.override is not None:
            decided = self.override(exception=error)
            if decided is not None:
                return _overridden(Verdict(decided), _reason_of(error), None)
        if isinstance(error, ProxyRefusedError):
            return Classification(Verdict(error.result), error.reason, error.retry_after)
        if _names(error) & self.proxy_exceptions:
            return Classification(Verdict.BANNED, "tunnel_failed", against_proxy=True)
        return None


def _overridden(verdict: Verdict, reason: str, retry_after: float | None) -> Classification | None:
    if verdict is Verdict.OK:
        return None
    return Classification(verdict, reason, retry_after if verdict is Verdict.RATE_LIMITED else None)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    return value


def _names(error: BaseException) -> set[str]:
    """Class names of the exception and of what caused it, a few levels down."""
    names: set[str] = set()
    current: BaseException | None = error
    for _ in range(5):
        if current is None:
            break
        names.update(klass.__name__ for klass in type(current).__mro__)
        current = current.__cause__ or current.__context__
    return names


def _reason_of(error: BaseException) -> str:
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()
    return re.sub(r"[^a-z0-9_.-]", "", name)[:40] or "exception"
