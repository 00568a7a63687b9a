"""A small async Kubernetes REST client: JSON over aiohttp, bearer-token auth.

kopf watches and patches the Proxies; this client does the rest (Secrets,
status patches by the single status writer, the dev cluster's kubelet, the
tests) over the same aiohttp stack, without a second, much larger client
library.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from egress_proxies.errors import EgressProxiesError

JsonObject = dict[str, Any]

_SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(EgressProxiesError):
    """The API server answered with a non-2xx status; `status` and `reason` come from its body."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to authenticate to it (bearer token + CA bundle)."""

    server: str
    token: str
    ca_pem: bytes
    token_file: Path | None = None

    @classmethod
    def in_cluster(cls) -> Credentials:
        """The pod's service-account credentials (the token file is re-read as it rotates)."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        token_file = _SERVICE_ACCOUNT_DIR / "token"
        return cls(
            server=server,
            token=token_file.read_text().strip(),
            ca_pem=(_SERVICE_ACCOUNT_DIR / "ca.crt").read_bytes(),
            token_file=token_file,
        )

    @classmethod
    def load(cls, kubeconfig: Path | None) -> Credentials:
        """From a kubeconfig if given (or $KUBECONFIG), else the in-cluster service account."""
        path = kubeconfig or (
            Path(os.environ["KUBECONFIG"]) if "KUBECONFIG" in os.environ else None
        )
        return cls.from_kubeconfig(path) if path else cls.in_cluster()

    def current_token(self) -> str:
        """The bearer token to send now."""
        if self.token_file is not None:
            return self.token_file.read_text().strip()
        return self.token

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """Read the current context of a token-based kubeconfig."""
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = _named(config["contexts"], context_name)["context"]
        cluster = _named(config["clusters"], context["cluster"])["cluster"]
        user = _named(config["users"], context["user"])["user"]
        return cls(
            server=cluster["server"],
            token=user["token"],
            ca_pem=base64.b64decode(cluster["certificate-authority-data"]),
        )

    def with_token(self, token: str) -> Credentials:
        """The same server, authenticated as someone else."""
        return Credentials(server=self.server, token=token, ca_pem=self.ca_pem)

    def __repr__(self) -> str:
        return f"Credentials(server={self.server!r}, token=<redacted>)"

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts exactly this cluster's CA."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        return context


def _named(items: list[JsonObject], name: str) -> JsonObject:
    for item in items:
        if item["name"] == name:
            return item
    raise KeyError(f"kubeconfig has no entry named {name!r}")


def write_kubeconfig(path: Path, credentials: Credentials, *, name: str = "dev-cluster") -> None:
    """Write a kubeconfig usable by kubectl, kopf and the pulumi kubernetes provider."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": credentials.server,
                    "certificate-authority-data": base64.b64encode(credentials.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": credentials.token}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": f"{name}-admin"}},
        ],
        "current-context": name,
    }
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
        yaml.safe_dump(config, handle)
    Path(handle.name).chmod(0o600)
    Path(handle.name).replace(path)


class KubeClient:
    """Minimal JSON REST access: get, list, create, patch, delete and watch by URL path."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def credentials(self) -> Credentials:
        """Who this client is and which server it talks to."""
        return self._credentials

    def __repr__(self) -> str:
        state = "open" if self._session and not self._session.closed else "idle"
        return f"<KubeClient {self._credentials.server} [{state}]>"

    async def close(self) -> None:
        """Release the HTTP connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._credentials.ssl_context())
            self._session = aiohttp.ClientSession(
                base_url=self._credentials.server, connector=connector
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """Send one request; return the decoded JSON body or raise ApiError."""
        data = json.dumps(body) if body is not None else None
        headers = self._auth()
        if data is not None:
            headers["Content-Type"] = content_type
        async with self._http().request(
            method, path, data=data, params=params, headers=headers
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise _api_error(response.status, text)
            return json.loads(text) if text else {}

    async def get_text(self, path: str) -> str:
        """GET a plain-text endpoint such as /readyz."""
        async with self._http().get(path, headers=self._auth()) as response:
            text = await response.text()
            if response.status >= 400:
                raise _api_error(response.status, text)
            return text

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._credentials.current_token()}"}

    async def get(self, path: str) -> JsonObject:
        """GET one object or list."""
        return await self.request("GET", path)

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """POST a new object to a collection path."""
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """PATCH with a JSON merge patch (or a strategic merge patch)."""
        content_type = STRATEGIC_PATCH if strategic else MERGE_PATCH
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, *, grace_seconds: int | None = None) -> JsonObject | None:
        """DELETE an object; a missing object is not an error (returns None)."""
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        try:
            return await self.request("DELETE", path, body=body)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[JsonObject]:
        """Yield watch events ({type, object}) of a collection from a resource version."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
        async with self._http().get(
            path, params=params, timeout=timeout, headers=self._auth()
        ) as response:
            if response.status >= 400:
                raise _api_error(response.status, await response.text())
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)


def _api_error(status: int, text: str) -> ApiError:
    try:
        body = json.loads(text)
        return ApiError(status, body.get("reason", ""), body.get("message", text))
    except ValueError:
        return ApiError(status, "", text.strip())
