"""The GCE inventory for the orphan GC: VMs labelled with a Proxy UID, listed and deleted.

Speaks the subset of the Compute REST API it needs over aiohttp:
`instances.aggregatedList` (label filter, pagination, partial success) and
`instances.delete`, which is fire-and-forget: the next sweep sees the result.

Kubernetes label keys such as `crawl.example.com/proxy-uid` are not valid GCP
label keys (only `[a-z0-9_-]`), so a VM carries its Proxy's UID under
`GCE_UID_LABEL`: the VM program sets it and this inventory filters on it. A
sharded operator's VMs also carry `GCE_SHARD_LABEL`, and its inventory keeps
only those (an unsharded one only VMs without it), so a shard's GC never
judges another shard's VMs.

Access tokens come from `gcp_auth` (google-auth). The Compute endpoint can
be pointed at a local server, which is how the tests run: Google cannot be
reached from CI.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryError,
    InventoryListing,
    PartialFailure,
    TaggedInstance,
)
from egress_proxies.vocabulary import GCE_SHARD_LABEL, GCE_UID_LABEL

if TYPE_CHECKING:
    from egress_proxies.providers.gcp_auth import AccessTokens

COMPUTE_URL = "https://compute.googleapis.com/compute/v1"

_PAGE_SIZE = 500
_TIMEOUT = aiohttp.ClientTimeout(total=30)
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
    """Google's error message from a Compute API error body."""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""


class GceInventory:
    """The VMs of one GCP project that carry `GCE_UID_LABEL`, across all zones."""

    def __init__(
        self,
        project: str,
        tokens: AccessTokens,
        session: aiohttp.ClientSession | None = None,
        *,
        compute_url: str = COMPUTE_URL,
        shard: str | None = None,
    ) -> None:
        """`session` None: the inventory opens its own on first use, and `close` closes it.

        `shard`: list only the VMs labelled with this operator shard (None: only unlabelled ones).
        """
        if not _PROJECT.fullmatch(project):
            raise ValueError(f"not a GCP project id: {project!r}")
        self._project = project
        self._shard = shard
        self._tokens = tokens
        self._session = session
        self._own_session: aiohttp.ClientSession | None = None
        self._project_url = f"{compute_url.rstrip('/')}/projects/{project}"

    def __repr__(self) -> str:
        shard = f" shard={self._shard}" if self._shard else ""
        return f"<GceInventory project={self._project}{shard} api={self._project_url}>"

    @property
    def project(self) -> str:
        """The project whose VMs this inventory reads."""
        return self._project

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
            instances.extend(_page_instances(page, self._shard))
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

    async def get(self, instance_id: InstanceId) -> TaggedInstance | None:
        """One VM by id (`instances.get`); None when it is gone or carries no UID label."""
        if not _INSTANCE_ID.fullmatch(instance_id):
            raise ValueError(f"not zones/<zone>/instances/<name>: {instance_id!r}")
        status, body = await self._call("GET", f"{self._project_url}/{instance_id}")
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise InventoryError(f"get {instance_id}: HTTP {status}: {_error_message(body)}")
        return _tagged_instance(body)

    async def _list_page(self, page_token: str) -> dict[str, Any]:
        params = {
            "filter": f"labels.{GCE_UID_LABEL}:*",
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

    async def close(self) -> None:
        """Close the session the inventory opened itself (a given one is the giver's)."""
        if self._own_session is not None:
            await self._own_session.close()
            self._own_session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is not None:
            return self._session
        if self._own_session is None or self._own_session.closed:
            self._own_session = aiohttp.ClientSession()
        return self._own_session

    async def _call(self, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {await self._tokens.bearer()}"}
        return await _send(self._http(), method, url, f"{self!r}", headers=headers, **kwargs)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _page_instances(page: dict[str, Any], shard: str | None) -> list[TaggedInstance]:
    """The labelled VMs of one aggregatedList page that belong to `shard`, from every zone."""
    scoped_lists = _dict(page.get("items")).values()
    raws = [_dict(raw) for scoped in scoped_lists for raw in _dict(scoped).get("instances") or []]
    mine = [raw for raw in raws if _dict(raw.get("labels")).get(GCE_SHARD_LABEL) == shard]
    return [tagged for raw in mine if (tagged := _tagged_instance(raw)) is not None]


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
    uid = _dict(raw.get("labels")).get(GCE_UID_LABEL)
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
