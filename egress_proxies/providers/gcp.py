"""The GCE inventory for the orphan GC: VMs labelled with a Proxy UID, listed and deleted.

Speaks the subset of the Compute REST API it needs over aiohttp:
`instances.aggregatedList` (label filter, pagination, partial success) and
`instances.delete`, which is fire-and-forget: the next sweep sees the result.

Kubernetes label keys such as `crawl.example.com/proxy-uid` are not valid GCP
label keys (only `[a-z0-9_-]`), so a VM carries its Proxy's UID under
`UID_LABEL_KEY`: the VM program sets it and this inventory filters on it.

Credentials come from a mounted service-account key (a JWT signed with the
key is exchanged at the key's token endpoint) or from the GCE metadata
server (workload identity). Token and Compute endpoints can be pointed at a
local server, which is how the tests run: Google cannot be reached from CI.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryError,
    InventoryListing,
    PartialFailure,
    TaggedInstance,
)

UID_LABEL_KEY = "egress-proxies-uid"
COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
METADATA_TOKEN_URL = (
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
)
COMPUTE_SCOPE = "https://www.googleapis.com/auth/compute"

_PAGE_SIZE = 500
_TIMEOUT = aiohttp.ClientTimeout(total=30)
_ASSERTION_LIFETIME = 3600
_REFRESH_MARGIN = 300
_NO_RESULTS = "NO_RESULTS_ON_PAGE"
_PROVISIONING = frozenset({"PROVISIONING", "STAGING"})
_PROJECT = re.compile(r"[a-z][-a-z0-9.:]{4,62}[a-z0-9]")
_INSTANCE_ID = re.compile(r"zones/[a-z0-9-]+/instances/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")


def instance_id(zone: str, name: str) -> InstanceId:
    """`zones/<zone>/instances/<name>`: zone-qualified, so it stays valid across a zone edit."""
    return InstanceId(f"zones/{zone}/instances/{name}")


def instance_state(status: str) -> InstanceState:
    """RUNNING runs, PROVISIONING and STAGING are on their way; anything else counts as stopped.

    Unknown statuses included: the answer to a stopped VM is delete and
    recreate, the always-safe move for cattle when the API grows a new state.
    """
    if status == "RUNNING":
        return InstanceState.RUNNING
    if status in _PROVISIONING:
        return InstanceState.PROVISIONING
    return InstanceState.STOPPED


class AccessTokens(Protocol):
    """A source of OAuth access tokens for the Compute API."""

    async def bearer(self) -> str:
        """A token valid for at least a few more minutes."""
        ...


async def _send(
    session: aiohttp.ClientSession, method: str, url: str, what: str, **kwargs: Any
) -> tuple[int, Any]:
    """One HTTP exchange: the status and the decoded JSON body; transport errors raised."""
    try:
        async with session.request(method, url, timeout=_TIMEOUT, **kwargs) as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as error:
        raise InventoryError(f"{what}: {type(error).__name__}: {error}") from error
    try:
        return response.status, json.loads(text) if text else {}
    except ValueError:
        return response.status, {"error": {"message": text[:200]}}


def _error_message(body: Any) -> str:
    """Google's error message from a JSON error body (Compute API or OAuth shape)."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("message", ""))
        if isinstance(error, str):
            return f"{error}: {body.get('error_description', '')}"
    return ""


class _CachedTokens(ABC):
    """Fetches a token when none is cached or the cached one expires within five minutes."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def bearer(self) -> str:
        """A cached token, refreshed ahead of its expiry."""
        async with self._lock:
            if self._token is not None and self._clock() < self._expires_at - _REFRESH_MARGIN:
                return self._token
            body = await self._fetch()
            token, lifetime = body.get("access_token"), body.get("expires_in")
            if not isinstance(token, str) or not isinstance(lifetime, int | float):
                raise InventoryError(f"{self!r}: token response without a token")
            self._token, self._expires_at = token, self._clock() + lifetime
            return token

    @abstractmethod
    async def _fetch(self) -> dict[str, Any]:
        """The token endpoint's JSON answer: `access_token` and `expires_in` (seconds)."""


@dataclass(frozen=True)
class ServiceAccountKey:
    """The fields of a service-account key JSON file this client uses; the key stays out of repr."""

    client_email: str
    private_key_id: str
    token_uri: str
    private_key_pem: str = field(repr=False)

    @classmethod
    def from_json(cls, text: str) -> ServiceAccountKey:
        """Parse a key file's contents; ValueError if it is not a service-account key."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("type") != "service_account":
            raise ValueError("not a service-account key (type must be service_account)")
        try:
            return cls(
                client_email=str(data["client_email"]),
                private_key_id=str(data["private_key_id"]),
                token_uri=str(data["token_uri"]),
                private_key_pem=str(data["private_key"]),
            )
        except KeyError as missing:
            raise ValueError(f"service-account key without {missing}") from None

    @classmethod
    def from_file(cls, path: Path) -> ServiceAccountKey:
        """Read a mounted key file."""
        return cls.from_json(path.read_text())


class ServiceAccountKeyTokens(_CachedTokens):
    """Tokens for a service-account key: an RS256-signed JWT exchanged at the token endpoint."""

    def __init__(
        self,
        key: ServiceAccountKey,
        session: aiohttp.ClientSession,
        *,
        token_url: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self._key = key
        self._session = session
        self._token_url = token_url or key.token_uri
        private_key = serialization.load_pem_private_key(key.private_key_pem.encode(), None)
        if not isinstance(private_key, rsa.RSAPrivateKey):
            raise ValueError("service-account key is not an RSA key")
        self._private_key = private_key

    def __repr__(self) -> str:
        return f"<ServiceAccountKeyTokens {self._key.client_email} via {self._token_url}>"

    def _assertion(self) -> str:
        """The signed JWT (RFC 7523) that the token endpoint exchanges for an access token."""
        now = int(self._clock())
        header = {"alg": "RS256", "typ": "JWT", "kid": self._key.private_key_id}
        claims = {
            "iss": self._key.client_email,
            "scope": COMPUTE_SCOPE,
            "aud": self._token_url,
            "iat": now,
            "exp": now + _ASSERTION_LIFETIME,
        }
        signing_input = f"{_b64url_json(header)}.{_b64url_json(claims)}"
        signature = self._private_key.sign(
            signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()
        )
        return f"{signing_input}.{_b64url(signature)}"

    async def _fetch(self) -> dict[str, Any]:
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "assertion": self._assertion(),
        }
        status, body = await _send(
            self._session, "POST", self._token_url, f"{self!r}: token exchange", data=form
        )
        if status != 200 or not isinstance(body, dict):
            raise InventoryError(f"{self!r}: token exchange: HTTP {status}: {_error_message(body)}")
        return body


class MetadataServerTokens(_CachedTokens):
    """Tokens from the GCE metadata server: the node's or the workload-identity account."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        token_url: str = METADATA_TOKEN_URL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self._session = session
        self._token_url = token_url

    def __repr__(self) -> str:
        return f"<MetadataServerTokens via {self._token_url}>"

    async def _fetch(self) -> dict[str, Any]:
        status, body = await _send(
            self._session,
            "GET",
            self._token_url,
            f"{self!r}: token request",
            headers={"Metadata-Flavor": "Google"},
        )
        if status != 200 or not isinstance(body, dict):
            raise InventoryError(f"{self!r}: token request: HTTP {status}: {_error_message(body)}")
        return body


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_json(value: dict[str, Any]) -> str:
    return _b64url(json.dumps(value, separators=(",", ":")).encode())


class GceInventory:
    """The VMs of one GCP project that carry `UID_LABEL_KEY`, across all zones."""

    def __init__(
        self,
        project: str,
        tokens: AccessTokens,
        session: aiohttp.ClientSession,
        *,
        compute_url: str = COMPUTE_URL,
    ) -> None:
        if not _PROJECT.fullmatch(project):
            raise ValueError(f"not a GCP project id: {project!r}")
        self._project = project
        self._tokens = tokens
        self._session = session
        self._project_url = f"{compute_url.rstrip('/')}/projects/{project}"

    def __repr__(self) -> str:
        return f"<GceInventory project={self._project} api={self._project_url}>"

    @property
    def provider(self) -> ProviderName:
        """Always gcp."""
        return ProviderName.GCP

    async def list_tagged(self) -> InventoryListing:
        """All labelled VMs via aggregatedList; zones that did not answer are partial failures."""
        instances: list[TaggedInstance] = []
        failures: dict[str, PartialFailure] = {}
        page_token = ""
        while True:
            page = await self._list_page(page_token)
            instances.extend(_page_instances(page))
            for failure in _page_failures(page):
                failures.setdefault(failure.scope, failure)
            page_token = str(page.get("nextPageToken") or "")
            if not page_token:
                break
        return InventoryListing(ProviderName.GCP, tuple(instances), tuple(failures.values()))

    async def delete(self, instance_id: InstanceId) -> None:
        """Ask Compute to delete the VM; a VM already gone (404) counts as deleted."""
        if not _INSTANCE_ID.fullmatch(instance_id):
            raise ValueError(f"not zones/<zone>/instances/<name>: {instance_id!r}")
        status, body = await self._call("DELETE", f"{self._project_url}/{instance_id}")
        if status != 404 and not 200 <= status < 300:
            raise InventoryError(f"delete {instance_id}: HTTP {status}: {_error_message(body)}")

    async def _list_page(self, page_token: str) -> dict[str, Any]:
        params = {
            "filter": f"labels.{UID_LABEL_KEY}:*",
            "maxResults": str(_PAGE_SIZE),
            "returnPartialSuccess": "true",
        }
        if page_token:
            params["pageToken"] = page_token
        status, body = await self._call(
            "GET", f"{self._project_url}/aggregated/instances", params=params
        )
        if status != 200 or not isinstance(body, dict):
            raise InventoryError(f"aggregatedList: HTTP {status}: {_error_message(body)}")
        return body

    async def _call(self, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {await self._tokens.bearer()}"}
        return await _send(self._session, method, url, f"{self!r}", headers=headers, **kwargs)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _page_instances(page: dict[str, Any]) -> list[TaggedInstance]:
    """The labelled VMs of one aggregatedList page, from every zone's scoped list."""
    scoped_lists = _dict(page.get("items")).values()
    raws = [raw for scoped in scoped_lists for raw in _dict(scoped).get("instances") or []]
    return [tagged for raw in raws if (tagged := _tagged_instance(_dict(raw))) is not None]


def _page_failures(page: dict[str, Any]) -> list[PartialFailure]:
    """Zones of one page that did not answer: `unreachables`, and scope warnings but no-results."""
    failures = [
        PartialFailure(str(scope), "unreachable") for scope in page.get("unreachables") or []
    ]
    for scope, scoped in _dict(page.get("items")).items():
        warning = _dict(_dict(scoped).get("warning"))
        if warning and warning.get("code") != _NO_RESULTS:
            reason = f"{warning.get('code')}: {warning.get('message', '')}"
            failures.append(PartialFailure(scope, reason))
    return failures


def _tagged_instance(raw: dict[str, Any]) -> TaggedInstance | None:
    """A labelled VM from its Compute resource; None without the label (never ours to judge)."""
    uid = _dict(raw.get("labels")).get(UID_LABEL_KEY)
    if not uid:
        return None
    try:
        zone = str(raw["zone"]).rsplit("/", 1)[-1]
        created_at = datetime.fromisoformat(str(raw["creationTimestamp"]))
        return TaggedInstance(
            provider=ProviderName.GCP,
            instance_id=instance_id(zone, str(raw["name"])),
            uid_label=str(uid),
            created_at=created_at,
            state=instance_state(str(raw.get("status", ""))),
        )
    except (KeyError, ValueError) as error:
        raise InventoryError(f"aggregatedList: malformed instance {raw.get('name')}") from error
