"""The operator's in-memory view of the fleet, fed by kopf watch events.

Proxies, their credentials Secrets and the labelled cloud-init Secrets are
kept as the watch delivers them, so the health engine and the discovery API
read the fleet without an API call. `records()` is the ProxyCatalog they
share; records are rebuilt only for objects that changed.

Each Proxy's slim body is kept as compact JSON and decoded when read: as
parsed dicts it costs about 5.7 KiB per Proxy, as JSON about 1.1 KiB. The
records, which the health engine and every lease request read, are built
once per change; the bodies are read per handler call and per pool round,
and a pool's round decodes only its own members (`pool_members`).
"""

from __future__ import annotations

import base64
import binascii
import json
import types
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from egress_proxies.catalog import ProxyKey, ProxyRecord, proxy_key, record_from_body
from egress_proxies.model import GROUP
from egress_proxies.values import SIGNING_KEY, ProxyCredentials
from egress_proxies.vocabulary import POOL_LABEL

SecretKey = tuple[str, str]  # (namespace, name)

# What the fleet's readers use of a Proxy's metadata; managedFields and kopf's own
# annotations (its last-handled configuration is a copy of the spec) are most of a
# body's size, and a body kept whole keeps every one of kopf's parsed dicts alive.
_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
)
_OUR_ANNOTATIONS = f"{GROUP}/"


def slim_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Proxy body the fleet's readers use (spec, status, some metadata)."""
    meta = body["metadata"]
    kept = {key: meta[key] for key in _KEPT_METADATA if key in meta}
    ours = {
        key: value
        for key, value in (meta.get("annotations") or {}).items()
        if key.startswith(_OUR_ANNOTATIONS)
    }
    if ours:
        kept["annotations"] = ours
    return {"metadata": kept, "spec": body.get("spec") or {}, "status": body.get("status") or {}}


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    """A Secret's `data`, base64-decoded (undecodable values are skipped)."""
    decoded: dict[str, str] = {}
    for key, value in (data or {}).items():
        try:
            decoded[key] = base64.b64decode(value).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return decoded


class Fleet:
    """Latest Proxy bodies and relevant Secrets; implements the ProxyCatalog protocol."""

    def __init__(self) -> None:
        self._proxies: dict[ProxyKey, str] = {}  # slim bodies, as JSON
        self._pools: dict[ProxyKey, str] = {}  # `namespace/pool` of the Proxies in a pool
        self._by_uid: dict[str, ProxyKey] = {}
        self._secrets: dict[SecretKey, dict[str, str]] = {}
        self._records: dict[ProxyKey, ProxyRecord | None] = {}
        self._snapshot: tuple[ProxyRecord, ...] | None = None
        # Bumped by every change of a Proxy body: a reader's cache of bodies is current
        # while it is unchanged (the fleet console's).
        self.version = 0

    def __repr__(self) -> str:
        addressable = sum(1 for record in self._current().values() if record is not None)
        return (
            f"<Fleet [proxies: {len(self._proxies)} | addressable: {addressable} | "
            f"secrets: {len(self._secrets)}]>"
        )

    def put_proxy(self, body: Mapping[str, Any]) -> None:
        """Record the latest body of a Proxy (only the parts the fleet's readers use)."""
        meta = body["metadata"]
        key = proxy_key(meta["namespace"], meta["name"])
        self._proxies[key] = json.dumps(slim_body(body), separators=(",", ":"))
        pool = (meta.get("labels") or {}).get(POOL_LABEL)
        if pool:
            self._pools[key] = f"{meta['namespace']}/{pool}"
        else:
            self._pools.pop(key, None)
        self._by_uid[meta["uid"]] = key
        self._records.pop(key, None)
        self._snapshot = None
        self.version += 1

    def remove_proxy(self, namespace: str, name: str) -> None:
        """Forget a deleted Proxy."""
        key = proxy_key(namespace, name)
        body = self._proxies.pop(key, None)
        self._pools.pop(key, None)
        if body is not None:
            self._by_uid.pop(json.loads(body)["metadata"]["uid"], None)
        self._records.pop(key, None)
        self._snapshot = None
        self.version += 1

    def proxy_by_uid(self, uid: str) -> Mapping[str, Any] | None:
        """The latest body of the Proxy with this UID, if known."""
        key = self._by_uid.get(uid)
        return self._body(key) if key is not None else None

    def proxy(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The latest body of a Proxy, if known."""
        return self._body(proxy_key(namespace, name))

    def proxies(self) -> list[Mapping[str, Any]]:
        """Every known Proxy body."""
        return [json.loads(body) for body in self._proxies.values()]

    def proxy_documents(self) -> Mapping[ProxyKey, str]:
        """Each Proxy's slim body as the compact JSON kept: a changed body is a new string,
        so a reader may keep what it decoded from an unchanged one (the fleet console)."""
        return types.MappingProxyType(self._proxies)

    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        """The bodies of the Proxies labelled as members of the pool `namespace/pool`."""
        wanted = f"{namespace}/{pool}"
        return [json.loads(self._proxies[key]) for key, of in self._pools.items() if of == wanted]

    def _body(self, key: ProxyKey) -> Mapping[str, Any] | None:
        body = self._proxies.get(key)
        return json.loads(body) if body is not None else None

    def put_secret(self, namespace: str, name: str, data: Mapping[str, str] | None) -> None:
        """Record a (labelled) Secret's decoded data."""
        self._secrets[(namespace, name)] = decode_secret_data(data)
        self._invalidate_namespace(namespace)

    def remove_secret(self, namespace: str, name: str) -> None:
        """Forget a deleted Secret."""
        self._secrets.pop((namespace, name), None)
        self._invalidate_namespace(namespace)

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        """The decoded data of a known Secret."""
        return self._secrets.get((namespace, name))

    def referencing_cloud_init(self, namespace: str, secret: str) -> list[Mapping[str, Any]]:
        """Proxies whose spec.cloudInit.secretRef names this Secret."""
        return [
            body
            for body in self.proxies()
            if body["metadata"]["namespace"] == namespace
            and ((body.get("spec") or {}).get("cloudInit") or {}).get("secretRef", {}).get("name")
            == secret
        ]

    def records(self) -> Sequence[ProxyRecord]:
        """Every addressable proxy (the ProxyCatalog protocol)."""
        if self._snapshot is None:
            self._snapshot = tuple(r for r in self._current().values() if r is not None)
        return self._snapshot

    def _current(self) -> dict[ProxyKey, ProxyRecord | None]:
        for key, body in self._proxies.items():
            if key not in self._records:
                self._records[key] = self._record(json.loads(body))
        return self._records

    def _record(self, body: Mapping[str, Any]) -> ProxyRecord | None:
        try:
            return record_from_body(body, self._credentials(body))
        except (ValidationError, KeyError):
            return None

    def _credentials(self, body: Mapping[str, Any]) -> ProxyCredentials | None:
        namespace = body["metadata"]["namespace"]
        spec, status = body.get("spec") or {}, body.get("status") or {}
        if spec.get("mode") == "External":
            ref = (spec.get("endpoint") or {}).get("credentialsSecretRef")
            secret_name = ref.get("name") if ref else None
        else:
            secret_name = status.get("credentialsSecret")
        data = self._secrets.get((namespace, secret_name)) if secret_name else None
        if not data or "username" not in data or "password" not in data:
            return None
        return ProxyCredentials(
            username=data["username"],
            password=data["password"],
            signing_key=data.get(SIGNING_KEY) if spec.get("mode") != "External" else None,
        )

    def _invalidate_namespace(self, namespace: str) -> None:
        for key in [key for key in self._records if key.startswith(f"{namespace}/")]:
            del self._records[key]
        self._snapshot = None
