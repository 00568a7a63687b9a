"""etcd + kube-apiserver + kube-controller-manager + kube-scheduler as local processes.

Token and client-certificate authentication (a static admin token; an admin
certificate in group system:masters) and RBAC authorization are on,
as in a real cluster. The controller manager runs the controllers a one-node
cluster needs: namespace deletion, service accounts and their tokens, the root
CA ConfigMap, ownerReference garbage collection, node lifecycle, endpoints,
Deployments and ReplicaSets.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from egress_proxies import toolchain
from egress_proxies.devcluster.network import NodeNetwork
from egress_proxies.devcluster.pki import ClusterPki, ensure_pki, ensure_token
from egress_proxies.devcluster.processes import Child, spawn
from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube import Credentials, KubeApiError, KubeClient, write_kubeconfig
from egress_proxies.kube.resources import SERVICE_ACCOUNTS

# Namespaces delete, namespaces get their ServiceAccounts and tokens, owner
# references are collected; the node's taints follow its conditions, Services
# get endpoints, Deployments get ReplicaSets and pods, and claims bind to
# volumes (and, protected while in use, are deleted once unused).
CONTROLLERS = (
    "namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher,garbagecollector,"
    "nodelifecycle,endpoint,endpointslice,endpointslicemirroring,deployment,replicaset,"
    "persistentvolume-binder,pvc-protection,pv-protection"
)
# Every request a ServiceAccount makes, without bodies: what a workload's RBAC
# is really used for (tests compare it with what the role grants).
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""

Progress = Callable[[str], None]


class StartupError(RuntimeError, EgressProxiesError):
    """A control-plane process failed to start or become ready."""


@dataclass(frozen=True)
class StateLayout:
    """Every file a dev cluster keeps in its state directory."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (a bearer token)."""
        return self.root / "kubeconfig"

    @property
    def kubeconfig_cert(self) -> Path:
        """The same admin, authenticated by a client certificate (group system:masters)."""
        return self.root / "kubeconfig-cert"

    @property
    def pki(self) -> Path:
        """Keys and certificates."""
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        """etcd's data directory."""
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        """One log file per process."""
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        """One pid file per running child."""
        return self.root / "pids"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: what ServiceAccounts did, at Metadata level."""
        return self.logs / "audit.log"

    @property
    def supervisor_pid(self) -> Path:
        """The pid of the process that owns the cluster."""
        return self.root / "supervisor.pid"

    @property
    def ready(self) -> Path:
        """Exists once the cluster is ready; removed on shutdown."""
        return self.root / "ready"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ControlPlane:
    """Starts, checks and stops the three control-plane processes."""

    def __init__(self, layout: StateLayout, progress: Progress, network: NodeNetwork) -> None:
        self.layout = layout
        self._progress = progress
        self._network = network
        self.api_port = 0
        # The same admin, at the address the node reaches the API server on.
        self.node_credentials: Credentials | None = None
        self._children: list[Child] = []
        self.credentials: Credentials | None = None

    def __repr__(self) -> str:
        children = ", ".join(repr(child) for child in self._children) or "not started"
        return f"<ControlPlane {self.layout.root} [{children}]>"

    async def start(self) -> Credentials:
        """Start etcd, the API server and the controller manager; return admin credentials."""
        extra_hosts = (
            self._network.host_address,
            self._network.api_service_ip,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
        pki = ensure_pki(self.layout.pki, extra_hosts)
        token = ensure_token(self.layout.pki / "admin.token")
        etcd_url = await self._start_etcd()
        api_port = self.api_port = free_port()
        server, ca_pem = f"https://127.0.0.1:{api_port}", pki.ca_cert.read_bytes()
        credentials = Credentials.from_token(server, ca_pem, token)
        write_kubeconfig(self.layout.kubeconfig, credentials)
        write_kubeconfig(
            self.layout.kubeconfig_cert,
            Credentials.from_client_certificate(
                server, ca_pem, pki.admin_cert.read_bytes(), pki.admin_key.read_bytes()
            ),
        )
        await self._start_apiserver(pki, etcd_url, api_port, token, credentials)
        self.credentials = credentials
        self.node_credentials = Credentials.from_token(
            f"https://{self._network.host_address}:{api_port}", ca_pem, token
        )
        await self._start_controller_manager(pki)
        await self._wait_for_default_service_account(credentials)
        return credentials

    @property
    def service_cidr(self) -> str:
        """The Service ClusterIP range, which the node's kube-proxy routes."""
        return self._network.service_cidr

    async def start_scheduler(self) -> None:
        """Start kube-scheduler: pods are scheduled as on any cluster."""
        self._progress("starting kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                str(toolchain.find("kube-scheduler")),
                f"--kubeconfig={self.layout.kubeconfig}",
                f"--authentication-kubeconfig={self.layout.kubeconfig}",
                f"--authorization-kubeconfig={self.layout.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )

    def children(self) -> list[Child]:
        """The processes started so far."""
        return list(self._children)

    def stop(self) -> None:
        """Stop the processes in reverse start order."""
        for child in reversed(self._children):
            child.stop()
        self._children.clear()

    def _spawn(self, name: str, argv: list[str]) -> Child:
        child = spawn(name, argv, pid_dir=self.layout.pids, log=self.layout.logs / f"{name}.log")
        self._children.append(child)
        return child

    async def _start_etcd(self) -> str:
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._progress("starting etcd")
        child = self._spawn(
            "etcd",
            [
                str(toolchain.find("etcd")),
                "--name=dev",
                f"--data-dir={self.layout.etcd_data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=dev={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        await _wait_until(child, lambda: _http_ok(f"{client_url}/health"), "etcd", 60)
        return client_url

    async def _start_apiserver(
        self, pki: ClusterPki, etcd_url: str, port: int, token: str, admin: Credentials
    ) -> None:
        token_file = self.layout.pki / "tokens.csv"
        token_file.write_text(f'{token},dev-admin,dev-admin,"system:masters"\n')
        token_file.chmod(0o600)
        # The node reaches the API server at the host's end of its veth
        # (created after the API server starts), the host at 127.0.0.1.
        bind = [
            "--bind-address=0.0.0.0",
            f"--advertise-address={self._network.host_address}",
            f"--kubelet-client-certificate={pki.admin_cert}",
            f"--kubelet-client-key={pki.admin_key}",
            "--kubelet-preferred-address-types=InternalIP",
        ]
        audit_policy = self.layout.pki / "audit-policy.yaml"
        audit_policy.write_text(AUDIT_POLICY)
        self._progress(f"starting kube-apiserver on port {port}")
        child = self._spawn(
            "kube-apiserver",
            [
                str(toolchain.find("kube-apiserver")),
                f"--etcd-servers={etcd_url}",
                *bind,
                f"--secure-port={port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={self.service_cidr}",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.layout.audit_log}",
                "--audit-log-maxsize=100",
                "--audit-log-maxbackup=1",
                "--profiling=false",
                "--v=1",
            ],
        )
        probe = KubeClient(admin)
        try:
            await _wait_until(child, lambda: _readyz(probe), "kube-apiserver", 120)
        finally:
            await probe.close()

    async def _start_controller_manager(self, pki: ClusterPki) -> None:
        self._progress("starting kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                str(toolchain.find("kube-controller-manager")),
                f"--kubeconfig={self.layout.kubeconfig}",
                f"--authentication-kubeconfig={self.layout.kubeconfig}",
                f"--authorization-kubeconfig={self.layout.kubeconfig}",
                f"--controllers={CONTROLLERS}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )

    async def _wait_for_default_service_account(self, credentials: Credentials) -> None:
        child = self._children[-1]
        async with KubeClient(credentials) as client:

            async def exists() -> bool:
                try:
                    await client.get(SERVICE_ACCOUNTS.path("default", "default"))
                except KubeApiError:
                    return False
                return True

            await _wait_until(child, exists, "kube-controller-manager", 60)


async def _readyz(client: KubeClient) -> bool:
    try:
        await client.get_text("/readyz")
    except (KubeApiError, OSError):  # TransportError is an OSError
        return False
    return True


async def _http_ok(url: str) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _wait_until(
    child: Child, check: Callable[[], Awaitable[bool]], what: str, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise StartupError(
                f"{what} exited with code {child.process.returncode}; its log ({child.log}) ends:\n"
                f"{child.log_tail()}"
            )
        if await check():
            return
        await asyncio.sleep(0.2)
    raise StartupError(
        f"{what} was not ready after {timeout:.0f}s; "
        f"its log ({child.log}) ends:\n{child.log_tail()}"
    )
