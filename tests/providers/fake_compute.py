"""A local stand-in for Google's Compute Engine and OAuth endpoints, which cannot be reached here.

It speaks only the subset the GCE inventory uses, in the shapes Google
documents: the OAuth token endpoint for service-account JWTs (the RS256
signature is verified against the key's public half), the metadata server's
service-account and token endpoints (as google-auth's compute_engine
credentials call them), `instances.aggregatedList` (the `labels.<key>:*` filter,
maxResults/pageToken pagination, returnPartialSuccess with zones that fail)
`instances.get` and `instances.delete`. Passing against it proves the client's handling of
that protocol; it proves nothing about Google's own behaviour.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from egress_proxies.vocabulary import GCE_UID_LABEL

PROJECT = "crawler-proxies"
SERVICE_ACCOUNT_EMAIL = "egress-proxies@crawler-proxies.iam.gserviceaccount.com"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# The audience Google requires of a service-account JWT, whatever URL it is posted to.
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
METADATA_ACCOUNT_PATH = "/computeMetadata/v1/instance/service-accounts/default/"
METADATA_TOKEN_PATH = f"{METADATA_ACCOUNT_PATH}token"
_LABEL_FILTER = re.compile(r"labels\.([a-z0-9_-]+):\*")


@dataclass
class FakeInstance:
    """One VM as the fake holds it."""

    zone: str
    name: str
    labels: dict[str, str]
    status: str = "RUNNING"
    creation_timestamp: str = "2024-05-01T10:20:30.123-07:00"
    lists_until_gone: int | None = None  # set while a delete is in progress

    def resource(self, base_url: str, project: str) -> dict[str, Any]:
        """The Compute `Instance` resource fields the client reads, as Google returns them."""
        zone_url = f"{base_url}/compute/v1/projects/{project}/zones/{self.zone}"
        return {
            "kind": "compute#instance",
            "name": self.name,
            "zone": zone_url,
            "labels": self.labels,
            "status": self.status,
            "creationTimestamp": self.creation_timestamp,
            "selfLink": f"{zone_url}/instances/{self.name}",
        }


@dataclass
class FakeCompute:
    """State and request log of the fake; `url` is set while it serves."""

    project: str
    service_account_email: str
    service_account_key: rsa.RSAPublicKey
    instances: list[FakeInstance] = field(default_factory=list)
    unreachable_zones: set[str] = field(default_factory=set)
    max_page_size: int = 500
    # Compute deletes asynchronously: a deleted VM stays listed (STOPPING) this many lists.
    deletion_lag: int = 0
    token_lifetime: int = 3599
    url: str = ""
    issued_tokens: list[str] = field(default_factory=list)
    list_queries: list[dict[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    metadata_scopes: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        """The aiohttp application serving the fake endpoints."""
        app = web.Application()
        app.router.add_post("/token", self._token)
        app.router.add_get(METADATA_ACCOUNT_PATH, self._metadata_account)
        app.router.add_get(METADATA_TOKEN_PATH, self._metadata_token)
        app.router.add_get("/compute/v1/projects/{project}/aggregated/instances", self._list)
        instance_path = "/compute/v1/projects/{project}/zones/{zone}/instances/{name}"
        app.router.add_get(instance_path, self._get)
        app.router.add_delete(instance_path, self._delete)
        return app

    def _issue_token(self) -> web.Response:
        token = f"ya29.fake-{len(self.issued_tokens)}"
        self.issued_tokens.append(token)
        body = {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        return web.json_response(body)

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != JWT_BEARER:
            return _oauth_error("unsupported_grant_type", "Invalid grant_type.")
        claims = self._verified_claims(str(form.get("assertion", "")))
        if claims is None:
            return _oauth_error("invalid_grant", "Invalid JWT Signature.")
        return self._issue_token()

    def _verified_claims(self, assertion: str) -> dict[str, Any] | None:
        try:
            header, claims, signature = assertion.split(".")
            self.service_account_key.verify(
                _unb64(signature),
                f"{header}.{claims}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
            decoded: dict[str, Any] = json.loads(_unb64(claims))
        except (ValueError, InvalidSignature):
            return None
        expected = {"iss": self.service_account_email, "aud": GOOGLE_TOKEN_AUDIENCE}
        if any(decoded.get(key) != value for key, value in expected.items()):
            return None
        return decoded if decoded["exp"] > decoded["iat"] else None

    async def _metadata_account(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        account = {
            "aliases": ["default"],
            "email": self.service_account_email,
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
        return web.json_response(account, headers={"Metadata-Flavor": "Google"})

    async def _metadata_token(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        self.metadata_scopes.append(request.query.get("scopes", ""))
        return self._issue_token()

    def _authorized(self, request: web.Request) -> web.Response | None:
        """An error response unless the request carries a token this fake issued."""
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.issued_tokens:
            return _google_error(401, "Request had invalid authentication credentials.", "")
        if request.match_info["project"] != self.project:
            project = request.match_info["project"]
            return _google_error(
                403,
                f"Required 'compute.instances.list' permission for 'projects/{project}'",
                "forbidden",
            )
        return None

    async def _list(self, request: web.Request) -> web.Response:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        query = dict(request.query)
        self.list_queries.append(query)
        self._advance_deletions()
        match = _LABEL_FILTER.fullmatch(query.get("filter", ""))
        if match is None:
            return _google_error(400, "Invalid value for field 'filter'.", "invalid")
        if self.unreachable_zones and query.get("returnPartialSuccess") != "true":
            return _google_error(503, "Backend Error", "backendError")
        matching = sorted(
            (i for i in self.instances if match.group(1) in i.labels),
            key=lambda i: (i.zone, i.name),
        )
        page_size = min(int(query.get("maxResults", "500")), self.max_page_size)
        start = int(query.get("pageToken") or 0)
        page = matching[start : start + page_size]
        body: dict[str, Any] = {"kind": "compute#instanceAggregatedList", "items": {}}
        zones = sorted({i.zone for i in self.instances} | self.unreachable_zones)
        for zone in zones:
            scope = f"zones/{zone}"
            on_page = [i.resource(self.url, self.project) for i in page if i.zone == zone]
            if zone in self.unreachable_zones:
                body["items"][scope] = {"warning": _warning("UNREACHABLE", scope)}
            elif on_page:
                body["items"][scope] = {"instances": on_page}
            else:
                body["items"][scope] = {"warning": _warning("NO_RESULTS_ON_PAGE", scope)}
        if self.unreachable_zones:
            body["unreachables"] = [f"zones/{zone}" for zone in sorted(self.unreachable_zones)]
        if start + page_size < len(matching):
            body["nextPageToken"] = str(start + page_size)
        return web.json_response(body)

    def _advance_deletions(self, *, listing: bool = True) -> None:
        """Count one list call against each deletion in progress; drop the finished ones."""
        for instance in list(self.instances):
            if instance.lists_until_gone is None:
                continue
            if instance.lists_until_gone <= 0:
                self.instances.remove(instance)
            elif listing:
                instance.lists_until_gone -= 1

    async def _get(self, request: web.Request) -> web.Response:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        zone, name = request.match_info["zone"], request.match_info["name"]
        target = next((i for i in self.instances if (i.zone, i.name) == (zone, name)), None)
        if target is None:
            path = f"projects/{self.project}/zones/{zone}/instances/{name}"
            return _google_error(404, f"The resource '{path}' was not found", "notFound")
        return web.json_response(target.resource(self.url, self.project))

    async def _delete(self, request: web.Request) -> web.Response:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        zone, name = request.match_info["zone"], request.match_info["name"]
        target = next((i for i in self.instances if (i.zone, i.name) == (zone, name)), None)
        path = f"projects/{self.project}/zones/{zone}/instances/{name}"
        if target is None:
            return _google_error(404, f"The resource '{path}' was not found", "notFound")
        if target.lists_until_gone is None:
            target.status, target.lists_until_gone = "STOPPING", self.deletion_lag
            self._advance_deletions(listing=False)
        self.deleted.append(f"zones/{zone}/instances/{name}")
        operation = {"kind": "compute#operation", "operationType": "delete", "status": "RUNNING"}
        return web.json_response(operation | {"targetLink": f"{self.url}/compute/v1/{path}"})


def labelled(zone: str, name: str, uid: str, status: str = "RUNNING") -> FakeInstance:
    """A VM carrying a Proxy UID label, as the VM program creates them."""
    return FakeInstance(zone, name, {GCE_UID_LABEL: uid, "team": "crawl"}, status)


@asynccontextmanager
async def serving(fake: FakeCompute) -> AsyncIterator[FakeCompute]:
    """Serve the fake on 127.0.0.1 (a free port) and set its `url` while it runs."""
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def _warning(code: str, scope: str) -> dict[str, Any]:
    messages = {
        "NO_RESULTS_ON_PAGE": f"There are no results for scope '{scope}' on this page.",
        "UNREACHABLE": f"Scope '{scope}' is unreachable.",
    }
    return {"code": code, "message": messages[code], "data": [{"key": "scope", "value": scope}]}


def _google_error(status: int, message: str, reason: str) -> web.Response:
    errors = [{"message": message, "domain": "global", "reason": reason}] if reason else []
    body = {"error": {"code": status, "message": message, "errors": errors}}
    return web.json_response(body, status=status)


def _oauth_error(error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=400)


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
