"""The Proxy resource: spec and status models, conditions, and the phase derived from them.

These models are the single source of the CRD schema (`egress_proxies/crd.py`
renders `crds/proxy.yaml` from them) and of everything the operator, the
health engine and the discovery API read from a Proxy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "crawl.example.com"
VERSION = "v1alpha1"
KIND = "Proxy"
PLURAL = "proxies"
SHORT_NAME = "px"

UID_LABEL = f"{GROUP}/proxy-uid"
# Marks the Secret an External Proxy names for its credentials, so watches can select it.
EXTERNAL_CREDENTIALS_LABEL = f"{GROUP}/proxy-credentials"
CLOUD_INIT_LABEL = f"{GROUP}/cloud-init"
SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"
FINALIZER = f"{GROUP}/finalizer"
# On everything a sharded operator creates (pods, ConfigMaps, Secrets): the shard's name.
SHARD_LABEL = f"{GROUP}/shard"

# The squid image of a kubernetes Proxy that names none (the operator's --squid-image default).
DEFAULT_SQUID_IMAGE = "ubuntu/squid:6.10-24.10_beta"
# The `proxy` user of the Ubuntu and Debian squid images.
SQUID_IMAGE_UID = 13


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": rule, "message": msg} for rule, msg in rules]}


class Mode(StrEnum):
    """Managed proxies are provisioned by the operator; External ones only probed and leased."""

    MANAGED = "Managed"
    EXTERNAL = "External"


class ProviderName(StrEnum):
    """Where a managed proxy runs."""

    KUBERNETES = "kubernetes"
    GCP = "gcp"


class SecretRef(_Model):
    """A Secret in the Proxy's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253)]


class HealthCheck(_Model):
    """How the health engine probes through the proxy."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.timeoutSeconds <= self.intervalSeconds",
                "healthCheck.timeoutSeconds must not exceed healthCheck.intervalSeconds",
            ),
        )
    )

    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048)] = (
        "https://www.gstatic.com/generate_204"
    )
    interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 10
    timeout_seconds: Annotated[int, Field(ge=1, le=60)] = 5
    success_threshold: Annotated[int, Field(ge=1, le=10)] = 1
    failure_threshold: Annotated[int, Field(ge=1, le=10)] = 3
    expected_status: Annotated[int, Field(ge=100, le=599)] = 204
    expect_body: Annotated[str | None, Field(max_length=1024)] = None


class Endpoint(_Model):
    """An External proxy's address and optional credentials (Secret keys username/password)."""

    scheme: Literal["http", "https"] = "http"
    host: Annotated[str, Field(min_length=1, max_length=253)]
    port: Annotated[int, Field(ge=1, le=65535)]
    credentials_secret_ref: SecretRef | None = None


class CloudInit(_Model):
    """User data merged into a GCE VM's cloud-init (the Secret must carry the cloud-init label)."""

    secret_ref: SecretRef


class KubernetesSpec(_Model):
    """A Squid pod in the operator's cluster, meeting Pod Security "restricted".

    The pod runs as `runAsUser`/`runAsGroup` (the squid image's `proxy` user,
    13/13 on Ubuntu and Debian images; set them for an image whose squid
    user differs), never as root. `resources` replaces the default
    requests and limits whole. `image` unset: the operator's `--squid-image`
    (default `ubuntu/squid:6.10-24.10_beta`).
    """

    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    resources: dict[str, dict[str, str]] | None = None
    run_as_user: Annotated[int, Field(ge=1, le=2147483647)] = SQUID_IMAGE_UID
    run_as_group: Annotated[int, Field(ge=1, le=2147483647)] = SQUID_IMAGE_UID


class GcpSpec(_Model):
    """A GCE VM running Squid. zone, machineType and image have no defaults on purpose."""

    project: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    zone: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    machine_type: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    network: Annotated[str, Field(max_length=512)] | None = None
    subnetwork: Annotated[str, Field(max_length=512)] | None = None
    tags: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=64)] = []
    allowed_source_ranges: Annotated[
        list[Annotated[str, Field(max_length=64)]], Field(max_length=64)
    ] = []


class ProxySpec(_Model):
    """What the user asks for."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.mode == 'External' ? has(self.endpoint) : !has(self.endpoint)",
                "spec.endpoint is required when mode is External and forbidden when Managed",
            ),
            (
                "self.mode != 'Managed' || has(self.provider)",
                "spec.provider is required when mode is Managed",
            ),
            (
                "self.mode != 'External' || (!has(self.provider) && !has(self.kubernetes)"
                " && !has(self.gcp) && !has(self.cloudInit))",
                "External proxies take no provider, kubernetes, gcp or cloudInit block",
            ),
            (
                "!has(self.provider) || self.provider != 'kubernetes' || !has(self.gcp)",
                "spec.gcp is only valid with provider gcp",
            ),
            (
                "!has(self.provider) || self.provider != 'gcp' || !has(self.kubernetes)",
                "spec.kubernetes is only valid with provider kubernetes",
            ),
        )
    )

    mode: Mode = Mode.MANAGED
    provider: ProviderName | None = None
    attributes: Annotated[
        dict[str, Annotated[str, Field(max_length=253)]], Field(max_length=64)
    ] = {}
    health_check: HealthCheck = HealthCheck()
    endpoint: Endpoint | None = None
    cloud_init: CloudInit | None = None
    # Leases at once per target (crawlers sharing the proxy for one site), and targets at
    # once (None: any number; 1 with maxLeases 1: an exclusive proxy). leases/capacity.py.
    max_leases: Annotated[int, Field(ge=1, le=1000)] = 1
    max_targets: Annotated[int, Field(ge=1, le=100_000)] | None = None
    kubernetes: KubernetesSpec | None = None
    gcp: GcpSpec | None = None


class ConditionStatus(StrEnum):
    """Kubernetes condition status values."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A metav1.Condition."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class Phase(StrEnum):
    """The one-word summary in `kubectl get proxies`, derived from the conditions."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    PROVISIONED = "Provisioned"
    READY = "Ready"
    UNHEALTHY = "Unhealthy"
    FAILED = "Failed"
    DELETING = "Deleting"


class Backoff(_Model):
    """Failures in a row of a Proxy's instance or stack operations, and when it tries again."""

    failures: Annotated[int, Field(ge=0)] = 0
    last_failure_time: str | None = None
    next_retry_time: str | None = None  # None once the retry has run
    failed_instance: str | None = None  # the incarnation that failed (a pod UID), if any
    generation: int | None = None  # the spec generation that failed


class ProxyStatus(_Model):
    """What the operator observed. Each field has exactly one writer."""

    phase: Phase | None = None
    observed_generation: int | None = None
    ip: str | None = None
    port: int | None = None
    instance_id: str | None = None
    stack: str | None = None
    credentials_secret: str | None = None
    latency_millis: int | None = None
    last_health_check_time: str | None = None
    backoff: Backoff | None = None
    conditions: list[Condition] = []


PROVISIONED = "Provisioned"
HEALTHY = "Healthy"
PERMANENT_ERROR = "PermanentError"
INSTANCE_FAILED = "InstanceFailed"
# The summary conditions GitOps tools and `kubectl wait` read (kstatus): Ready, and
# Reconciling / Stalled, which are True only while abnormal.
READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
# What a new Proxy or pool shows until the operator's first status write: the CRD's
# default status (as Gateway API's CRDs do). Without it kstatus would call an object
# with no status Current, and a GitOps tool would pass it before the operator saw it.
PENDING = "Pending"
PENDING_STATUS: dict[str, Any] = {
    "conditions": [
        {
            "type": kind,
            "status": state,
            "reason": PENDING,
            "message": "waiting for the operator",
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        }
        for kind, state in ((READY, "False"), (RECONCILING, "True"))
    ]
}


def find_condition(conditions: list[Condition], kind: str) -> Condition | None:
    """The condition of a type, if present."""
    return next((condition for condition in conditions if condition.type == kind), None)


def compute_phase(status: ProxyStatus, *, deleting: bool) -> Phase:
    """The phase follows from the conditions alone; nothing else sets it."""
    if deleting:
        return Phase.DELETING
    provisioned = find_condition(status.conditions, PROVISIONED)
    healthy = find_condition(status.conditions, HEALTHY)
    if provisioned is None:
        return Phase.PENDING
    if provisioned.reason in (PERMANENT_ERROR, INSTANCE_FAILED):
        return Phase.FAILED
    if provisioned.status != ConditionStatus.TRUE:
        return Phase.PROVISIONING
    if healthy is None or healthy.status == ConditionStatus.UNKNOWN:
        return Phase.PROVISIONED
    return Phase.READY if healthy.status == ConditionStatus.TRUE else Phase.UNHEALTHY


def with_squid_image(spec: ProxySpec, image: str) -> ProxySpec:
    """The spec with `kubernetes.image` filled in from the operator's default when unset."""
    if spec.kubernetes is None or spec.kubernetes.image is not None:
        return spec
    return spec.model_copy(
        update={"kubernetes": spec.kubernetes.model_copy(update={"image": image})}
    )
