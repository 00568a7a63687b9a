"""The Proxy controller's shell: gather what a Proxy's reconcile reads, ask the machine, act.

Nothing here decides: `reconcile.py` returns the whole `Decision` (status,
annotations, Events, the stack operation, the retry), and `reconcile_proxy` /
`delete_proxy` carry it out; the shard rules (`sharding.py`) and the
cloud-init rules (`cloud_init.py`) are pure functions asked the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from pydantic import ValidationError

from egress_proxies.catalog import proxy_key
from egress_proxies.kube import ConflictError, NotFoundError
from egress_proxies.kube.resources import PODS, PROXIES
from egress_proxies.leases import StoreUnavailableError
from egress_proxies.model import (
    ProviderName,
    ProxySpec,
    ProxyStatus,
    with_squid_image,
)
from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import gone, observe_pod
from egress_proxies.proxies import cloud_init
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies import sharding as shard_rules
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.credentials import (
    credentials_secret_name,
    delete_credentials,
    ensure_credentials,
)
from egress_proxies.proxies.status import status_of
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.naming import instance_name, stack_name
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.vocabulary import (
    RECONCILE_HANDLED_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)

logger = logging.getLogger(__name__)

_POD_GONE_TIMEOUT = 30.0


async def release(c: Components, body: kopf.Body) -> None:
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
        discovery_url=c.proxy_discovery_url,
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
