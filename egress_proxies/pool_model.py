"""The ProxyPool resource: spec and status models, the single source of its CRD schema.

A pool stamps out Proxies from a template (`spec.template`), keeps
`spec.replicas` of them, rolls them when the template changes, replaces the
banned and the old (rotation), and, when `spec.autoscale` is set, moves
`spec.replicas` between bounds from the lease demand it sees.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from egress_proxies.model import GROUP, Condition, ProxySpec

POOL_KIND = "ProxyPool"
POOL_PLURAL = "proxypools"
POOL_SHORT_NAME = "pxp"

POOL_LABEL = f"{GROUP}/pool"
TEMPLATE_HASH_LABEL = f"{GROUP}/pool-template-hash"
# Set (to the time it started) on a Proxy the pool is removing: it is leased no more.
DRAINING_ANNOTATION = f"{GROUP}/draining"

AVAILABLE = "Available"
PROGRESSING = "Progressing"
SCALING_LIMITED = "ScalingLimited"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]}


Seconds = Annotated[int, Field(ge=1, le=30 * 24 * 3600)]
Labels = Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)]


class TemplateMetadata(_Model):
    """Labels put on every Proxy of the pool (beside the pool's own label)."""

    labels: Labels = {}


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
    max_unavailable: Annotated[int, Field(ge=0, le=100)] = 0


class Rotation(_Model):
    """When a Proxy is replaced: banned `maxBans` times within `banWindowSeconds`, or too old."""

    max_age_seconds: Seconds | None = None
    max_bans: Annotated[int, Field(ge=1, le=10000)] | None = None
    ban_window_seconds: Seconds = 600
    min_available: Annotated[int, Field(ge=0, le=1000)] = 1


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
    max_replicas: Annotated[int, Field(ge=1, le=1000)]
    # Active leases ÷ capacity of the Ready proxies, in percent, that asks for more.
    target_utilization_percent: Annotated[int, Field(ge=1, le=100)] = 80
    # Lease requests answered 409 at capacity per minute that ask for more.
    scale_up_on_waiting: Annotated[int, Field(ge=1, le=100000)] = 1
    scale_up_step: Annotated[int, Field(ge=1, le=100)] = 1
    scale_down_delay_seconds: Seconds = 300
    min_idle: Annotated[int, Field(ge=0, le=1000)] = 0


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
    template: ProxyTemplate
    strategy: Strategy = Strategy()
    rotation: Rotation = Rotation()
    autoscale: Autoscale | None = None


class Demand(_Model):
    """The lease demand the pool's Proxies see (published by the discovery tier)."""

    active_leases: int = 0
    capacity: int = 0
    waiting_per_minute: int = 0


class ProxyPoolStatus(_Model):
    """What the pool controller observed and decided."""

    replicas: int = 0
    ready_replicas: int = 0
    leased_replicas: int = 0
    draining_replicas: int = 0
    updated_replicas: int = 0
    selector: str = ""
    observed_generation: int | None = None
    demand: Demand | None = None
    low_use_since: str | None = None
    last_scale_time: str | None = None
    conditions: list[Condition] = []
