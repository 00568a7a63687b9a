"""deploy/ha on a dev cluster: two operator pods over a PostgreSQL on the host, and who is at work.

    with ha_backend(cluster) as postgres:
        deployed = deploy_ha(cluster, directory, postgres)
        active = await active_replica(kube)         # the pod kopf lets work
        kill_operator_process(pod)                  # SIGKILL inside its container
        await pair_whole(kube)                       # 2 Ready pods, 2 live keep-alives

The state backend is Debian's PostgreSQL as a process on this machine,
listening on the dev cluster's host address, where pods reach the host; the
lease store is deploy/ha's trial Redis pod. Shared by tests/deploy and bench/.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from egress_proxies.clock import SystemClock
from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import CLUSTER_KOPF_PEERINGS, PODS
from egress_proxies.operator.peering import Peer, parse_peers
from egress_proxies.telemetry.metrics import STACK_OPERATIONS
from harness.cluster import ClusterHandle, container_pid, wait_for
from harness.deploy import (
    NAMESPACE,
    OPERATOR_LABEL,
    REPO,
    Deployed,
    deploy,
    kubectl,
    write_dev_overlay,
)
from harness.postgres import PostgresServer

PEERING = "egress-proxies"  # the operator's default --peering
LIFETIME_VARIABLE = "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS"


def component_peering_lifetime() -> int:
    """The peering lifetime deploy/components/ha sets: the bound on noticing a crash."""
    component = yaml.safe_load((REPO / "deploy/components/ha/kustomization.yaml").read_text())
    for patch in component["patches"]:
        for operation in yaml.safe_load(patch["patch"]):
            value = operation.get("value") if isinstance(operation, dict) else None
            if isinstance(value, dict) and value.get("name") == LIFETIME_VARIABLE:
                return int(value["value"])
    raise LookupError(f"deploy/components/ha sets no {LIFETIME_VARIABLE}")


PEERING_LIFETIME = component_peering_lifetime()


def cluster_block(cluster: ClusterHandle) -> str:
    """The dev cluster's /16 (pods, Services, the host's address): who may log in to the host."""
    return str(ipaddress.ip_network(f"{cluster.host_address}/16", strict=False))


@contextlib.contextmanager
def ha_backend(cluster: ClusterHandle) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL on the cluster's host address, open to its pods."""
    with PostgresServer(
        password=secrets.token_urlsafe(12),
        host=cluster.host_address,
        clients=cluster_block(cluster),
    ) as server:
        yield server


def create_state_backend_secret(kubeconfig: Path, url: str, credentials: dict[str, str]) -> None:
    """The `state-backend` Secret deploy/components/ha reads (fed through stdin, not argv)."""
    kubectl(kubeconfig, "apply", "-f", str(REPO / "deploy" / "base" / "namespace.yaml"))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "state-backend", "namespace": NAMESPACE},
        "stringData": {"EGRESS_PROXIES_STATE_BACKEND": url, **credentials},
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(secret))


def deploy_ha(cluster: ClusterHandle, directory: Path, postgres: PostgresServer) -> Deployed:
    """deploy/ha with the dev cluster's images on `postgres`, every Deployment Available."""
    create_state_backend_secret(cluster.kubeconfig, postgres.url, postgres.env)
    overlay = write_dev_overlay(directory, REPO / "deploy" / "ha")
    return deploy(cluster.kubeconfig, overlay)


async def operator_pods(kube: KubeClient) -> list[dict[str, Any]]:
    """The operator's pods not being deleted, oldest first."""
    listing = await kube.list(PODS.path(NAMESPACE), label_selector=OPERATOR_LABEL)
    pods = [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])


def ready(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def live_peers(kube: KubeClient) -> list[Peer]:
    """The peers whose keep-alives have not expired, highest priority first."""
    body = await kube.get(CLUSTER_KOPF_PEERINGS.path(name=PEERING))
    now = SystemClock().utcnow()
    peers = [p for p in parse_peers(body.get("status") or {}) if p.deadline > now]
    return sorted(peers, key=lambda p: -p.priority)


async def active_replica(kube: KubeClient) -> str:
    """The name of the pod at work: the live peer of the highest priority."""

    async def highest() -> str | None:
        peers = await live_peers(kube)
        return peers[0].identity if peers else None

    return await wait_for(highest, timeout=60, interval=0.5)


async def pair_whole(kube: KubeClient, timeout: float = 180) -> list[dict[str, Any]]:
    """Wait until two operator pods are Ready with a live keep-alive each; return them."""

    async def whole() -> list[dict[str, Any]] | None:
        pods = await operator_pods(kube)
        names = {p["metadata"]["name"] for p in pods if ready(p)}
        peers = {p.identity for p in await live_peers(kube)}
        return pods if len(names) == 2 and names <= peers else None

    return await wait_for(whole, timeout=timeout, interval=0.5)


async def stack_operations(pod: dict[str, Any]) -> float:
    """The pulumi operations the pod's operator ran, from its metrics port (9090)."""
    url = f"http://{pod['status']['podIP']}:9090/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{STACK_OPERATIONS}_total"
    )


def kill_operator_process(pod: dict[str, Any]) -> int:
    """SIGKILL the operator inside the pod's container (tini's child); its host pid.

    tini, the container's first process, then exits with it and the kubelet
    restarts the container in the same pod.
    """
    (status,) = pod["status"]["containerStatuses"]
    init = container_pid(status["containerID"])
    children = [
        int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _parent(stat) == init
    ]
    (operator,) = children
    os.kill(operator, signal.SIGKILL)
    return operator


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
