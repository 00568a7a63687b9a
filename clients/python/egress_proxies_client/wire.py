"""The discovery API's wire format: request bodies in, typed values and errors out.

Shared by the sync and async faces, which only differ in how they send requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from egress_proxies_client.errors import (
    ApiError,
    ApiUnavailableError,
    AuthenticationError,
    LeaseEndedError,
    NoMatchCounts,
)
from egress_proxies_client.pacing import Pace


@dataclass(frozen=True)
class ProxyInfo:
    """One proxy as GET /v1/proxies lists it (never with credentials)."""

    namespace: str
    name: str
    url: str
    attributes: Mapping[str, str]
    healthy: bool | None
    active_leases: int
    max_leases: int
    latency_millis: int | None

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Grant:
    """A granted lease as the API returned it; the credentials stay out of the repr."""

    lease_id: str = field(repr=False)
    proxy_key: str
    proxy_url: str
    target: str | None
    ttl_seconds: int
    expires_at: datetime
    proxy_url_with_credentials: str = field(repr=False)
    username: str | None = field(repr=False, default=None)
    password: str | None = field(repr=False, default=None)
    pace: Pace | None = None  # None from a server that hands out no pace


def lease_body(
    selector: Mapping[str, str], target: str | None, ttl: int, held: int = 0
) -> dict[str, Any]:
    """POST /v1/leases (`held`: the leases the caller holds for the target already)."""
    body: dict[str, Any] = {"selector": dict(selector), "ttlSeconds": ttl}
    if target is not None:
        body["target"] = target
        if held:
            body["held"] = held
    return body


def report_body(
    result: str,
    reason: str | None,
    target: str | None,
    retry_after: float | None,
    count: int = 1,
    accepted_last_second: int | None = None,
) -> dict[str, Any]:
    """POST /v1/leases/{id}/report (`count`: accepted requests an ok report counts;
    `accepted_last_second`: what the site accepted in the second before a rate limit)."""
    body: dict[str, Any] = {"result": result}
    if count != 1 and result == "ok":
        body["count"] = count
    if reason is not None:
        body["reason"] = reason
    if target is not None:
        body["target"] = target
    if retry_after is not None and result == "rate_limited":
        body["retryAfterSeconds"] = min(max(retry_after, 0.0), 86400.0)
    if accepted_last_second is not None and result == "rate_limited":
        body["acceptedLastSecond"] = min(max(accepted_last_second, 0), 1_000_000)
    return body


# Body fields a server of an earlier release refuses (400: unknown fields are rejected),
# which the request means as well without: optional hints to the pace.
OPTIONAL_FIELDS = ("held", "acceptedLastSecond")


def unknown_optional_field(response: httpx.Response, body: Mapping[str, Any] | None) -> str | None:
    """The optional field of `body` an older server refused as unknown, if that is what the
    response says (a 400 invalid_request naming it as an extra input)."""
    if response.status_code != 400 or not body:
        return None
    try:
        detail = response.json().get("detail", "")
    except ValueError:
        return None
    for name in OPTIONAL_FIELDS:
        if name in body and f"{name}: Extra inputs are not permitted" in str(detail):
            return name
    return None


def grant_of(payload: Mapping[str, Any]) -> Grant:
    """The Grant in a 201 (lease) or 200 (renew) body."""
    proxy = payload["proxy"]
    credentials = proxy.get("credentials") or {}
    return Grant(
        lease_id=payload["leaseId"],
        proxy_key=f"{proxy['namespace']}/{proxy['name']}",
        proxy_url=proxy["url"],
        target=payload.get("target"),
        ttl_seconds=payload["ttlSeconds"],
        expires_at=datetime.fromisoformat(payload["expiresAt"]),
        proxy_url_with_credentials=proxy["urlWithCredentials"],
        username=credentials.get("username"),
        password=credentials.get("password"),
        pace=pace_of(payload),
    )


def pace_of(payload: Mapping[str, Any] | None) -> Pace | None:
    """The `pace` of a grant, renewal or report answer; None when the server sent none."""
    pace = (payload or {}).get("pace")
    if not isinstance(pace, Mapping):
        return None
    lowered = pace.get("lastLoweredAt")
    return Pace(
        requests_per_second=float(pace["requestsPerSecond"]),
        burst=int(pace["burst"]),
        last_lowered_at=None if lowered is None else datetime.fromisoformat(lowered),
        waiting_held=pace.get("waitingHeld"),
    )


def proxies_of(payload: Mapping[str, Any]) -> list[ProxyInfo]:
    """The proxies in a GET /v1/proxies body."""
    return [
        ProxyInfo(
            namespace=p["namespace"],
            name=p["name"],
            url=p["url"],
            attributes=p["attributes"],
            healthy=p["healthy"],
            active_leases=p["activeLeases"],
            max_leases=p["maxLeases"],
            latency_millis=p["latencyMillis"],
        )
        for p in payload["proxies"]
    ]


def no_match_of(response: httpx.Response) -> NoMatchCounts:
    """The counts and Retry-After of a 409."""
    body = response.json()
    header = response.headers.get("Retry-After")
    return NoMatchCounts(
        considered=body["considered"],
        at_capacity=body["atCapacity"],
        in_cooldown=body["inCooldown"],
        unhealthy=body["unhealthy"],
        target_paused=bool(body.get("targetPaused", False)),
        retry_after=float(header) if header is not None and header.isdigit() else None,
    )


def raise_for(response: httpx.Response, *, lease_route: bool = False) -> None:
    """Raise the typed error for a refusal; return for 2xx (and 409, handled by callers)."""
    status = response.status_code
    if status < 300 or status == 409:
        return
    if status >= 500:
        raise ApiUnavailableError(f"the API answered {status}")
    try:
        body = response.json()
        code, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        code, detail = "http_error", response.reason_phrase
    if status == 401:
        raise AuthenticationError(status, code, detail)
    if status == 404 and lease_route:
        raise LeaseEndedError(status, code, detail)
    raise ApiError(status, code, detail)


def unavailable(error: httpx.HTTPError) -> ApiUnavailableError:
    """A transport failure talking to the API (its message names no credentials)."""
    return ApiUnavailableError(f"the API could not be reached: {type(error).__name__}")
