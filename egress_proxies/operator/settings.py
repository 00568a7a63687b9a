"""What `egress-proxies run` can be told: one declaration for flags, env variables and defaults.

Each field of `RunSettings` is one option: its flag (`--field-name` unless
the field says otherwise), its environment variables (`EGRESS_PROXIES_` +
the field name in capitals unless it lists its own), its default and its
help text. `cli.py` builds the argparse grammar and `--help` from these
fields; pydantic-settings reads the environment. A flag beats its variable,
which beats the default. `RunSettings` takes its lease limits from
`LeaseLimitSettings`, which `egress-proxies discovery` reads as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from egress_proxies.leases.limits import LeaseLimits
from egress_proxies.leases.pace import (
    DEFAULT_PACE_CEILING,
    DEFAULT_PACE_FLOOR,
    DEFAULT_PACE_START,
    PaceLimits,
    TargetBounds,
)
from egress_proxies.leases.urls import redact_url
from egress_proxies.model import DEFAULT_SQUID_IMAGE

ENV_PREFIX = "EGRESS_PROXIES_"


def option(
    default: Any,
    description: str,
    *,
    env: tuple[str, ...] = (),
    flag: str | None = None,
    **constraints: Any,
) -> Any:
    """A field of `RunSettings`: `env` replaces the default variable name, `flag` the flag."""
    extra: dict[str, Any] = {}
    if flag is not None:
        extra["flag"] = flag
    return Field(
        default,
        description=description,
        validation_alias=AliasChoices(*env) if env else None,
        json_schema_extra=extra or None,
        **constraints,
    )


def _seconds(name: str) -> tuple[str, ...]:
    return (f"{ENV_PREFIX}{name}_SECONDS",)


class LeaseLimitSettings(BaseSettings):
    """The lease limits: the same options for `run` and `discovery`, so one store agrees."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, populate_by_name=True, extra="forbid", frozen=True
    )

    lease_max_ttl: int = option(
        3600, "the longest lease a crawler may ask for, in seconds", env=_seconds("LEASE_MAX_TTL")
    )
    lease_cooldown: float = option(
        300.0,
        "a ban's first cooldown, in seconds, and the longest a rate limit cools",
        env=_seconds("LEASE_COOLDOWN"),
    )
    lease_rate_limit_cooldown: float = option(
        30.0,
        "a rate limit's first cooldown without the site's Retry-After, doubling on repeats "
        "up to --lease-cooldown",
        env=_seconds("LEASE_RATE_LIMIT_COOLDOWN"),
    )
    lease_ban_backoff_cap: float = option(
        21600.0,
        "the longest cooldown after repeated bans, in seconds (21600 = 6 h)",
        env=_seconds("LEASE_BAN_BACKOFF_CAP"),
    )

    lease_pace_start: float = option(
        DEFAULT_PACE_START,
        "requests/s a proxy starts at for a target the fleet knows nothing about",
    )
    lease_pace_floor: float = option(
        DEFAULT_PACE_FLOOR, "the slowest pace rate limits can lower a proxy to, requests/s"
    )
    lease_pace_ceiling: float = option(
        DEFAULT_PACE_CEILING, "the fastest pace accepted requests can raise a proxy to, requests/s"
    )
    lease_target_bounds: str = option(
        "",
        "per-target bounds, a JSON list of {pattern, maxRequestsPerSecond, "
        "maxFleetRequestsPerSecond, maxLeases}; the first matching pattern applies",
    )

    def lease_limits(self) -> LeaseLimits:
        """These limits as the stores take them; ValueError when impossible."""
        return LeaseLimits(
            max_ttl=self.lease_max_ttl,
            cooldown_window=self.lease_cooldown,
            ban_backoff_cap=self.lease_ban_backoff_cap,
            rate_limit_window=self.lease_rate_limit_cooldown,
            pace=self.pace_limits(),
        )

    def pace_limits(self) -> PaceLimits:
        """The pace's floor, ceiling, start and per-target bounds; ValueError when impossible."""
        return PaceLimits(
            start=self.lease_pace_start,
            floor=self.lease_pace_floor,
            ceiling=self.lease_pace_ceiling,
            targets=target_bounds_of(self.lease_target_bounds),
        )


class _TargetBoundsEntry(BaseModel):
    """One entry of --lease-target-bounds, as users write it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    pattern: str
    max_requests_per_second: float | None = Field(None, alias="maxRequestsPerSecond")
    max_fleet_requests_per_second: float | None = Field(None, alias="maxFleetRequestsPerSecond")
    max_leases: int | None = Field(None, alias="maxLeases")


_TARGET_BOUNDS = TypeAdapter(list[_TargetBoundsEntry])


def target_bounds_of(text: str) -> tuple[TargetBounds, ...]:
    """The bounds a --lease-target-bounds JSON list declares; ValueError naming the problem."""
    if not text.strip():
        return ()
    try:
        entries = _TARGET_BOUNDS.validate_json(text)
    except ValidationError as error:
        problem = error.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"target bounds {where}: {problem['msg']}") from None
    return tuple(
        TargetBounds(
            entry.pattern,
            max_rate_per_proxy=entry.max_requests_per_second,
            max_rate=entry.max_fleet_requests_per_second,
            max_leases=entry.max_leases,
        )
        for entry in entries
    )


class RunSettings(LeaseLimitSettings):
    """The operator's options, read from `EGRESS_PROXIES_*` variables and overridden by flags."""

    kubeconfig: Path | None = option(
        None, "kubeconfig file; unset: the in-cluster service account", env=("KUBECONFIG",)
    )
    state_dir: Path = option(Path(".state/operator"), "Pulumi backend and stack work dirs")
    namespaces: Annotated[list[str], NoDecode] = option(
        [],
        "watch only this namespace (repeatable; the variable is comma-separated); unset: all",
        flag="--namespace",
    )
    concurrency: int = option(4, "pulumi operations at once", ge=1)
    squid_image: str = option(
        DEFAULT_SQUID_IMAGE,
        "the squid image of a kubernetes Proxy whose spec.kubernetes.image is unset",
        min_length=1,
    )
    stack_worker_idle: float = option(
        30.0,
        "seconds a stack worker process lives without an operation before it exits and "
        "returns its memory (0 = run pulumi operations in the operator's own threads)",
        ge=0,
    )
    stack_worker_operations: int = option(
        200, "operations a stack worker process takes before a fresh one replaces it", ge=1
    )
    liveness_port: int | None = option(None, "serve kopf's liveness probe on this port")
    discovery_port: int = option(8090, "the discovery + lease API's port", ge=0, le=65535)
    # In a pod the Service reaches the operator on the pod's address: bind them all.
    discovery_host: str = option("0.0.0.0", "the address the discovery API binds")  # noqa: S104
    discovery_tokens_dir: Path | None = option(
        None, "a mounted Secret: one bearer token per file, re-read on change"
    )
    discovery_allow_no_auth: bool = option(
        False, "serve the discovery API without authentication (logged loudly)"
    )
    metrics_port: int = option(
        9090, "serve Prometheus metrics at /metrics on this port (0 = off)", ge=0, le=65535
    )
    trace_health_probes: bool = option(
        False, "one span per health probe (only when tracing is enabled by OTEL_* variables)"
    )
    lease_store: str = option(
        "memory",
        "where leases and cooldowns live: memory (lost on restart) or a redis://, "
        "rediss:// (TLS) or unix:// URL, with AUTH in it as redis-py reads it",
    )
    lease_store_prefix: str = option(
        "egress-proxies", "the Redis key prefix; processes sharing it share leases"
    )
    lease_store_timeout: float = option(
        1.0,
        "seconds a Redis call may take before the API answers 503",
        env=_seconds("LEASE_STORE_TIMEOUT"),
        gt=0,
    )
    gc_interval: float = option(
        600.0, "seconds between orphan GC sweeps", env=_seconds("GC_INTERVAL")
    )
    gc_min_age: float = option(
        600.0, "an orphan must be this many seconds old to be deleted", env=_seconds("GC_MIN_AGE")
    )
    gc_allow_namespaced: bool = option(False, "sweep even when watching only some namespaces")
    retry_base: float = option(5.0, "seconds before the first retry", env=_seconds("RETRY_BASE"))
    retry_cap: float = option(300.0, "longest retry backoff, seconds", env=_seconds("RETRY_CAP"))
    instance_start_timeout: float = option(
        60.0,
        "seconds an instance may stay stuck (image pull, crash loop) before it is replaced",
        env=_seconds("INSTANCE_START_TIMEOUT"),
    )
    instance_ready_timeout: float = option(
        300.0,
        "seconds an instance may take to become ready before it is replaced",
        env=_seconds("INSTANCE_READY_TIMEOUT"),
    )
    gcp_project: str | None = option(
        None,
        "the GCP project whose VMs the GC sweeps and the GCE watch polls (unset: no GCE inventory)",
        env=(f"{ENV_PREFIX}GCP_PROJECT", "GOOGLE_PROJECT"),
    )
    gce_watch_interval: float = option(
        30.0,
        "seconds between polls of the GCE VMs of live Proxies",
        env=_seconds("GCE_WATCH_INTERVAL"),
    )
    peering: str = option(
        "egress-proxies",
        "the kopf peering object shared with other operators (created when missing)",
    )
    priority: int = option(
        0,
        "peering priority: a live peer with a higher one pauses this operator, "
        "the same one pauses both",
        env=(f"{ENV_PREFIX}PEERING_PRIORITY",),
    )
    shard_selector: str | None = option(
        None,
        "own only the Proxies this label selector picks, e.g. shard=a "
        '(docs/operations.md "Sharding")',
    )
    shard_name: str | None = option(
        None,
        "this shard's name in labels, finalizer and peering object (unset: from --shard-selector)",
    )
    standalone: bool = option(
        False,
        "no peering: for a cluster without the kopf.dev peering CRDs, where one operator "
        "is guaranteed to run alone",
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # The lease store URL may carry a Redis password.
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "lease_store" else value

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item for item in value.split(",") if item]
        return value

    @field_validator("gcp_project", mode="before")
    @classmethod
    def _unset_if_empty(cls, value: Any) -> Any:
        return value or None


def flag_of(name: str, info: FieldInfo) -> str:
    """The command-line flag of a field."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("flag"), str):
        return str(extra["flag"])
    return "--" + name.replace("_", "-")


def variables_of(name: str, info: FieldInfo) -> tuple[str, ...]:
    """The environment variables a field reads, the first one winning."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (ENV_PREFIX + name.upper(),)
