"""The Proxy controller's shell: gather what a Proxy's reconcile reads, ask the machine, act.

Nothing here decides: `reconcile.py` returns the whole `Decision` (status,
annotations, Events, the stack operation, the retry), and `reconcile_proxy` /
`delete_proxy` carry it out, in order: read (`observe.py`), decide, act
(`effects.py`); the shard rules (`sharding.py`) are pure functions asked the
same way. The helpers do not call back here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from pydantic import ValidationError

from egress_proxies.catalog import proxy_key
from egress_proxies.kube import ConflictError, NotFoundError
from egress_proxies.kube.resources import PROXIES
from egress_proxies.leases import StoreUnavailableError
from egress_proxies.model import ProxySpec, ProxyStatus
from egress_proxies.proxies import effects
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies import sharding as shard_rules
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.credentials import delete_credentials
from egress_proxies.proxies.observe import observe, stack_holds_instance
from egress_proxies.proxies.status import status_of
from egress_proxies.stacks.naming import stack_name
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.vocabulary import (
    RECONCILE_HANDLED_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)

logger = logging.getLogger(__name__)


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
    observed = await observe(c, view, body)
    decision = machine.decide(view, observed, c.clock.utcnow(), c.policy)
    await effects.record(c, kopf_body, patch, decision)
    if decision.action == machine.Action.UP:
        if decision.replace_instance is not None:
            await effects.remove_instance(c, view, decision.replace_instance)
        decision = await effects.run_up(
            c, body, replace(view, status=decision.status), observed, decision
        )
        await effects.record(c, kopf_body, patch, decision)
    claim = shard_rules.claim(c.shard, meta.get("annotations") or {})
    if claim is not None:
        holds = await stack_holds_instance(c, view)
        for key, value in claim.annotations(stack_holds_instance=holds).items():
            patch.metadata.annotations[key] = value
    if decision.permanent:
        raise kopf.PermanentError(decision.failure)
    if decision.retry_after is not None:
        c.requeue.after(view.namespace, view.name, decision.retry_after)


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
