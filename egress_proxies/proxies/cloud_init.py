"""A Proxy's cloud-init Secret: what the state machine is told of it, and when a change nudges it.

A Proxy names a Secret labelled `crawl.example.com/cloud-init=true` whose
`user-data` key is its cloud-init. A change to that Secret (or its deletion)
is passed on by setting the Secret's revision in an annotation on each Proxy
that names it, which makes kopf run the Proxy's update handlers once per
revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from egress_proxies.vocabulary import CLOUD_INIT_LABEL, CLOUD_INIT_REVISION_ANNOTATION

CLOUD_INIT_KEY = "user-data"
DELETED = "deleted"  # the revision a deleted Secret is passed on as


@dataclass(frozen=True)
class CloudInit:
    """The Proxy's cloud-init as read from its Secret, or why it could not be read."""

    text: str | None = None
    error: str | None = None


def read(namespace: str, secret: str, data: Mapping[str, str] | None) -> CloudInit:
    """The cloud-init in the Secret's data (None: no such Secret in the fleet)."""
    if data is None or CLOUD_INIT_KEY not in data:
        return CloudInit(
            error=(
                f"Secret {secret} with key {CLOUD_INIT_KEY!r} and label "
                f"{CLOUD_INIT_LABEL}=true was not found in namespace {namespace}"
            )
        )
    return CloudInit(text=data[CLOUD_INIT_KEY])


def revision(event_type: str, secret_meta: Mapping[str, Any]) -> str:
    """The revision of the Secret an event shows; a deletion is a revision of its own."""
    return DELETED if event_type == "DELETED" else str(secret_meta.get("resourceVersion", ""))


def to_nudge(proxies: Iterable[Mapping[str, Any]], revision: str) -> list[tuple[str, str]]:
    """The (namespace, name) of the Proxies naming the Secret not yet nudged for `revision`."""
    return [
        (meta["namespace"], meta["name"])
        for meta in (proxy["metadata"] for proxy in proxies)
        if (meta.get("annotations") or {}).get(CLOUD_INIT_REVISION_ANNOTATION) != revision
    ]
