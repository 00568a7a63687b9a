"""Who the operator is to the API server: a kubeconfig context or the pod's service account.

lightkube parses the kubeconfig (every auth kind kubectl writes: token,
tokenFile, client certificate and key as files or inline data, exec
plugins, basic auth) and builds the authenticated HTTP client. kopf keeps
its own connection; `login_material` gives it the same identity
(operator/login.py).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import tempfile
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import msgspec
import yaml
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User, UserExec
from lightkube.core.exceptions import ConfigError

from egress_proxies.clock import Clock, SystemClock, parse_k8s_time
from egress_proxies.kube.errors import KubeConfigError, TransportError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_EXEC_TIMEOUT = 60.0
_EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
    "client.authentication.k8s.io/v1alpha1",
)


@dataclass(frozen=True, repr=False)
class LoginMaterial:
    """One snapshot of the secrets a second client (kopf) needs to log in as the same user."""

    server: str
    ca_pem: bytes | None
    insecure: bool = False
    token: str | None = None
    certificate_pem: bytes | None = None
    private_key_pem: bytes | None = None
    username: str | None = None
    password: str | None = None
    expiration: datetime.datetime | None = None

    def __repr__(self) -> str:
        return f"<LoginMaterial {self.server} [secrets redacted]>"


@dataclass(frozen=True)
class ExecCredential:
    """What an exec credential plugin printed: a token or a client certificate, maybe expiring."""

    token: str | None
    certificate_pem: bytes | None
    private_key_pem: bytes | None
    expiration: datetime.datetime | None

    def __repr__(self) -> str:
        return f"<ExecCredential expires={self.expiration} [secrets redacted]>"


@dataclass(frozen=True, repr=False)
class Credentials:
    """One selected kubeconfig context (lightkube's `SingleConfig`): the server and the user."""

    config: SingleConfig

    @classmethod
    def load(cls, kubeconfig: Path | None) -> Credentials:
        """From a kubeconfig if given (or $KUBECONFIG), else the in-cluster service account."""
        path = kubeconfig or (
            Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None
        )
        return cls.from_kubeconfig(path) if path else cls.in_cluster()

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> Credentials:
        """The current (or the named) context of a kubeconfig file."""
        try:
            config = KubeConfig.from_file(path).get(context)
        except (ConfigError, KeyError, TypeError, msgspec.ValidationError, yaml.YAMLError) as error:
            raise KubeConfigError(f"kubeconfig {path}: {error!s}") from error
        assert config is not None  # get() without a default never returns None
        return cls(config)

    @classmethod
    def in_cluster(cls, account_dir: Path = SERVICE_ACCOUNT_DIR) -> Credentials:
        """The pod's service account; its token file is re-read when the server refuses it."""
        try:
            config = KubeConfig.from_service_account(account_dir).get()
        except (ConfigError, KeyError) as error:
            raise KubeConfigError(
                f"no kubeconfig given and not in a pod (service account {account_dir}): {error!s}"
            ) from error
        assert config is not None
        return cls(config)

    @classmethod
    def for_user(cls, server: str, ca_pem: bytes, user: User) -> Credentials:
        """A single-context configuration for `user` on the server with this CA."""
        cluster = Cluster(server=server, certificate_auth_data=base64.b64encode(ca_pem).decode())
        config = KubeConfig.from_one(cluster=cluster, user=user).get()
        assert config is not None
        return cls(config)

    @classmethod
    def from_token(cls, server: str, ca_pem: bytes, token: str) -> Credentials:
        """A bearer-token user."""
        return cls.for_user(server, ca_pem, User(token=token))

    @classmethod
    def from_client_certificate(
        cls, server: str, ca_pem: bytes, certificate_pem: bytes, key_pem: bytes
    ) -> Credentials:
        """A client-certificate user (the certificate and key inline)."""
        user = User(
            client_cert_data=base64.b64encode(certificate_pem).decode(),
            client_key_data=base64.b64encode(key_pem).decode(),
        )
        return cls.for_user(server, ca_pem, user)

    def with_token(self, token: str) -> Credentials:
        """The same server, authenticated by a bearer token instead."""
        return Credentials(self.config._replace(user=User(token=token)))

    @property
    def server(self) -> str:
        """The API server's URL."""
        return self.config.cluster.server

    @property
    def ca_pem(self) -> bytes | None:
        """The CA bundle the server's certificate must chain to (None: the system's)."""
        cluster = self.config.cluster
        if cluster.certificate_auth_data:
            return base64.b64decode(cluster.certificate_auth_data)
        if cluster.certificate_auth:
            return Path(self.config.abs_file(cluster.certificate_auth)).read_bytes()
        return None

    @property
    def auth_kinds(self) -> tuple[str, ...]:
        """How this user authenticates: token-file, token, exec, basic, client-certificate."""
        user = self.config.user or User()
        kinds = (
            ("token-file", user.token_file is not None),
            ("token", user.token is not None and user.token_file is None),
            ("exec", user.exec is not None),
            ("basic", bool(user.username and user.password)),
            ("client-certificate", bool(user.client_cert or user.client_cert_data)),
        )
        return tuple(kind for kind, used in kinds if used)

    def __repr__(self) -> str:
        kinds = ", ".join(self.auth_kinds) or "anonymous"
        return f"Credentials(server={self.server!r}, auth={kinds})"

    def http_client(self, timeout: httpx.Timeout) -> httpx.AsyncClient:
        """An HTTP client that authenticates as this user and trusts this cluster's CA."""
        params = client_adapter.ConnectionParams(timeout=timeout, trust_env=False)
        try:
            client = client_adapter.AsyncClient(self.config, params)
        except (ConfigError, OSError) as error:
            raise KubeConfigError(f"unusable credentials {self!r}: {error!s}") from error
        user = self.config.user
        if user is not None and user.exec is not None and self.auth_kinds[0] == "exec":
            # lightkube's own exec auth refuses client.authentication.k8s.io/v1
            client.auth = ExecAuth(self._exec_plugin(user.exec))
        return client

    async def login_material(self) -> LoginMaterial:
        """The current token, certificate or password, reading files and running plugins now."""
        user = self.config.user or User()
        token: str | None = None
        certificate, key = (
            self._file_or_data(user.client_cert, user.client_cert_data),
            (self._file_or_data(user.client_key, user.client_key_data)),
        )
        expiration = None
        if user.token_file is not None:
            token = Path(self.config.abs_file(user.token_file)).read_text().strip()
        elif user.token is not None:
            token = user.token
        elif user.exec is not None:
            issued = await run_exec_plugin(self._exec_plugin(user.exec))
            token, expiration = issued.token, issued.expiration
            certificate = issued.certificate_pem or certificate
            key = issued.private_key_pem or key
        return LoginMaterial(
            server=self.server,
            ca_pem=self.ca_pem,
            insecure=self.config.cluster.insecure,
            token=token,
            certificate_pem=certificate,
            private_key_pem=key,
            username=user.username if user.password else None,
            password=user.password if user.username else None,
            expiration=expiration,
        )

    def _file_or_data(self, file: str | None, data: str | None) -> bytes | None:
        if data:
            return base64.b64decode(data)
        if file:
            return Path(self.config.abs_file(file)).read_bytes()
        return None

    def _exec_plugin(self, plugin: UserExec) -> UserExec:
        """The plugin, a relative command path resolved against the kubeconfig as kubectl does."""
        if "/" in plugin.command and not Path(plugin.command).is_absolute():
            return msgspec.structs.replace(
                plugin, command=str(self.config.abs_file(plugin.command))
            )
        return plugin


async def run_exec_plugin(plugin: UserExec) -> ExecCredential:
    """Run an exec credential plugin and read the ExecCredential it prints."""
    if plugin.apiVersion not in _EXEC_API_VERSIONS:
        raise KubeConfigError(f"exec plugin apiVersion {plugin.apiVersion!r} is not supported")
    env = dict(os.environ)
    env.update((variable.name, variable.value) for variable in plugin.env or [])
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": plugin.apiVersion, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        process = await asyncio.create_subprocess_exec(
            plugin.command,
            *(plugin.args or []),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        raise TransportError(f"exec plugin {plugin.command}: {error}") from error
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), _EXEC_TIMEOUT)
    except TimeoutError as error:
        process.kill()
        await process.wait()
        raise TransportError(f"exec plugin {plugin.command} timed out") from error
    if process.returncode != 0:
        detail = stderr.decode(errors="replace").strip()[-500:]
        raise TransportError(f"exec plugin {plugin.command} exited {process.returncode}: {detail}")
    return _exec_credential(plugin.command, stdout)


def _exec_credential(command: str, stdout: bytes) -> ExecCredential:
    try:
        status: dict[str, Any] = json.loads(stdout)["status"]
        certificate = status.get("clientCertificateData")
        key = status.get("clientKeyData")
        expires = status.get("expirationTimestamp")
        credential = ExecCredential(
            token=status.get("token"),
            certificate_pem=certificate.encode() if certificate else None,
            private_key_pem=key.encode() if key else None,
            expiration=parse_k8s_time(expires) if expires else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise TransportError(f"exec plugin {command} did not print an ExecCredential") from error
    if credential.token is None and credential.certificate_pem is None:
        raise TransportError(f"exec plugin {command} printed neither a token nor a certificate")
    return credential


class ExecAuth(httpx.Auth):
    """Bearer tokens from an exec plugin: run once, again when expired or refused (401)."""

    def __init__(self, plugin: UserExec, clock: Clock | None = None) -> None:
        self._plugin = plugin
        self._clock = clock or SystemClock()
        self._issued: ExecCredential | None = None

    def _fresh(self) -> bool:
        if self._issued is None:
            return False
        expiration = self._issued.expiration
        return expiration is None or expiration > self._clock.utcnow()

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Add the exec credential to the request; run the plugin again after a 401."""
        if self._fresh():
            assert self._issued is not None
            request.headers["Authorization"] = f"Bearer {self._issued.token}"
            response = yield request
            if response.status_code != 401:
                return
        self._issued = await run_exec_plugin(self._plugin)
        if self._issued.token is None:
            raise TransportError("exec plugin issued a client certificate: not supported here")
        request.headers["Authorization"] = f"Bearer {self._issued.token}"
        yield request


def write_kubeconfig(path: Path, credentials: Credentials, *, name: str = "dev-cluster") -> None:
    """Write a kubeconfig usable by kubectl, kopf and the pulumi kubernetes provider."""
    user = credentials.config.user or User()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": msgspec.to_builtins(credentials.config.cluster)}],
        "users": [{"name": f"{name}-user", "user": msgspec.to_builtins(user)}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-user"}}],
        "current-context": name,
    }
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
        yaml.safe_dump(config, handle)
    Path(handle.name).chmod(0o600)
    Path(handle.name).replace(path)
