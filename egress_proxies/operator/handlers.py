"""kopf handlers: thin shells that gather observations, ask the state machine, and act.

Registered on an explicit registry (no module-level decorators), with every
dependency passed in as `Components`. Nothing here decides: `reconcile.py`
returns the whole `Decision` (status, annotations, Events, the stack
operation, the retry), and `reconcile_proxy` / `delete_proxy` carry it out;
the shard rules (`shard.py`), the cloud-init rules (`cloud_init.py`) and the
kopf filters (`filters.py`) are pure functions the handlers ask the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import kopf
from pydantic import ValidationError

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock
from egress_proxies.events import EventSink
from egress_proxies.kube import ConflictError, NotFoundError
from egress_proxies.kube.client import annotate
from egress_proxies.kube.resources import PODS, PROXIES
from egress_proxies.leases import StoreUnavailableError
from egress_proxies.model import (
    CLOUD_INIT_LABEL,
    DEFAULT_SQUID_IMAGE,
    FINALIZER,
    GROUP,
    PLURAL,
    SPEC_HASH_ANNOTATION,
    UID_LABEL,
    VERSION,
    ProviderName,
    ProxySpec,
    ProxyStatus,
    with_squid_image,
)
from egress_proxies.operator import cloud_init
from egress_proxies.operator import reconcile as machine
from egress_proxies.operator import shard as shard_rules
from egress_proxies.operator.backoff import RetryPolicy
from egress_proxies.operator.credentials import (
    credentials_secret_name,
    delete_credentials,
    ensure_credentials,
)
from egress_proxies.operator.filters import managed_and_owned_by, owned_by
from egress_proxies.operator.instances import InstanceCache
from egress_proxies.operator.ports import ApiClient, Stacks, StatusSink
from egress_proxies.operator.reconcile import (
    RECONCILE_HANDLED_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
)
from egress_proxies.operator.requeue import Requeue
from egress_proxies.operator.shard import Shard
from egress_proxies.operator.status import regarding, status_of
from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import gone, observe_pod
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.errors import ErrorClass
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.naming import instance_name, stack_name
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.telemetry.logs import log_context
from egress_proxies.telemetry.metrics import StackMetrics
from egress_proxies.telemetry.tracing import Spans

logger = logging.getLogger(__name__)

# Touched to make kopf run the update handlers: the pod watch saw the instance
# change, or a retry is due (see operator/requeue.py).
INSTANCE_STATE_ANNOTATION = f"{GROUP}/instance-state"
REQUEUE_ANNOTATION = f"{GROUP}/requeue-at"
_POD_GONE_TIMEOUT = 30.0

Program = Callable[[ProgramInputs], None]
PostEvent = Callable[[Mapping[str, Any], machine.Event], None]


def event_poster(sink: EventSink) -> PostEvent:
    """Post the reconciler's Events about a Proxy through the aggregating recorder."""

    def post(body: Mapping[str, Any], event: machine.Event) -> None:
        sink.record(regarding(body), event.type, event.reason, event.message)

    return post


@dataclass
class Components:
    """Everything the handlers use, built by the composition root."""

    client: ApiClient
    runner: Stacks
    writer: StatusSink
    fleet: Fleet
    programs: Mapping[ProviderName, Program]
    classify: Callable[[str], ErrorClass]
    on_proxy_gone: Callable[[ProxyKey], Awaitable[None]]
    spans: Spans
    stack_metrics: StackMetrics
    instances: InstanceCache
    requeue: Requeue
    policy: RetryPolicy
    clock: Clock
    post_event: PostEvent  # the reconciler's Events (event_poster)
    # (uid, failed up's text) -> import id of this Proxy's VM a killed up left unrecorded
    adopt: Callable[[str, str], Awaitable[str | None]] | None = None
    shard: Shard | None = None  # None: this operator owns every Proxy it watches
    squid_image: str = DEFAULT_SQUID_IMAGE  # a kubernetes Proxy's image when it names none


KOPF_PREFIX = f"kopf.{GROUP}"


def configure(settings: kopf.OperatorSettings, finalizer: str = FINALIZER) -> None:
    """Keep kopf's bookkeeping in annotations of its own prefix, and use our finalizer.

    kopf leaves annotations under its storage prefix out of the diff that
    triggers update handlers; ours (spec hash, cloud-init revision, reconcile
    request) must stay in it, hence a prefix of kopf's own.
    """
    settings.persistence.finalizer = finalizer
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING


def register(registry: kopf.OperatorRegistry, components: Components) -> None:
    """Register every handler on `registry`."""
    c = components
    resource = (GROUP, VERSION, PLURAL)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, c.shard.finalizer if c.shard else FINALIZER)

    owned = owned_by(c.shard)

    # Every handler that touches the fleet is async: kopf runs sync handlers in
    # worker threads, and the fleet is read on the event loop without locks.
    # The fleet itself is fed by the operator's own watches (catalog.feed), whose
    # `synced` the counting decisions wait for; these events carry the side effects.
    @kopf.on.event(*resource, registry=registry)
    async def proxy_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        meta = body["metadata"]
        if event["type"] == "DELETED":
            c.writer.forget(meta["namespace"], meta["name"])
            c.instances.forget_proxy(meta["uid"])
            c.requeue.cancel(meta["namespace"], meta["name"])
            try:
                await c.on_proxy_gone(proxy_key(meta["namespace"], meta["name"]))
            except StoreUnavailableError as error:
                # The finalizer's delete handler ended them already, or retries until it does.
                logger.warning("proxy %s gone, its leases not ended yet: %s", meta["name"], error)
        elif not shard_rules.selects(c.shard, meta.get("labels") or {}):
            await _release(c, body)

    _register_secret_watches(registry, c)
    _register_instance_watch(registry, c)

    @kopf.on.resume(*resource, registry=registry, when=owned)
    @kopf.on.create(*resource, registry=registry, when=owned)
    @kopf.on.update(*resource, registry=registry, when=owned)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await reconcile_proxy(c, body, patch)

    # Only a Managed Proxy has a stack to tear down; kopf puts its finalizer only
    # on objects that a delete handler matches, so External ones get none.
    @kopf.on.delete(*resource, registry=registry, when=managed_and_owned_by(c.shard))
    async def delete(body: kopf.Body, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack, deleting=True),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await delete_proxy(c, dict(body))


def _register_secret_watches(registry: kopf.OperatorRegistry, c: Components) -> None:
    """A changed cloud-init Secret nudges the Proxies that render it.

    The fleet's Secrets come from its own watches; this event also puts the
    Secret there, so a nudged reconcile reads the version that nudged it.
    """

    @kopf.on.event("v1", "secrets", labels={CLOUD_INIT_LABEL: "true"}, registry=registry)
    async def cloud_init_event(event: Mapping[str, Any], body: kopf.Body, **kwargs: Any) -> None:
        meta = body["metadata"]
        if event["type"] == "DELETED":
            c.fleet.remove_secret(meta["namespace"], meta["name"])
        else:
            c.fleet.put_secret(meta["namespace"], meta["name"], body.get("data"))
        revision = cloud_init.revision(event["type"], meta)
        referencing = c.fleet.referencing_cloud_init(meta["namespace"], meta["name"])
        for namespace, name in cloud_init.to_nudge(referencing, revision):
            await touch(c, namespace, name, cloud_init.CLOUD_INIT_REVISION_ANNOTATION, revision)


def _register_instance_watch(registry: kopf.OperatorRegistry, c: Components) -> None:
    """Watch the pods the Proxies own; nudge a Proxy whenever its pod's state changes."""

    @kopf.on.event("v1", "pods", labels={UID_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        if event["type"] == "DELETED":
            seen = c.instances.remove_pod(body)
        else:
            seen = c.instances.put_pod(body)
        proxy = c.fleet.proxy_by_uid((body["metadata"].get("labels") or {}).get(UID_LABEL, ""))
        if seen is None or proxy is None or proxy["metadata"].get("deletionTimestamp"):
            return
        meta = proxy["metadata"]
        await touch(c, meta["namespace"], meta["name"], INSTANCE_STATE_ANNOTATION, seen.signature)


async def _release(c: Components, body: kopf.Body) -> None:
    """A Proxy this shard does not select: carry out `shard.release`."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    stack = stack_name(namespace, name)
    release = shard_rules.release(
        c.shard,
        meta.get("annotations") or {},
        handled=c.writer.latest(namespace, name, meta["uid"]) is not None,
        has_stack=(await c.runner.state(stack)) is not None,
    )
    if release.stop_handling:
        logger.info("%s/%s is no longer selected by this shard; releasing it", namespace, name)
        c.writer.forget(namespace, name)
        c.instances.forget_proxy(meta["uid"])
        c.requeue.cancel(namespace, name)
    if release.forget_stack_for is not None:
        logger.warning(
            "stack %s: shard %s owns %s/%s now; forgetting",
            stack,
            release.forget_stack_for,
            namespace,
            name,
        )
        await c.runner.forget(stack)


async def _drop_unsharded_finalizer(c: Components, body: Mapping[str, Any]) -> None:
    """Carry out `shard.finalizers_to_keep`, conditional on the resourceVersion.

    A conflict leaves it for the next run.
    """
    meta = body["metadata"]
    kept = shard_rules.finalizers_to_keep(c.shard, meta.get("finalizers") or [])
    if kept is None:
        return
    patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
    try:
        await c.client.patch(PROXIES.path(meta["namespace"], meta["name"]), patch)
    except (NotFoundError, ConflictError):
        return


def _view(
    body: Mapping[str, Any], written: ProxyStatus | None = None, *, deleting: bool = False
) -> machine.ProxyView:
    """The Proxy as the state machine reads it; ValidationError for a spec the model rejects.

    `written` is the status this operator last wrote, if any: kopf may hand a
    handler a body older than that (its watch lags under load), and a decision
    from the body's status would undo fields written since (a lost
    `credentialsSecret` left a Proxy probed without credentials for good).
    A deletion reads no spec, and a spec gone bad must not keep the Proxy
    from being deleted: it is then read as the empty spec.
    """
    meta = body["metadata"]
    try:
        spec = ProxySpec.model_validate(body.get("spec") or {})
    except ValidationError:
        if not deleting:
            raise
        spec = ProxySpec()
    return machine.ProxyView(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation", 1)),
        spec=spec,
        status=written if written is not None else status_of(body),
        deleting=deleting,
        recorded_hash=(meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION),
        reconcile_request=reconcile_requested(body),
    )


def reconcile_requested(body: Mapping[str, Any]) -> str | None:
    """The GC's pending request to recreate a vanished instance, if any."""
    annotations = body["metadata"].get("annotations") or {}
    request = annotations.get(RECONCILE_REQUEST_ANNOTATION)
    if request and request != annotations.get(RECONCILE_HANDLED_ANNOTATION):
        return str(request)
    return None


async def touch(c: Components, namespace: str, name: str, annotation: str, value: str) -> None:
    """Set one annotation on a Proxy, which makes kopf run its update handlers."""
    await annotate(c.client, PROXIES.path(namespace, name), annotation, value)


async def _observe(
    c: Components, view: machine.ProxyView, body: Mapping[str, Any]
) -> machine.Observed:
    stack = await c.runner.state(stack_name(view.namespace, view.name))
    instance_id = (
        stack_outputs.text(stack.outputs, stack_outputs.INSTANCE_ID) if stack is not None else None
    )
    watched = view.spec.provider == ProviderName.KUBERNETES and isinstance(instance_id, str)
    observed = machine.Observed(
        stack=stack,
        instance_missing=view.reconcile_request is not None,
        watches_instances=watched,
        instance=await _instance(c, view, str(instance_id)) if watched else None,
        provider_enabled=view.spec.provider in c.programs,
    )
    ref = view.spec.cloud_init
    if ref is None:
        return observed
    secret = ref.secret_ref.name
    read = cloud_init.read(view.namespace, secret, c.fleet.secret(view.namespace, secret))
    return dataclasses.replace(observed, cloud_init=read.text, cloud_init_error=read.error)


async def _instance(
    c: Components, view: machine.ProxyView, instance_id: str
) -> InstanceObservation:
    """The stack's pod as the watch last saw it; read directly if the watch has not shown it."""
    seen = c.instances.get(view.uid, instance_id)
    if seen is not None:
        return seen
    try:
        pod = await c.client.get(_pod_path(instance_id))
    except NotFoundError:
        return gone("missing", instance_id)
    return observe_pod(pod)


def _pod_path(instance_id: str) -> str:
    _, namespace, name = instance_id.split("/", 2)
    return PODS.path(namespace, name)


async def reconcile_proxy(c: Components, kopf_body: Mapping[str, Any], patch: kopf.Patch) -> None:
    """Observe a Proxy, ask the state machine, carry out its decision (and the outcome's)."""
    body = dict(kopf_body)
    meta = body["metadata"]
    try:
        view = _view(body, c.writer.latest(meta["namespace"], meta["name"], meta["uid"]))
    except ValidationError as error:
        raise kopf.PermanentError(f"invalid spec: {error}") from None
    c.requeue.cancel(view.namespace, view.name)
    await _drop_unsharded_finalizer(c, body)
    observed = await _observe(c, view, body)
    decision = machine.decide(view, observed, c.clock.utcnow(), c.policy)
    await _record(c, kopf_body, patch, decision)
    if decision.action == machine.Action.UP:
        if decision.replace_instance is not None:
            await _remove_instance(c, view, decision.replace_instance)
        decision = await _up(c, body, replace(view, status=decision.status), observed, decision)
        await _record(c, kopf_body, patch, decision)
    claim = shard_rules.claim(c.shard, meta.get("annotations") or {})
    if claim is not None:
        holds = await _stack_holds_instance(c, view)
        for key, value in claim.annotations(stack_holds_instance=holds).items():
            patch.metadata.annotations[key] = value
    if decision.permanent:
        raise kopf.PermanentError(decision.failure)
    if decision.retry_after is not None:
        c.requeue.after(view.namespace, view.name, decision.retry_after)


async def _stack_holds_instance(c: Components, view: machine.ProxyView) -> bool:
    """Whether this operator's stack of the Proxy now records an instance."""
    state = await c.runner.state(stack_name(view.namespace, view.name))
    return state is not None and bool(stack_outputs.text(state.outputs, stack_outputs.INSTANCE_ID))


async def _record(
    c: Components, body: Mapping[str, Any], patch: kopf.Patch, decision: machine.Decision
) -> None:
    """Write the decision's status, set its annotations, post its Events."""
    await c.writer.update(body, decision.owned_status)
    for key, value in decision.annotations.items():
        patch.metadata.annotations[key] = value
    for event in decision.events:
        c.post_event(body, event)


async def _remove_instance(
    c: Components, view: machine.ProxyView, instance: InstanceObservation
) -> None:
    """Delete a dead pod (this incarnation only) and wait until its name is free again.

    After `_POD_GONE_TIMEOUT` it logs a warning naming the Proxy and the pod
    and returns; the caller goes on to `up`, which refreshes first and so
    reads the pod as it then is.
    """
    c.instances.retire(view.uid, instance.key)
    path = _pod_path(instance.instance_id)
    # Gone already, or another incarnation by now: either way this one is not there.
    with contextlib.suppress(NotFoundError, ConflictError):
        await c.client.request(
            "DELETE", path, body={"gracePeriodSeconds": 0, "preconditions": {"uid": instance.key}}
        )
    deadline = c.clock.monotonic() + _POD_GONE_TIMEOUT
    while c.clock.monotonic() < deadline:
        try:
            pod = await c.client.get(path)
        except NotFoundError:
            return
        if pod["metadata"]["uid"] != instance.key:
            return
        await c.clock.sleep(0.5)
    logger.warning(
        "%s/%s: gave up waiting for the replaced pod %s (uid %s) to be deleted after %.0f s; "
        "running up anyway",
        view.namespace,
        view.name,
        instance.instance_id,
        instance.key,
        _POD_GONE_TIMEOUT,
    )


async def _up(
    c: Components,
    body: dict[str, Any],
    view: machine.ProxyView,
    observed: machine.Observed,
    decision: machine.Decision,
) -> machine.Decision:
    """Run `up` as decided; the state machine's decision on its outcome."""
    provider = view.spec.provider
    assert provider is not None and decision.spec_hash is not None  # decide() checked both
    wanted_hash = decision.spec_hash
    program = c.programs[provider]
    secret = c.fleet.secret(view.namespace, credentials_secret_name(view.uid))
    inputs = ProgramInputs(
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        instance_name=instance_name(view.uid),
        spec=with_squid_image(view.spec, c.squid_image),
        credentials=await ensure_credentials(
            c.client, body, secret, c.shard.labels if c.shard else None
        ),
        cloud_init=observed.cloud_init,
        shard=c.shard.name if c.shard else None,
    )
    stack = stack_name(view.namespace, view.name)

    async def up(inputs: ProgramInputs) -> Mapping[str, Any]:
        run = stack_outputs.bind(program, inputs, spec_hash=wanted_hash, provider=str(provider))
        with c.stack_metrics.measure("up"), c.spans.stack_operation("up", stack):
            return await c.runner.up(stack, view.uid, run, refresh=decision.refresh)

    try:
        try:
            outputs = await up(inputs)
        except StackOperationError as error:
            adopt = await c.adopt(view.uid, error.text) if c.adopt else None
            if adopt is None:
                raise
            logger.warning("stack %s: adopting %s, left by an unfinished up", stack, adopt)
            outputs = await up(replace(inputs, adopt_instance=adopt))
    except StackOperationError as error:
        logger.warning("stack %s: up failed: %s", stack, error.text[-500:])
        return machine.after_failure(
            view, c.classify(error.text), error.text, c.clock.utcnow(), c.policy
        )
    return machine.after_up(view, outputs, stack, c.clock.utcnow(), wanted_hash)


async def delete_proxy(c: Components, body: dict[str, Any]) -> None:
    """Show the deletion, destroy the stack if there is one, then let the Proxy go."""
    meta = body["metadata"]
    stack = stack_name(meta["namespace"], meta["name"])
    written = c.writer.latest(meta["namespace"], meta["name"], meta["uid"])
    view = _view(body, written, deleting=True)
    decision = machine.decide(
        view, machine.Observed(stack=await c.runner.state(stack)), c.clock.utcnow()
    )
    await c.writer.update(body, decision.owned_status, deleting=True)
    if decision.action == machine.Action.DESTROY:
        try:
            with c.stack_metrics.measure("destroy"), c.spans.stack_operation("destroy", stack):
                await c.runner.destroy(stack)
        except StackOperationError as error:
            logger.warning("stack %s: destroy failed: %s", stack, error.text[-500:])
            retry = machine.after_destroy_failure(view)
            raise kopf.TemporaryError(
                f"destroying stack {stack} failed; retrying", delay=retry.retry_after or 0
            ) from None
    await delete_credentials(c.client, meta["namespace"], meta["uid"])
    try:
        await c.on_proxy_gone(proxy_key(meta["namespace"], meta["name"]))
    except StoreUnavailableError:
        raise kopf.TemporaryError(
            "the lease store is unavailable: its leases are not ended yet; retrying",
            delay=machine.DESTROY_RETRY_SECONDS,
        ) from None
