"""JSON access to the Kubernetes API by URL path, over lightkube's authenticated HTTP client.

kopf watches and patches the Proxies; this client does the rest (Secrets,
status patches by the single status writer, peering, the GC inventory, the
dev cluster's kubelet, the tests). Callers name objects by API path and get
plain JSON back, the same shape kopf hands the handlers; errors arrive
typed (kube/errors.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import httpx2 as httpx
from lightkube.core.exceptions import ConfigError

from egress_proxies.errors import ClosedError
from egress_proxies.kube.config import Credentials
from egress_proxies.kube.errors import KubeApiError, NotFoundError, TransportError, api_error

JsonObject = dict[str, Any]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON

# Ten seconds to connect, thirty for an answer: every call but `watch` is a
# single object or a list the server answers at once.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class KubeClient:
    """get, list, create, patch, apply, delete and watch by URL path; one connection pool."""

    def __init__(self, credentials: Credentials, *, timeout: httpx.Timeout = DEFAULT_TIMEOUT):
        self._credentials = credentials
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._closed = False

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def credentials(self) -> Credentials:
        """Who this client is and which server it talks to."""
        return self._credentials

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        else:
            state = "open" if self._http is not None and not self._http.is_closed else "idle"
        return f"<KubeClient {self._credentials.server} [{state}]>"

    async def close(self) -> None:
        """Release the connection pool; every later request raises ClosedError."""
        self._closed = True
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._closed:
            raise ClosedError(
                f"the Kubernetes client for {self._credentials.server} is closed: "
                "whatever still calls it should have been stopped first"
            )
        if self._http is None or self._http.is_closed:
            self._http = self._credentials.http_client(self._timeout)
        return self._http

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> JsonObject:
        """Send one request; return the decoded JSON body or raise an KubeApiError."""
        headers = {"Content-Type": content_type} if body is not None else {}
        content = json.dumps(body) if body is not None else None
        request = self._client().build_request(
            method, path, content=content, params=params, headers=headers
        )
        response = await self._send(request)
        text = response.text
        if response.status_code >= 400:
            raise _api_error(response.status_code, text)
        decoded: JsonObject = json.loads(text) if text else {}
        return decoded

    async def _send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        try:
            return await self._client().send(request, stream=stream)
        except httpx.TransportError as error:
            raise TransportError(f"{request.method} {request.url.path}: {error!r}") from error
        except ConfigError as error:  # lightkube's own auth flows (token file vanished)
            raise TransportError(f"{request.method} {request.url.path}: {error}") from error

    async def get_text(self, path: str) -> str:
        """GET a plain-text endpoint such as /readyz."""
        response = await self._send(self._client().build_request("GET", path))
        if response.status_code >= 400:
            raise _api_error(response.status_code, response.text)
        return response.text

    async def get(self, path: str) -> JsonObject:
        """GET one object (or a whole collection)."""
        return await self.request("GET", path)

    async def list(self, path: str, *, label_selector: str | None = None) -> JsonObject:
        """GET a collection, optionally only the objects matching a label selector."""
        params = {"labelSelector": label_selector} if label_selector else None
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """POST a new object to a collection path."""
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """PATCH with a JSON merge patch (or a strategic merge patch)."""
        content_type = STRATEGIC_PATCH if strategic else MERGE_PATCH
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def apply(
        self, path: str, body: JsonObject, *, field_manager: str, force: bool = False
    ) -> JsonObject:
        """Server-side apply: create the object or set the fields `field_manager` owns."""
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return await self.request("PATCH", path, body=body, params=params, content_type=APPLY_PATCH)

    async def delete(self, path: str, *, grace_seconds: int | None = None) -> JsonObject | None:
        """DELETE an object; a missing object is not an error (returns None)."""
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        try:
            return await self.request("DELETE", path, body=body)
        except NotFoundError:
            return None

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[JsonObject]:
        """Yield watch events ({type, object}) of a collection from a resource version."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        # The server ends the watch after timeout_seconds; reads wait a little longer.
        timeout = httpx.Timeout(self._timeout.connect, read=timeout_seconds + 30.0)
        request = self._client().build_request("GET", path, params=params, timeout=timeout)
        response = await self._send(request, stream=True)
        try:
            if response.status_code >= 400:
                raise _api_error(response.status_code, (await response.aread()).decode())
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)
        except httpx.TransportError as error:
            raise TransportError(f"watch {path}: {error!r}") from error
        finally:
            await response.aclose()


class Patcher(Protocol):
    """Anything that merge-patches an object by path: a KubeClient, or a test's fake of one."""

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """Merge-patch the object at `path`."""
        ...


async def annotate(client: Patcher, path: str, key: str, value: str) -> None:
    """Set one annotation on the object at `path`; an object that is gone is left alone.

    A changed annotation is also how the operator nudges kopf: the Proxy's
    update handlers run again.
    """
    try:
        await client.patch(path, {"metadata": {"annotations": {key: value}}})
    except NotFoundError:
        return


def _api_error(status: int, text: str) -> KubeApiError:
    try:
        body = json.loads(text)
        return api_error(status, body.get("reason", ""), body.get("message", text))
    except (ValueError, AttributeError):
        return api_error(status, "", text.strip())
