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


# The squid image of a kubernetes Proxy that names none (the operator's --squid-image default).
DEFAULT_SQUID_IMAGE = "ubuntu/squid:6.10-24.10_beta"
# The `proxy` user of the Ubuntu and Debian squid images.
SQUID_IMAGE_UID = 13


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields rejected.

    A field's docstring is its description in the CRD (`kubectl explain`).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
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
    """The Secret's name."""


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
    """The http or https URL each probe GETs through the proxy, on a fresh connection."""
    interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 10
    """Seconds between two probes of this proxy."""
    timeout_seconds: Annotated[int, Field(ge=1, le=60)] = 5
    """Seconds the whole probe (connect, CONNECT, TLS, answer) may take; at most intervalSeconds."""
    success_threshold: Annotated[int, Field(ge=1, le=10)] = 1
    """Successes in a row that make the proxy healthy."""
    failure_threshold: Annotated[int, Field(ge=1, le=10)] = 3
    """Failures in a row that make the proxy unhealthy."""
    expected_status: Annotated[int, Field(ge=100, le=599)] = 204
    """The HTTP status a successful probe answers (redirects are not followed)."""
    expect_body: Annotated[str | None, Field(max_length=1024)] = None
    """Text the first 1 MiB of the answer's body must contain; unset: the body is not read."""


class Endpoint(_Model):
    """An External proxy's address and optional credentials (Secret keys username/password)."""

    scheme: Literal["http", "https"] = "http"
    """How crawlers and the prober speak to the proxy: plain http, or TLS to the proxy (https)."""
    host: Annotated[str, Field(min_length=1, max_length=253)]
    """The proxy's host name or IP address, handed to crawlers as is."""
    port: Annotated[int, Field(ge=1, le=65535)]
    """The proxy's TCP port."""
    credentials_secret_ref: SecretRef | None = None
    """A Secret with keys `username` and `password` for proxy authentication.

    It must carry the label `crawl.example.com/proxy-credentials`. Unset: the
    proxy needs no credentials.
    """


class CloudInit(_Model):
    """User data merged into a GCE VM's cloud-init (the Secret must carry the cloud-init label)."""

    secret_ref: SecretRef
    """The Secret whose key `user-data` is merged; a change to it replaces the VM."""


class KubernetesSpec(_Model):
    """A Squid pod in the operator's cluster, meeting Pod Security "restricted": never root."""

    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    """The squid image; unset: the operator's `--squid-image` (`ubuntu/squid:6.10-24.10_beta`).

    Its squid must be `/usr/sbin/squid` with `/usr/lib/squid/basic_ncsa_auth`.
    """
    resources: dict[str, dict[str, str]] | None = None
    """The squid container's `requests` and `limits` (a Pod's resources).

    They replace the default (requests cpu 50m, memory 64Mi; limits cpu 1,
    memory 256Mi) whole.
    """
    run_as_user: Annotated[int, Field(ge=1, le=2147483647)] = SQUID_IMAGE_UID
    """The UID squid runs as: the image's squid user (13, `proxy`, on Ubuntu and Debian).

    Set it (and runAsGroup) for an image whose squid user differs.
    """
    run_as_group: Annotated[int, Field(ge=1, le=2147483647)] = SQUID_IMAGE_UID
    """The GID squid runs as, also the pod's fsGroup (13, `proxy`, on Ubuntu and Debian)."""


class GcpSpec(_Model):
    """A GCE VM running Squid. zone, machineType and image have no defaults on purpose."""

    project: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    """The Google Cloud project of the VM; unset: the Google provider's default project.

    The orphan GC and the instance poll cover only the operator's `--gcp-project`.
    """
    zone: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    """The VM's zone, e.g. `europe-west4-b` (required; a change replaces the VM)."""
    machine_type: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """The VM's machine type, e.g. `e2-small` (required; a change replaces the VM)."""
    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    """The VM's boot image (required; a change replaces the VM)."""
    network: Annotated[str, Field(max_length=512)] | None = None
    """The VPC network (a change replaces the VM); unset with no subnetwork: `default`."""
    subnetwork: Annotated[str, Field(max_length=512)] | None = None
    """The subnetwork (e.g. of a Shared VPC); a change replaces the VM."""
    tags: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=64)] = []
    """Network tags put on the VM beside its own name; updated in place."""
    allowed_source_ranges: Annotated[
        list[Annotated[str, Field(max_length=64)]], Field(max_length=64)
    ] = []
    """CIDR ranges a firewall rule lets reach squid's port; empty: no rule is created.

    List the egress ranges of the crawlers and of the operator (it probes the proxy).
    """


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
    """Name-value pairs a lease request's selector matches by equality (e.g. region: eu)."""
    health_check: HealthCheck = HealthCheck()
    endpoint: Endpoint | None = None
    cloud_init: CloudInit | None = None
    max_leases: Annotated[int, Field(ge=1, le=1000)] = 1
    """Leases the proxy may hold at once for one target (crawlers sharing it for one site).

    With maxTargets 1 too, the proxy is exclusive to one lease.
    """
    max_targets: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Targets (sites) the proxy carries at once; unset: any number, each paced on its own."""
    cordoned: bool = False
    """No new leases while true: leases held already run to their end.

    Set with kubectl or the fleet console; the instance keeps running.
    """
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
    """The condition's type, e.g. Ready, Provisioned or Healthy."""
    status: ConditionStatus
    reason: str
    """A CamelCase word for why the condition has its status."""
    message: str = ""
    """A human-readable detail of the reason."""
    last_transition_time: str
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was set for."""


class Phase(StrEnum):
    """The one-word summary in `kubectl get proxies`, derived from the conditions."""

    # `Failed` is for what only a spec edit fixes (`PermanentError`); a failure the
    # operator retries (an instance that died, a pod the scheduler cannot place yet)
    # stays `Provisioning`, its cause in the conditions' message.

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
    """Failures in a row."""
    last_failure_time: str | None = None
    """When the last failure happened (RFC 3339)."""
    next_retry_time: str | None = None
    """When the operator tries again (RFC 3339); unset once the retry has run."""
    failed_instance: str | None = None
    """The incarnation that failed (a pod UID), if any."""
    generation: int | None = None
    """The spec generation that failed."""


class ProxyStatus(_Model):
    """What the operator observed. Each field has exactly one writer."""

    phase: Phase | None = None
    observed_generation: int | None = None
    """The metadata.generation the operator last reconciled."""
    ip: str | None = None
    """The address crawlers reach the proxy at (a pod IP, a VM's external IP, endpoint.host)."""
    port: int | None = None
    """The proxy's TCP port."""
    instance_id: str | None = None
    """What runs the proxy: `pods/<namespace>/<name>` or `zones/<zone>/instances/<name>`."""
    stack: str | None = None
    """The Pulumi stack that provisions the proxy (`<namespace>.<name>`)."""
    credentials_secret: str | None = None
    """The Secret with the managed proxy's generated credentials (`username`, `password`)."""
    latency_millis: int | None = None
    """The last reported probe's latency in milliseconds; unset while unhealthy."""
    last_health_check_time: str | None = None
    """When the health engine last reported a verdict or a changed latency (RFC 3339)."""
    backoff: Backoff | None = None
    conditions: list[Condition] = []
    """Provisioned and Healthy, and the summary Ready, Reconciling and Stalled."""


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
    if provisioned.reason == PERMANENT_ERROR:  # what only a spec edit fixes
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
