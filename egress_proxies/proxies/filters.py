"""kopf `when=` filters: which of the Proxy handlers kopf runs for an object.

kopf calls a filter with the object's fields as keyword arguments (`spec`,
`labels`, ...) before each handler, and the deletion handlers' filters on
every event to decide whether the object needs the finalizer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from egress_proxies.model import Mode
from egress_proxies.proxies.sharding import Shard, selects

Filter = Callable[..., bool]


def is_managed(spec: Mapping[str, Any], **_: Any) -> bool:
    """Whether a Proxy is provisioned by the operator (its spec.mode is not External)."""
    return spec.get("mode") != Mode.EXTERNAL.value


def owned_by(shard: Shard | None) -> Filter:
    """The Proxies this operator handles: its shard's (an unsharded operator's: all)."""

    def owned(labels: Mapping[str, str] | None = None, **_: Any) -> bool:
        return selects(shard, labels)

    return owned


def managed_and_owned_by(shard: Shard | None) -> Filter:
    """The Proxies this operator destroys the stacks of: its own Managed ones."""

    def managed_and_owned(
        spec: Mapping[str, Any], labels: Mapping[str, str] | None = None, **_: Any
    ) -> bool:
        return is_managed(spec) and selects(shard, labels)

    return managed_and_owned
