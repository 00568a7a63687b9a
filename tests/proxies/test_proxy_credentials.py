"""A Proxy's credentials Secret on the real API server: made with a signing key, and a Secret
from before lease credentials (an operator upgraded over running Proxies) given one, once."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from egress_proxies.devcluster import KubeClient
from egress_proxies.kube.resources import PROXIES, SECRETS
from egress_proxies.proxies.credentials import (
    credentials_secret,
    credentials_secret_name,
    ensure_credentials,
)
from egress_proxies.values import SIGNING_KEY, ProxyCredentials
from harness.operator import proxy_path

pytestmark = pytest.mark.integration


def external_proxy(name: str) -> dict[str, Any]:
    return {
        "apiVersion": PROXIES.api_version,
        "kind": "Proxy",
        "metadata": {"name": name},
        "spec": {"mode": "External", "endpoint": {"host": "192.0.2.1", "port": 3128}},
    }


def proxy_body(namespace: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "uid": uid}}


async def secret_data(kube: KubeClient, namespace: str, uid: str) -> dict[str, str]:
    secret = await kube.get(SECRETS.path(namespace, credentials_secret_name(uid)))
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


async def test_a_new_proxy_gets_a_signing_key_and_keeps_it(
    kube: KubeClient, namespace: str
) -> None:
    # A real owner: the garbage collector deletes a Secret whose owner does not exist.
    body = await kube.create(proxy_path(namespace), external_proxy("p"))
    uid = body["metadata"]["uid"]
    made = await ensure_credentials(kube, body, None)
    assert made.signing_key is not None and len(made.signing_key) == 64
    assert await ensure_credentials(kube, body, None) == made
    assert (await secret_data(kube, namespace, uid))[SIGNING_KEY] == made.signing_key
    assert "signing_key=<redacted>" in repr(made) and made.signing_key not in repr(made)


async def test_a_secret_from_before_gets_a_key_once_and_keeps_its_password(
    kube: KubeClient, namespace: str
) -> None:
    body = proxy_body(namespace, "uid-old")
    old = credentials_secret(body, ProxyCredentials("crawler", "from-before"))
    del old["metadata"]["ownerReferences"]  # no Proxy here for the GC to find
    await kube.create(SECRETS.path(namespace), old)
    assert SIGNING_KEY not in await secret_data(kube, namespace, "uid-old")

    upgraded = await ensure_credentials(kube, body, None)
    again = await ensure_credentials(kube, body, await secret_data(kube, namespace, "uid-old"))

    assert (upgraded.username, upgraded.password) == ("crawler", "from-before")
    assert upgraded.signing_key is not None
    assert again == upgraded
    assert (await secret_data(kube, namespace, "uid-old"))[SIGNING_KEY] == upgraded.signing_key
