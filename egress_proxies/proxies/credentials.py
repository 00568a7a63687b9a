"""Per-Proxy credentials and lease-signing key, generated once, kept in a Secret the Proxy owns.

The Secret holds the operator's own username and password (the health
probes authenticate with them; the lease API never hands them out) and the
key the proxy's squid verifies lease credentials with (leases/credentials.py).
It is created before the first `up`; a squid pod mounts it read-only, a VM
gets it through its cloud-init. It carries the Proxy UID label and an
ownerReference, so it goes with the Proxy even if the operator is not
running: a Proxy made again gets a new key, and nothing keeps the old one.
A Secret made before lease credentials existed gets its key on the next `up`.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from typing import Any

from egress_proxies.kube import ConflictError, NotFoundError
from egress_proxies.kube.resources import SECRETS
from egress_proxies.model import GROUP, KIND, VERSION
from egress_proxies.proxies.ports import ApiClient
from egress_proxies.stacks.naming import credentials_secret_name
from egress_proxies.values import SIGNING_KEY, ProxyCredentials
from egress_proxies.vocabulary import UID_LABEL

__all__ = [
    "USERNAME",
    "credentials_secret",
    "credentials_secret_name",
    "delete_credentials",
    "ensure_credentials",
    "new_signing_key",
]

USERNAME = "crawler"


def credentials_secret(
    body: Mapping[str, Any],
    credentials: ProxyCredentials,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Secret object holding a Proxy's credentials; `labels` beside the UID label."""
    meta = body["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": credentials_secret_name(meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {UID_LABEL: meta["uid"], **(labels or {})},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "data": {
            name: base64.b64encode(value.encode()).decode()
            for name, value in (
                ("username", credentials.username),
                ("password", credentials.password),
                (SIGNING_KEY, credentials.signing_key),
            )
            if value is not None
        },
    }


async def ensure_credentials(
    client: ApiClient,
    body: Mapping[str, Any],
    known: Mapping[str, str] | None,
    labels: Mapping[str, str] | None = None,
) -> ProxyCredentials:
    """The Proxy's credentials: from the watch cache, else the API, else newly generated.

    A generated Secret carries `labels` (the operator shard's) beside the UID label.
    """
    if known and "username" in known and "password" in known and known.get(SIGNING_KEY):
        return ProxyCredentials(known["username"], known["password"], known[SIGNING_KEY])
    meta = body["metadata"]
    namespace, name = meta["namespace"], credentials_secret_name(meta["uid"])
    try:
        existing = await client.get(SECRETS.path(namespace, name))
    except NotFoundError:
        pass
    else:
        data = existing.get("data") or {}
        found = ProxyCredentials(
            base64.b64decode(data["username"]).decode(),
            base64.b64decode(data["password"]).decode(),
            base64.b64decode(data.get(SIGNING_KEY, "")).decode() or None,
        )
        if found.signing_key is not None:
            return found
        return await _add_signing_key(client, namespace, name, found)
    generated = ProxyCredentials(USERNAME, secrets.token_urlsafe(24), new_signing_key())
    try:
        await client.create(SECRETS.path(namespace), credentials_secret(body, generated, labels))
    except ConflictError:  # created concurrently: use that one
        return await ensure_credentials(client, body, None, labels)
    return generated


def new_signing_key() -> str:
    """A fresh lease-signing key: 32 random bytes as 64 hex characters."""
    return secrets.token_hex(32)


async def _add_signing_key(
    client: ApiClient, namespace: str, name: str, found: ProxyCredentials
) -> ProxyCredentials:
    """Give a Secret made before lease credentials its key (patched in; the rest kept)."""
    key = new_signing_key()
    patch = {"data": {SIGNING_KEY: base64.b64encode(key.encode()).decode()}}
    await client.patch(SECRETS.path(namespace, name), patch)
    return ProxyCredentials(found.username, found.password, key)


async def delete_credentials(client: ApiClient, namespace: str, uid: str) -> None:
    """Delete a Proxy's credentials Secret (missing is fine)."""
    await client.delete(SECRETS.path(namespace, credentials_secret_name(uid)))
