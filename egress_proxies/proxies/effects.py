"""Carrying out a Proxy's `Decision`: its status, annotations and Events, the dead pod, `up`.

The shell (`shell.py`) calls these in the order the decision asks;
`run_up` hands the stack's outcome back to the state machine (`after_up`,
`after_failure`) and returns its decision, which the shell records in turn.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf

from egress_proxies.kube import ConflictError, NotFoundError
from egress_proxies.model import with_squid_image
from egress_proxies.providers.instance import InstanceObservation
from egress_proxies.providers.pods import pod_path
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.credentials import credentials_secret_name, ensure_credentials
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.naming import instance_name, stack_name
from egress_proxies.stacks.runner import StackOperationError

logger = logging.getLogger(__name__)

POD_GONE_TIMEOUT = 30.0


async def record(
    c: Components, body: Mapping[str, Any], patch: kopf.Patch, decision: machine.Decision
) -> None:
    """Write the decision's status, set its annotations, post its Events."""
    await c.writer.update(body, decision.owned_status)
    for key, value in decision.annotations.items():
        patch.metadata.annotations[key] = value
    for event in decision.events:
        c.post_event(body, event)


async def remove_instance(
    c: Components, view: machine.ProxyView, instance: InstanceObservation
) -> None:
    """Delete a dead pod (this incarnation only) and wait until its name is free again.

    After `POD_GONE_TIMEOUT` it logs a warning naming the Proxy and the pod
    and returns; the caller goes on to `up`, which refreshes first and so
    reads the pod as it then is.
    """
    c.instances.retire(view.uid, instance.key)
    path = pod_path(instance.instance_id)
    # Gone already, or another incarnation by now: either way this one is not there.
    with contextlib.suppress(NotFoundError, ConflictError):
        await c.client.request(
            "DELETE", path, body={"gracePeriodSeconds": 0, "preconditions": {"uid": instance.key}}
        )
    deadline = c.clock.monotonic() + POD_GONE_TIMEOUT
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
        POD_GONE_TIMEOUT,
    )


async def run_up(
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
