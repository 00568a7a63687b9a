"""Every error the client raises derives from EgressProxiesError:

    EgressProxiesError
    ├── ApiError                     the API refused a request (status, code, detail)
    │   ├── AuthenticationError      401: missing or wrong token
    │   └── LeaseEndedError          404 on renew/report: the lease is over, lease anew
    ├── ApiUnavailableError          the API could not be reached or answered 5xx
    ├── NoProxyAvailableError        409 until `wait` ran out; carries the last 409's counts
    │   └── TargetPausedError        the ban-storm guard paused the target
    └── ProxyRefusedError            raised by crawler code inside a lease: the site refused
        ├── ProxyBannedError         the proxy; the lease reports it on exit
        └── ProxyRateLimitedError

Messages and reprs never carry a token, a password or a proxy URL with credentials.
"""

from __future__ import annotations

from dataclasses import dataclass


class EgressProxiesError(Exception):
    """The root of every error this client raises.

    The client distribution's root, apart from the operator's
    `egress_proxies.errors.EgressProxiesError` of the same name: crawlers
    install only this distribution, so neither imports the other.
    """


class ApiError(EgressProxiesError):
    """The API refused a request: its status and `{error, detail}` body."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class AuthenticationError(ApiError):
    """401: the token is missing or not one the server accepts."""


class LeaseEndedError(ApiError):
    """404 on a lease: it was released, expired, or its proxy was deleted."""


class ApiUnavailableError(EgressProxiesError):
    """The API could not be reached, timed out, or failed (5xx): transient."""


@dataclass(frozen=True)
class NoMatchCounts:
    """The counts of a 409: considered = at_capacity + in_cooldown + unhealthy."""

    considered: int
    at_capacity: int
    in_cooldown: int
    unhealthy: int
    target_paused: bool
    retry_after: float | None


class NoProxyAvailableError(EgressProxiesError):
    """No matching proxy became free within `wait`; `counts` are the last 409's."""

    def __init__(self, counts: NoMatchCounts, attempts: int, waited: float) -> None:
        super().__init__(
            f"no proxy free after {attempts} attempts in {waited:.1f} s "
            f"(considered {counts.considered}: {counts.at_capacity} at capacity, "
            f"{counts.in_cooldown} cooling, {counts.unhealthy} unhealthy)"
        )
        self.counts = counts
        self.attempts = attempts
        self.waited = waited


class TargetPausedError(NoProxyAvailableError):
    """The server paused the target: most of the pool was banned by it lately."""


class ProxyRefusedError(EgressProxiesError):
    """Raise inside a lease when the site refused the proxy; the lease reports it."""

    result = "banned"

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{self.result}: {reason}")
        self.reason = reason
        self.retry_after = retry_after


class ProxyBannedError(ProxyRefusedError):
    """The site banned the proxy (403, captcha, challenge page)."""

    result = "banned"


class ProxyRateLimitedError(ProxyRefusedError):
    """The site rate-limited the proxy (429, 503 with Retry-After)."""

    result = "rate_limited"
