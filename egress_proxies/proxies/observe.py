"""What a Proxy's reconcile reads outside the Proxy: its stack, its instance, its cloud-init.

The shell (`shell.py`) gathers these before it asks the state machine, and
asks `stack_holds_instance` once more after the stack ran, for the shard's
claim; nothing here writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from egress_proxies.kube import NotFoundError
from egress_proxies.model import ProviderName
from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import gone, observe_pod, pod_path
from egress_proxies.proxies import cloud_init
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.components import Components
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.naming import stack_name


async def observe(
    c: Components, view: machine.ProxyView, body: Mapping[str, Any]
) -> machine.Observed:
    """The stack's checkpoint, the watched instance, the providers enabled, the cloud-init."""
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
        pod = await c.client.get(pod_path(instance_id))
    except NotFoundError:
        return gone("missing", instance_id)
    return observe_pod(pod)


async def stack_holds_instance(c: Components, view: machine.ProxyView) -> bool:
    """Whether this operator's stack of the Proxy now records an instance."""
    state = await c.runner.state(stack_name(view.namespace, view.name))
    return state is not None and bool(stack_outputs.text(state.outputs, stack_outputs.INSTANCE_ID))
