"""Deterministic names: the stack of a Proxy, and the provider-side instance name from its UID."""

from __future__ import annotations

import base64
import hashlib

PROJECT = "egress-proxies"


def stack_name(namespace: str, name: str) -> str:
    """`<namespace>.<name>`, so `pulumi stack ls --all` reads like `kubectl get proxies -A`."""
    return f"{namespace}.{name}"


def instance_name(uid: str) -> str:
    """`proxy-` + 16 chars of base32(SHA-256(uid)): valid for GCE and Pod names alike.

    80 bits keep birthday collisions negligible for fleets of thousands, and a
    replacement instance gets the same name, which is why replacement waits
    for the old instance to be gone before creating the new one.
    """
    digest = hashlib.sha256(uid.encode()).digest()
    return "proxy-" + base64.b32encode(digest).decode().lower()[:16]


def credentials_secret_name(uid: str) -> str:
    """The name of a Proxy's credentials Secret (the operator makes it; a pod mounts it)."""
    return f"{instance_name(uid)}-credentials"
