"""What `egress-proxies run` can be told: the operator's options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import field_validator
from pydantic_settings import NoDecode

from egress_proxies.model import DEFAULT_SQUID_IMAGE
from egress_proxies.settings.cluster import ClusterSettings
from egress_proxies.settings.console import ConsoleSettings
from egress_proxies.settings.leases import LeaseSettings
from egress_proxies.settings.options import ENV_PREFIX, option, seconds
from egress_proxies.settings.server import DiscoveryServerSettings
from egress_proxies.settings.telemetry import TelemetrySettings
from egress_proxies.stacks.backends.url import BackendUrl, parse_backend_url


class RunSettings(
    ClusterSettings, LeaseSettings, DiscoveryServerSettings, ConsoleSettings, TelemetrySettings
):
    """The operator's options, read from `EGRESS_PROXIES_*` variables and overridden by flags."""

    title: ClassVar[str] = "operator"

    state_dir: Path = option(
        Path(".state/operator"),
        "stack work dirs, and the Pulumi backend unless --state-backend names one",
    )
    state_backend: BackendUrl | None = option(
        None,
        "the Pulumi backend of the stacks: postgres://user@host/db, "
        "s3://bucket/prefix?endpoint=..., gs:// or azblob:// (untested here); passwords from "
        'PGPASSWORD / AWS_* and the like (docs/operations.md "State backend"); '
        "unset: file:// under --state-dir",
    )
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
    proxy_discovery_url: str | None = option(
        None,
        "the discovery API's URL as managed proxies reach it; each pulls its lease "
        "revocation list from there every second (unset: lease credentials end only "
        "when the lease expires)",
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
    liveness_port: int | None = option(
        None, "serve kopf's liveness probe on this port", ge=0, le=65535
    )
    gc_interval: float = option(
        600.0, "seconds between orphan GC sweeps", env=seconds("GC_INTERVAL"), gt=0
    )
    gc_min_age: float = option(
        600.0,
        "an orphan must be this many seconds old to be deleted",
        env=seconds("GC_MIN_AGE"),
        ge=0,
    )
    gc_allow_namespaced: bool = option(False, "sweep even when watching only some namespaces")
    retry_base: float = option(
        5.0, "seconds before the first retry", env=seconds("RETRY_BASE"), gt=0
    )
    retry_cap: float = option(
        300.0, "longest retry backoff, seconds", env=seconds("RETRY_CAP"), gt=0
    )
    instance_start_timeout: float = option(
        60.0,
        "seconds an instance may stay stuck (image pull, crash loop) before it is replaced",
        env=seconds("INSTANCE_START_TIMEOUT"),
        gt=0,
    )
    instance_ready_timeout: float = option(
        300.0,
        "seconds an instance may take to become ready before it is replaced",
        env=seconds("INSTANCE_READY_TIMEOUT"),
        gt=0,
    )
    gcp_project: str | None = option(
        None,
        "the GCP project whose VMs the GC sweeps and the GCE watch polls (unset: no GCE inventory)",
        env=(f"{ENV_PREFIX}GCP_PROJECT", "GOOGLE_PROJECT"),
    )
    gce_watch_interval: float = option(
        30.0,
        "seconds between polls of the GCE VMs of live Proxies",
        env=seconds("GCE_WATCH_INTERVAL"),
        gt=0,
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
    priority_by_start: bool = option(
        False,
        "peering priority by arrival instead of --priority: a replica ranks below every "
        "live peer when it joins, so one of several replicas works (deploy/components/ha)",
    )
    peering_lifetime: int = option(
        60,
        "seconds a peer's keep-alive lasts: a standby takes over at most this long after "
        "the active operator dies",
        env=seconds("PEERING_LIFETIME"),
        ge=15,
    )
    pod_namespace: str | None = option(
        None,
        "the operator pod's own namespace (downward API): the active replica then clears "
        "the stack locks of replicas whose pods are gone",
        env=("POD_NAMESPACE",),
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

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item for item in value.split(",") if item]
        return value

    @field_validator("proxy_discovery_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("state_backend", mode="before")
    @classmethod
    def _backend_url(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_backend_url(value) if value.strip() else None
        return value

    @field_validator("gcp_project", mode="before")
    @classmethod
    def _unset_if_empty(cls, value: Any) -> Any:
        return value or None
