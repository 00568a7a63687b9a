"""Per-Proxy proxy credentials, generated once and kept in a Secret the Proxy owns.

The Secret is created before the first `up` and passed into the program as
a Pulumi secret; it carries the Proxy UID label and an ownerReference, so
it goes with the Proxy even if the operator is not running.
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
from egress_proxies.stacks.naming import instance_name
from egress_proxies.values import ProxyCredentials
from egress_proxies.vocabulary import UID_LABEL

USERNAME = "crawler"


def credentials_secret_name(uid: str) -> str:
    """The name of a Proxy's credentials Secret."""
    return f"{instance_name(uid)}-credentials"


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
            "username": base64.b64encode(credentials.username.encode()).decode(),
            "password": base64.b64encode(credentials.password.encode()).decode(),
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
    if known and "username" in known and "password" in known:
        return ProxyCredentials(known["username"], known["password"])
    meta = body["metadata"]
    namespace, name = meta["namespace"], credentials_secret_name(meta["uid"])
    try:
        existing = await client.get(SECRETS.path(namespace, name))
    except NotFoundError:
        pass
    else:
        data = existing.get("data") or {}
        return ProxyCredentials(
            base64.b64decode(data["username"]).decode(),
            base64.b64decode(data["password"]).decode(),
        )
    generated = ProxyCredentials(USERNAME, secrets.token_urlsafe(24))
    try:
        await client.create(SECRETS.path(namespace), credentials_secret(body, generated, labels))
    except ConflictError:  # created concurrently: use that one
        return await ensure_credentials(client, body, None, labels)
    return generated


async def delete_credentials(client: ApiClient, namespace: str, uid: str) -> None:
    """Delete a Proxy's credentials Secret (missing is fine)."""
    await client.delete(SECRETS.path(namespace, credentials_secret_name(uid)))
