"""The Proxy controller's kopf registration: which events run which part of the shell.

Registered on an explicit registry (no module-level decorators), with every
dependency passed in as `Components` (`components.py`); the handlers only
route an event to the shell (`shell.py`) or ring a Proxy (`wakeup.py`), and
the kopf filters (`filters.py`) say which Proxies are this shard's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from egress_proxies.catalog import proxy_key
from egress_proxies.leases import StoreUnavailableError
from egress_proxies.model import (
    GROUP,
    PLURAL,
    VERSION,
)
from egress_proxies.proxies import cloud_init
from egress_proxies.proxies import sharding as shard_rules
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.filters import managed_and_owned_by, owned_by
from egress_proxies.proxies.shell import delete_proxy, reconcile_proxy, release
from egress_proxies.proxies.standby import (
    STANDBY_PATIENCE_SECONDS,
    STANDBY_RETRY_SECONDS,
    Standing,
    standing_by,
)
from egress_proxies.proxies.wakeup import Reason
from egress_proxies.stacks.naming import stack_name
from egress_proxies.telemetry.logs import log_context
from egress_proxies.vocabulary import (
    CLOUD_INIT_LABEL,
    FINALIZER,
    UID_LABEL,
)

logger = logging.getLogger(__name__)

KOPF_PREFIX = f"kopf.{GROUP}"
# What a refused handler's retry says (kopf: "... failed temporarily: standing by: ...").
STANDING_BY = "standing by: "


class QuietStandby(logging.Filter):
    """Drops kopf's ERROR line (and so its Event) for a handler refused on a replica not at work.

    `Standing` says it at INFO instead, once per Proxy rather than once per retry.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for kopf's line about a standing-by retry."""
        return f"failed temporarily: {STANDING_BY}" not in record.getMessage()


QUIET_STANDBY = QuietStandby()


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
    standing = Standing()
    logging.getLogger("kopf.objects").addFilter(QUIET_STANDBY)

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
            standing.handled(meta["namespace"], meta["name"])
            c.writer.forget(meta["namespace"], meta["name"])
            c.instances.forget_proxy(meta["uid"])
            c.requeue.cancel(meta["namespace"], meta["name"])
            try:
                await c.on_proxy_gone(proxy_key(meta["namespace"], meta["name"]))
            except StoreUnavailableError as error:
                # The finalizer's delete handler ended them already, or retries until it does.
                logger.warning("proxy %s gone, its leases not ended yet: %s", meta["name"], error)
        elif not shard_rules.selects(c.shard, meta.get("labels") or {}):
            await release(c, body)

    _register_secret_watches(registry, c)
    _register_instance_watch(registry, c)

    @kopf.on.resume(*resource, registry=registry, when=owned)
    @kopf.on.create(*resource, registry=registry, when=owned)
    @kopf.on.update(*resource, registry=registry, when=owned)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        await _at_work(c, standing, namespace, name)
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
        await _at_work(c, standing, namespace, name)
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack, deleting=True),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await delete_proxy(c, dict(body))


async def _at_work(c: Components, standing: Standing, namespace: str, name: str) -> None:
    """Return on the replica at work; raise a retry, recording nothing as handled, on any other.

    kopf can run a handler on a replica it is about to pause (`standby.py`).
    """
    reason = await standing_by(c.standby, c.clock, STANDBY_PATIENCE_SECONDS)
    if reason is None:
        standing.handled(namespace, name)
        return
    standing.refused(namespace, name, reason)
    raise kopf.TemporaryError(f"{STANDING_BY}{reason}", delay=STANDBY_RETRY_SECONDS)


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
            await c.bell.ring(namespace, name, Reason.CLOUD_INIT, revision)


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
        await c.bell.ring(meta["namespace"], meta["name"], Reason.INSTANCE, seen.signature)
