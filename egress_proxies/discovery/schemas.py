"""The API's request and response bodies; /openapi.json is generated from these models."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from egress_proxies.leases import ReportResult
from egress_proxies.leases.waiting import WAITING_WINDOW

MAX_SELECTOR_ATTRIBUTES = 64

AttributeName = Annotated[str, Field(min_length=1, max_length=253)]
AttributeValue = Annotated[str, Field(max_length=253)]
Target = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        description="What the proxy is used against, usually the site's host name.",
    ),
]
Selector = Annotated[
    dict[AttributeName, AttributeValue],
    Field(
        max_length=MAX_SELECTOR_ATTRIBUTES,
        description="Attribute equality: a proxy matches when it carries every pair.",
    ),
]


def _json_number(value: object) -> object:
    """JSON Schema counts 300.0 as an integer, but "300" and true are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


class _Request(BaseModel):
    """camelCase only, no coercion ("300" is not a number), unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        strict=True,
        extra="forbid",
        frozen=True,
    )


class _Response(BaseModel):
    """Built from Python names, serialised in camelCase; clients must ignore fields they
    do not know, so responses can grow."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        serialize_by_alias=True,
        json_schema_serialization_defaults_required=True,
        frozen=True,
    )


MAX_REPORT_COUNT = 1_000_000


class LeaseRequest(_Request):
    """POST /v1/leases."""

    selector: Selector = {}
    ttl_seconds: Annotated[
        int,
        Field(
            ge=1, strict=False, description="Lease lifetime; above the server's maximum is a 400."
        ),
        BeforeValidator(_json_number),
    ]
    target: Target | None = None
    held: Annotated[
        int,
        Field(
            ge=0,
            le=MAX_REPORT_COUNT,
            strict=False,
            description="How many leases the requester already holds for this target (the "
            "client's spreads send it). When it is refused, the target's holders are told that "
            "a crawler holding this many waits (pace.waitingHeld), and those holding more than "
            "one more give one back. Default 0.",
        ),
        BeforeValidator(_json_number),
    ] = 0


REASON_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,39}$"


class ReportRequest(_Request):
    """POST /v1/leases/{leaseId}/report."""

    result: ReportResult
    target: Target | None = Field(
        default=None, description="Defaults to the lease's target, else the cooldown is global."
    )
    reason: str | None = Field(
        default=None,
        pattern=REASON_PATTERN,
        description="A short code for why, e.g. http_403, captcha, tunnel_failed: counted in "
        "metrics by result and reason, and logged.",
    )
    retry_after_seconds: Annotated[
        float | None,
        Field(
            default=None,
            ge=0,
            le=86400,
            strict=False,
            description="The site's Retry-After, on a rate_limited report: the pair cools that "
            "long (at most one ban cooldown window) instead of the rate-limit window, and its "
            "pace is not lowered again nor raised within it.",
        ),
        BeforeValidator(lambda value: value if value is None else _json_number(value)),
    ]
    count: Annotated[
        int,
        Field(
            ge=1,
            le=MAX_REPORT_COUNT,
            strict=False,
            description="How many requests an ok report counts (a batch); each second's worth "
            "at the current pace raises it. Default 1, an old client's one report per lease. "
            "rate_limited and banned reports are one event whatever the count.",
        ),
        BeforeValidator(_json_number),
    ] = 1
    accepted_last_second: Annotated[
        int | None,
        Field(
            default=None,
            ge=0,
            le=MAX_REPORT_COUNT,
            strict=False,
            description="On a rate_limited report: how many of this lease's requests the site "
            "accepted in the second before it refused this one (the client's own count). The "
            "pair's limit is set there, instead of estimated from the paces handed out; 0 or "
            "absent (an older client): estimated. Ignored on other results.",
        ),
        BeforeValidator(lambda value: value if value is None else _json_number(value)),
    ]


class RenewRequest(_Request):
    """POST /v1/leases/{leaseId}/renew."""

    ttl_seconds: Annotated[
        int,
        Field(ge=1, strict=False, description="The lease ends this long from now."),
        BeforeValidator(_json_number),
    ]


class Credentials(_Response):
    """Basic-auth credentials the proxy requires: for a managed proxy, this lease's own.

    A managed proxy's lease credentials work on that proxy only, until the lease's
    `expiresAt` (a renewal hands out new ones with the new end), and stop within
    seconds of a release, a `banned` report or the removal of the token the lease
    was asked for with. An External proxy's are its configured credentials.
    """

    username: str
    password: str


class LeasedProxy(_Response):
    """Everything a client needs to send traffic through the leased proxy."""

    namespace: str
    name: str
    scheme: str
    host: str
    port: int
    url: str = Field(description="scheme://host:port, without credentials.")
    credentials: Credentials | None = Field(
        description="Present when the proxy requires authentication."
    )
    url_with_credentials: str = Field(
        description="A ready-to-use proxy URL with the credentials embedded (equals url without)."
    )
    attributes: dict[str, str]
    latency_millis: int | None


class Revocations(_Response):
    """200 from GET /v1/proxies/{namespace}/{name}/revocations (asked by the proxy itself)."""

    revoked: list[str] = Field(
        description="Handles of leases released on this proxy before their end."
    )
    renewed: dict[str, int] = Field(
        description="Handles of renewed leases on this proxy and their current end (Unix "
        "seconds): credentials of an earlier grant of the lease work until then."
    )
    tokens: list[str] = Field(
        description="Tags of the bearer tokens valid now, as this proxy knows them; `open` "
        "when the API takes no tokens."
    )


class PaceBody(_Response):
    """How fast the holder may send through the proxy to the target (docs/api.md, "Pace")."""

    requests_per_second: float = Field(
        description="The learned pace for this proxy and target, within the target's bounds and "
        "shared with other holders of the proxy for the target."
    )
    burst: int = Field(description="Requests that may go at once after a pause (at least 1).")
    last_lowered_at: datetime | None = Field(
        description="When a rate limit last lowered this proxy's pace for the target; null if "
        "never."
    )
    waiting_held: int | None = Field(
        description=f"A crawler was refused a lease for this target within the last "
        f"{WAITING_WINDOW:g} s while "
        "holding this many for it; null: nobody waits. A holder of more than one lease more "
        "than that should give one back, so crawlers sharing the fleet get equal shares."
    )


class LeaseGranted(_Response):
    """201 from POST /v1/leases (and 200 from renew)."""

    lease_id: str
    proxy: LeasedProxy
    target: str | None
    ttl_seconds: int
    expires_at: datetime
    pace: PaceBody


class ReportAccepted(_Response):
    """200 from POST /v1/leases/{leaseId}/report: the holder's pace after the report."""

    pace: PaceBody


class NoMatchBody(_Response):
    """409 from POST /v1/leases. considered = atCapacity + inCooldown + unhealthy."""

    error: Literal["no_match", "target_paused", "target_full"] = "no_match"
    detail: str
    considered: int
    at_capacity: int
    in_cooldown: int
    unhealthy: int = Field(
        description="Matched but not offered: unhealthy, not yet probed, or being deleted."
    )
    target_paused: bool = Field(
        description="The ban-storm guard paused this target: most of the pool was banned by it "
        "lately. Every proxy not at capacity then counts as inCooldown."
    )
    target_full: bool = Field(
        description="The target holds as many leases as its bounds allow (maxLeases). Every "
        "offerable proxy then counts as atCapacity, and Retry-After is when the first of the "
        "target's leases ends."
    )
    retry_after_seconds: int | None = Field(
        description="Also sent as the Retry-After header: seconds until the earliest matching "
        "proxy may free up. Null (no header) when no matching proxy is healthy."
    )


class ProxySummary(_Response):
    """One proxy in GET /v1/proxies (credentials only ever travel with a lease)."""

    namespace: str
    name: str
    scheme: str
    host: str
    port: int
    url: str
    attributes: dict[str, str]
    healthy: bool | None = Field(description="The health verdict; null until first probed.")
    deleting: bool
    draining: bool = Field(description="Its pool is removing it: it is leased no more.")
    latency_millis: int | None
    max_leases: int = Field(description="Leases it carries at once for one target.")
    max_targets: int | None = Field(
        default=None,
        description="Targets it carries leases for at once; null: any number. "
        "maxTargets 1 with maxLeases 1 is an exclusive proxy.",
    )
    active_leases: int = Field(description="Leases held on it now, for every target.")
    managed: bool


class ProxyList(_Response):
    """200 from GET /v1/proxies."""

    proxies: list[ProxySummary]
    count: int


class ErrorBody(_Response):
    """Every 4xx (except 409 no_match, which adds counts) and 5xx."""

    error: str = Field(description="A stable machine-readable code, e.g. invalid_request.")
    detail: str = Field(description="What was wrong, for a human.")


class Health(_Response):
    """200 from GET /healthz."""

    status: Literal["ok"] = "ok"
