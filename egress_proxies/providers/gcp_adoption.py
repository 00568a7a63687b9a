"""Adopting a VM that a killed `up` created but never recorded.

An `up` killed after Compute accepted `instances.insert` leaves a VM the
stack does not know (its pending create is cleared before the next `up`).
The VM's name is fixed, so every later `up` fails with
`googleapi: Error 409: The resource '<path>' already exists, alreadyExists`.
The handlers then look the VM up and, when it carries this Proxy's UID
label (provably ours: nobody else's VM is adopted), run `up` once more with
the VM imported into the stack (pulumi's `import_` resource option).

`existing_instance` and `import_id` decide from plain values; `adoptable`
adds the one Compute lookup between them.
"""

from __future__ import annotations

import logging
import re

from egress_proxies.providers.gcp import GceInventory, instance_id
from egress_proxies.providers.inventory import InstanceId, InventoryError, TaggedInstance

logger = logging.getLogger(__name__)

_ALREADY_EXISTS = re.compile(
    r"The resource 'projects/(?P<project>[^/']+)/zones/(?P<zone>[a-z0-9-]+)"
    r"/instances/(?P<name>[a-z0-9-]+)' already exists"
)


def existing_instance(error_text: str) -> tuple[str, InstanceId] | None:
    """The project and VM an `up` failed to create because it already exists, if that is why."""
    match = _ALREADY_EXISTS.search(error_text)
    if match is None:
        return None
    return match["project"], instance_id(match["zone"], match["name"])


def import_id(project: str, found: TaggedInstance | None, uid: str) -> str | None:
    """The pulumi-gcp import id of the VM to adopt, or None when it is not this Proxy's."""
    if found is None or found.uid_label != uid:
        return None
    return f"projects/{project}/{found.instance_id}"


async def adoptable(inventory: GceInventory, uid: str, error_text: str) -> str | None:
    """The import id of this Proxy's VM that made `up` fail as already existing, else None."""
    existing = existing_instance(error_text)
    if existing is None or existing[0] != inventory.project:
        return None
    try:
        found = await inventory.get(existing[1])
    except InventoryError as error:
        logger.warning("cannot look up %s to adopt it: %s", existing[1], error)
        return None
    return import_id(inventory.project, found, uid)
