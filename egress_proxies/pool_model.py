"""The ProxyPool resource: spec and status models, the single source of its CRD schema.

A pool stamps out Proxies from a template (`spec.template`), keeps
`spec.replicas` of them, rolls them when the template changes, replaces the
banned and the old (rotation), and, when `spec.autoscale` is set, moves
`spec.replicas` between bounds from the lease demand it sees.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from egress_proxies.model import Condition, ProxySpec

POOL_KIND = "ProxyPool"
POOL_PLURAL = "proxypools"
POOL_SHORT_NAME = "pxp"


AVAILABLE = "Available"
PROGRESSING = "Progressing"
SCALING_LIMITED = "ScalingLimited"


class _Model(BaseModel):
    """camelCase on the wire, unknown fields rejected; a field docstring is its description."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]}


Seconds = Annotated[int, Field(ge=1, le=30 * 24 * 3600)]
Labels = Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)]


class TemplateMetadata(_Model):
    """Labels put on every Proxy of the pool (beside the pool's own label)."""

    labels: Labels = {}
    """Labels for every Proxy of the pool, e.g. a shard label so the pool's shard runs them."""


class ProxyTemplate(_Model):
    """What each Proxy of the pool looks like."""

    metadata: TemplateMetadata = TemplateMetadata()
    spec: ProxySpec


class Strategy(_Model):
    """How a template change rolls: Proxies above and below `replicas` allowed meanwhile."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.maxSurge > 0 || self.maxUnavailable > 0",
                "strategy.maxSurge and strategy.maxUnavailable must not both be 0",
            ),
        )
    )

    max_surge: Annotated[int, Field(ge=0, le=100)] = 1
    """Proxies the pool may run above `replicas` while it replaces stale ones."""
    max_unavailable: Annotated[int, Field(ge=0, le=100)] = 0
    """Ready Proxies below `replicas` the pool may fall to while it drains."""


class Rotation(_Model):
    """When a Proxy is replaced: banned `maxBans` times within `banWindowSeconds`, or too old."""

    max_age_seconds: Seconds | None = None
    """A Proxy this old (seconds since creation, at least 60) is replaced; unset: never."""
    max_bans: Annotated[int, Field(ge=1, le=10000)] | None = None
    """A Proxy reported banned this many times (any target) is replaced; unset: never."""
    ban_window_seconds: Seconds = 600
    """The window, in seconds, in which bans count toward `maxBans`."""
    min_available: Annotated[int, Field(ge=0, le=1000)] = 1
    """Ready Proxies the pool never drains below (at most `replicas`)."""


class Autoscale(_Model):
    """Demand autoscaling of `spec.replicas` between `minReplicas` and `maxReplicas`."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.minReplicas <= self.maxReplicas",
                "autoscale.minReplicas must not exceed autoscale.maxReplicas",
            ),
            (
                "self.minIdle <= self.maxReplicas",
                "autoscale.minIdle must not exceed autoscale.maxReplicas",
            ),
        )
    )

    min_replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """The fewest replicas the autoscaler sets."""
    max_replicas: Annotated[int, Field(ge=1, le=1000)]
    """The most replicas the autoscaler sets; at it, ScalingLimited is True."""
    target_utilization_percent: Annotated[int, Field(ge=1, le=100)] = 80
    """Active leases ÷ capacity of the Ready Proxies, in percent, that scales up."""
    scale_up_on_waiting: Annotated[int, Field(ge=1, le=100000)] = 1
    """Lease requests refused at capacity within a minute that scale up (when none is free)."""
    scale_up_step: Annotated[int, Field(ge=1, le=100)] = 1
    """Replicas added per step up; the next step waits until the last one is Ready."""
    scale_down_delay_seconds: Seconds = 300
    """Seconds of continuous low use before the pool scales down."""
    min_idle: Annotated[int, Field(ge=0, le=1000)] = 0
    """Unleased Proxies kept beside the leased ones when scaling down."""


class ProxyPoolSpec(_Model):
    """What the user asks for."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.autoscale) || (self.replicas >= self.autoscale.minReplicas"
                " && self.replicas <= self.autoscale.maxReplicas)",
                "spec.replicas must lie within autoscale.minReplicas..maxReplicas",
            ),
            (
                "!has(self.rotation) || !has(self.rotation.maxAgeSeconds)"
                " || self.rotation.maxAgeSeconds >= 60",
                "rotation.maxAgeSeconds must be at least 60",
            ),
            (
                "!has(self.rotation) || self.rotation.minAvailable <= self.replicas"
                " || self.replicas == 0",
                "rotation.minAvailable must not exceed spec.replicas",
            ),
        )
    )

    replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """How many Proxies the pool keeps (also set by `kubectl scale`, or by autoscale)."""
    template: ProxyTemplate
    strategy: Strategy = Strategy()
    rotation: Rotation = Rotation()
    autoscale: Autoscale | None = None


class Demand(_Model):
    """The lease demand the pool's Proxies see (published by the discovery tier)."""

    active_leases: int = 0
    """Leases the pool's Proxies hold now, for every target."""
    capacity: int = 0
    """The leases the pool's Ready, non-draining Proxies carry at once for one target
    (the sum of their maxLeases)."""
    busiest_target_leases: int = 0
    """The room on those Proxies the busiest target takes: its leases on each (at most
    maxLeases), and all of a Proxy's maxLeases where other targets fill its maxTargets."""
    waiting_per_minute: int = 0
    """Lease requests refused at capacity within the last minute, since the last scaling step."""


class ProxyPoolStatus(_Model):
    """What the pool controller observed and decided."""

    replicas: int = 0
    """The pool's Proxies that are not draining."""
    ready_replicas: int = 0
    """The non-draining Proxies in phase Ready."""
    leased_replicas: int = 0
    """The Proxies (draining or not) holding at least one lease."""
    draining_replicas: int = 0
    """The Proxies being drained: leased no more, deleted when their leases end."""
    updated_replicas: int = 0
    """The non-draining Proxies made from the current template."""
    selector: str = ""
    """The label selector of the pool's Proxies (for the scale subresource)."""
    observed_generation: int | None = None
    """The metadata.generation the controller last acted on."""
    demand: Demand | None = None
    low_use_since: str | None = None
    """Since when use has stayed low enough to scale down (RFC 3339); unset: not low."""
    last_scale_time: str | None = None
    """When the autoscaler last changed `replicas` (RFC 3339)."""
    conditions: list[Condition] = []
    """Available, Progressing, ScalingLimited, and the summary Ready, Reconciling and Stalled."""


def template_hash(template: Mapping[str, Any]) -> str:
    """A short, stable hash of a pool's template as stored (defaults included)."""
    document = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(document.encode()).hexdigest()[:10]
