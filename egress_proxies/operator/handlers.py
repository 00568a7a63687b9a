"""kopf handlers: thin shells that gather observations, ask the state machine, and act.

Registered on an explicit registry (no module-level decorators), with every
dependency passed in as `Components`.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
import pulumi
from pydantic import ValidationError

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.kube import Credentials, KubeClient
from egress_proxies.model import (
    CLOUD_INIT_LABEL,
    FINALIZER,
    GROUP,
    HEALTHY,
    PLURAL,
    PROVISIONED,
    SPEC_HASH_ANNOTATION,
    UID_LABEL,
    VERSION,
    Mode,
    ProviderName,
    ProxySpec,
    ProxyStatus,
    find_condition,
)
from egress_proxies.operator import reconcile as machine
from egress_proxies.operator.credentials import (
    credentials_secret_name,
    delete_credentials,
    ensure_credentials,
)
from egress_proxies.operator.fleet import Fleet
from egress_proxies.operator.status import StatusWriter, status_of
from egress_proxies.stacks.errors import ErrorClass
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.naming import instance_name, stack_name
from egress_proxies.stacks.runner import StackOperationError, StackRunner
from egress_proxies.telemetry.logs import log_context
from egress_proxies.telemetry.metrics import StackMetrics
from egress_proxies.telemetry.tracing import Spans

logger = logging.getLogger(__name__)

CLOUD_INIT_KEY = "user-data"
CLOUD_INIT_REVISION_ANNOTATION = f"{GROUP}/cloud-init-revision"
RECONCILE_REQUEST_ANNOTATION = f"{GROUP}/reconcile-request"
RECONCILE_HANDLED_ANNOTATION = f"{GROUP}/reconcile-handled"
EXTERNAL_CREDENTIALS_LABEL = f"{GROUP}/proxy-credentials"
TRANSIENT_RETRY_SECONDS = 10.0

Program = Callable[[ProgramInputs], None]


@dataclass
class Components:
    """Everything the handlers use, built by the composition root."""

    client: KubeClient
    credentials: Credentials
    runner: StackRunner
    writer: StatusWriter
    fleet: Fleet
    programs: Mapping[ProviderName, Program]
    classify: Callable[[str], ErrorClass]
    on_proxy_gone: Callable[[ProxyKey], None]
    spans: Spans
    stack_metrics: StackMetrics


def now() -> str:
    """The current time as Kubernetes writes it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


KOPF_PREFIX = f"kopf.{GROUP}"


def configure(settings: kopf.OperatorSettings) -> None:
    """Keep kopf's bookkeeping in annotations of its own prefix, and use our finalizer.

    kopf leaves annotations under its storage prefix out of the diff that
    triggers update handlers; ours (spec hash, cloud-init revision, reconcile
    request) must stay in it, hence a prefix of kopf's own.
    """
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING


def reconciler_owned(current: ProxyStatus, decided: ProxyStatus) -> ProxyStatus:
    """Take the reconciler's fields from `decided`, keep the health engine's from `current`.

    A new address means a new instance: its health is unknown until probed.
    """
    provisioned = find_condition(decided.conditions, PROVISIONED)
    others = [c for c in current.conditions if c.type != PROVISIONED]
    new_address = (decided.ip, decided.port) != (current.ip, current.port)
    if new_address:
        others = [c for c in others if c.type != HEALTHY]
    return current.model_copy(
        update={
            "observed_generation": decided.observed_generation,
            "ip": decided.ip,
            "port": decided.port,
            "instance_id": decided.instance_id,
            "stack": decided.stack,
            "credentials_secret": decided.credentials_secret,
            "conditions": others + ([provisioned] if provisioned else []),
            "latency_millis": None if new_address else current.latency_millis,
            "last_health_check_time": None if new_address else current.last_health_check_time,
        }
    )


def register(registry: kopf.OperatorRegistry, components: Components) -> None:
    """Register every handler on `registry`."""
    c = components
    resource = (GROUP, VERSION, PLURAL)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=c.credentials.server,
            ca_data=c.credentials.ca_pem,
            scheme="Bearer",
            token=c.credentials.current_token(),
        )

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)

    # Every handler that touches the fleet is async: kopf runs sync handlers in
    # worker threads, and the fleet is read on the event loop without locks.
    @kopf.on.event(*resource, registry=registry)
    async def proxy_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        meta = body["metadata"]
        if event["type"] == "DELETED":
            c.fleet.remove_proxy(meta["namespace"], meta["name"])
            c.writer.forget(meta["namespace"], meta["name"])
            c.on_proxy_gone(proxy_key(meta["namespace"], meta["name"]))
        else:
            c.fleet.put_proxy(dict(body))

    async def secret_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        meta = body["metadata"]
        if event["type"] == "DELETED":
            c.fleet.remove_secret(meta["namespace"], meta["name"])
        else:
            c.fleet.put_secret(meta["namespace"], meta["name"], body.get("data"))

    for label in (UID_LABEL, EXTERNAL_CREDENTIALS_LABEL):
        kopf.on.event("v1", "secrets", labels={label: kopf.PRESENT}, registry=registry)(
            secret_event
        )

    @kopf.on.event("v1", "secrets", labels={CLOUD_INIT_LABEL: "true"}, registry=registry)
    async def cloud_init_event(event: Mapping[str, Any], body: kopf.Body, **kwargs: Any) -> None:
        await secret_event(event, body)
        meta = body["metadata"]
        revision = meta.get("resourceVersion", "") if event["type"] != "DELETED" else "deleted"
        for proxy in c.fleet.referencing_cloud_init(meta["namespace"], meta["name"]):
            annotations = proxy["metadata"].get("annotations") or {}
            if annotations.get(CLOUD_INIT_REVISION_ANNOTATION) == revision:
                continue
            # Touching an annotation makes kopf deliver an update to the Proxy's handlers.
            pmeta = proxy["metadata"]
            await c.client.patch(
                f"/apis/{GROUP}/{VERSION}/namespaces/{pmeta['namespace']}/{PLURAL}/{pmeta['name']}",
                {"metadata": {"annotations": {CLOUD_INIT_REVISION_ANNOTATION: revision}}},
            )

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await _reconcile(c, dict(body), patch)

    # Only a Managed Proxy has a stack to tear down; kopf puts its finalizer only
    # on objects that a delete handler matches, so External ones get none.
    @kopf.on.delete(*resource, registry=registry, when=is_managed)
    async def delete(body: kopf.Body, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack, deleting=True),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await _delete(c, dict(body))


def is_managed(spec: kopf.Spec, **_: Any) -> bool:
    """Whether a Proxy is provisioned by the operator (its spec.mode is not External)."""
    return spec.get("mode") != Mode.EXTERNAL.value


def _view(body: Mapping[str, Any], *, deleting: bool = False) -> machine.ProxyView:
    meta = body["metadata"]
    return machine.ProxyView(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation", 1)),
        spec=ProxySpec.model_validate(body.get("spec") or {}),
        status=status_of(body),
        deleting=deleting,
        recorded_hash=(meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION),
    )


def reconcile_requested(body: Mapping[str, Any]) -> str | None:
    """The GC's pending request to recreate a vanished instance, if any."""
    annotations = body["metadata"].get("annotations") or {}
    request = annotations.get(RECONCILE_REQUEST_ANNOTATION)
    if request and request != annotations.get(RECONCILE_HANDLED_ANNOTATION):
        return str(request)
    return None


def _observe(c: Components, view: machine.ProxyView, body: Mapping[str, Any]) -> machine.Observed:
    stack = c.runner.state(stack_name(view.namespace, view.name))
    missing = reconcile_requested(body) is not None
    ref = view.spec.cloud_init
    if ref is None:
        return machine.Observed(stack=stack, instance_missing=missing)
    data = c.fleet.secret(view.namespace, ref.secret_ref.name)
    if data is None or CLOUD_INIT_KEY not in data:
        return machine.Observed(
            stack=stack,
            instance_missing=missing,
            cloud_init_error=(
                f"Secret {ref.secret_ref.name} with key {CLOUD_INIT_KEY!r} and label "
                f"{CLOUD_INIT_LABEL}=true was not found in namespace {view.namespace}"
            ),
        )
    return machine.Observed(stack=stack, cloud_init=data[CLOUD_INIT_KEY], instance_missing=missing)


async def _reconcile(c: Components, body: dict[str, Any], patch: kopf.Patch) -> None:
    try:
        view = _view(body)
    except ValidationError as error:
        raise kopf.PermanentError(f"invalid spec: {error}") from None
    observed = _observe(c, view, body)
    decision = machine.decide(view, observed, now())
    await c.writer.update(body, lambda current: reconciler_owned(current, decision.status))
    if decision.action == machine.Action.ADOPT and decision.spec_hash:
        patch.metadata.annotations[SPEC_HASH_ANNOTATION] = decision.spec_hash
    elif decision.action == machine.Action.UP and decision.spec_hash:
        decision = await _up(c, body, view, observed, decision.spec_hash, patch)
        await c.writer.update(body, lambda current: reconciler_owned(current, decision.status))
    _raise_for_retry(decision)


async def _up(
    c: Components,
    body: dict[str, Any],
    view: machine.ProxyView,
    observed: machine.Observed,
    wanted_hash: str,
    patch: kopf.Patch,
) -> machine.Decision:
    assert view.spec.provider is not None
    program = c.programs.get(view.spec.provider)
    if program is None:
        return machine.after_failure(
            view, ErrorClass.PERMANENT, f"provider {view.spec.provider} is not enabled", now()
        )
    secret = c.fleet.secret(view.namespace, credentials_secret_name(view.uid))
    credentials = await ensure_credentials(c.client, body, secret)
    inputs = ProgramInputs(
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        instance_name=instance_name(view.uid),
        spec=view.spec,
        credentials=credentials,
        cloud_init=observed.cloud_init,
    )

    def run() -> None:
        program(inputs)
        # Read back by the reconciler (is the stack current?) and the GC (whose is it?).
        pulumi.export("specHash", wanted_hash)
        pulumi.export("proxyUid", view.uid)
        pulumi.export("provider", str(view.spec.provider))

    stack = stack_name(view.namespace, view.name)
    try:
        with c.stack_metrics.measure("up"), c.spans.stack_operation("up", stack):
            outputs = await c.runner.up(stack, view.uid, run, refresh=observed.instance_missing)
    except StackOperationError as error:
        logger.warning("stack %s: up failed: %s", stack, error.text[-500:])
        return machine.after_failure(view, c.classify(error.text), error.text, now())
    patch.metadata.annotations[SPEC_HASH_ANNOTATION] = wanted_hash
    request = reconcile_requested(body)
    if request is not None:
        patch.metadata.annotations[RECONCILE_HANDLED_ANNOTATION] = request
    status = machine.after_up(view, outputs, stack, now())
    status = status.model_copy(update={"credentials_secret": credentials_secret_name(view.uid)})
    return machine.Decision(machine.Action.NONE, status, spec_hash=wanted_hash)


async def _delete(c: Components, body: dict[str, Any]) -> None:
    try:
        view = _view(body, deleting=True)
    except ValidationError:
        view = None
    meta = body["metadata"]
    stack = stack_name(meta["namespace"], meta["name"])
    if view is not None:
        decision = machine.decide(view, machine.Observed(stack=c.runner.state(stack)), now())
        await c.writer.update(
            body, lambda current: reconciler_owned(current, decision.status), deleting=True
        )
    try:
        with c.stack_metrics.measure("destroy"), c.spans.stack_operation("destroy", stack):
            await c.runner.destroy(stack)
    except StackOperationError as error:
        logger.warning("stack %s: destroy failed: %s", stack, error.text[-500:])
        raise kopf.TemporaryError(
            f"destroying stack {stack} failed; retrying", delay=TRANSIENT_RETRY_SECONDS
        ) from None
    await delete_credentials(c.client, meta["namespace"], meta["uid"])
    c.on_proxy_gone(proxy_key(meta["namespace"], meta["name"]))


def _raise_for_retry(decision: machine.Decision) -> None:
    provisioned = find_condition(decision.status.conditions, PROVISIONED)
    message = provisioned.message if provisioned else ""
    if decision.permanent:
        raise kopf.PermanentError(message or "permanent error")
    if decision.retry_after is not None:
        raise kopf.TemporaryError(message, delay=decision.retry_after)
    if provisioned is not None and provisioned.reason == machine.TRANSIENT_ERROR:
        raise kopf.TemporaryError(message, delay=TRANSIENT_RETRY_SECONDS)
