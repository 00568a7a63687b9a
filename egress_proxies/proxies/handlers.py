"""The Proxy controller's kopf registration: which events run which part of the shell.

Registered on an explicit registry (no module-level decorators), with every
dependency passed in as `Components` (`components.py`); the handlers only
route an event to the shell (`shell.py`), once the replica is the one at work
(`standby.py`); the watches that ring a Proxy are `watches.py`'s, and the
kopf filters (`filters.py`) say which Proxies are this shard's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from egress_proxies.catalog import proxy_key
from egress_proxies.leases import StoreUnavailableError
from egress_proxies.model import GROUP, PLURAL, VERSION
from egress_proxies.proxies import sharding as shard_rules
from egress_proxies.proxies import watches
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.filters import managed_and_owned_by, owned_by
from egress_proxies.proxies.shell import delete_proxy, reconcile_proxy, release
from egress_proxies.proxies.standby import QUIET_STANDBY, Standing, at_work
from egress_proxies.stacks.naming import stack_name
from egress_proxies.telemetry.logs import log_context
from egress_proxies.vocabulary import FINALIZER

logger = logging.getLogger(__name__)

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
    standing = Standing()
    logging.getLogger("kopf.objects").addFilter(QUIET_STANDBY)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, c.shard.finalizer if c.shard else FINALIZER)

    owned = owned_by(c.shard)
    managed_and_owned = managed_and_owned_by(c.shard)

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

    watches.register(registry, c)

    @kopf.on.resume(*resource, registry=registry, when=owned)
    @kopf.on.create(*resource, registry=registry, when=owned)
    @kopf.on.update(*resource, registry=registry, when=owned)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        await at_work(c.standby, c.clock, standing, namespace, name)
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await reconcile_proxy(c, body, patch)

    # Only a Managed Proxy has a stack to tear down; kopf puts its finalizer only
    # on objects that a delete handler matches, so External ones get none.
    @kopf.on.delete(*resource, registry=registry, when=managed_and_owned)
    async def delete(body: kopf.Body, **_: Any) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        await at_work(c.standby, c.clock, standing, namespace, name)
        stack = stack_name(namespace, name)
        with (
            c.spans.reconcile(namespace, name, stack=stack, deleting=True),
            log_context(namespace=namespace, proxy=name, stack=stack),
        ):
            await delete_proxy(c, dict(body))
