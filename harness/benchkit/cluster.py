"""The dev cluster a benchmark runs on: a new one, or one already running (a test session's)."""

from __future__ import annotations

import argparse
import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from egress_proxies.devcluster import KubeClient
from egress_proxies.devcluster.cluster import stop as dev_cluster_down
from egress_proxies.devcluster.cluster import supervisor_pid
from egress_proxies.kube.resources import NAMESPACES, SERVICE_ACCOUNTS
from harness.cluster import ClusterHandle, attach_cluster, start_supervised_cluster, wait_for
from harness.operator import proxy_path
from harness.origins import use_origin_host

STOP_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class BenchCluster:
    """A running dev cluster and its supervisor's pid (the root of its processes)."""

    handle: ClusterHandle
    supervisor: int


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """`--cluster`, for every benchmark that runs on a dev cluster."""
    parser.add_argument(
        "--cluster",
        type=Path,
        metavar="STATE_DIR",
        help="run on the dev cluster already running from this state dir instead of a new one",
    )


@contextlib.contextmanager
def dev_cluster(args: argparse.Namespace, state: Path) -> Iterator[BenchCluster]:
    """The cluster `--cluster` names, or a new one under `state`, stopped on exit.

    Origins listen where its pods reach this machine.
    """
    if args.cluster is not None:
        yield _attached(attach_cluster(args.cluster))
        return
    supervisor, handle = start_supervised_cluster(state, state / "bench-pids")
    try:
        yield _attached(handle)
    finally:
        # `dev-cluster down`: a large fleet can outlast the grace period; then the
        # supervisor is killed (the kernel takes its children along) and what its pid
        # files still name is reaped.
        dev_cluster_down(state, timeout=STOP_GRACE_SECONDS)
        supervisor.stop()


def _attached(handle: ClusterHandle) -> BenchCluster:
    pid = supervisor_pid(handle.layout)
    if pid is None:
        raise RuntimeError(f"no dev cluster supervisor runs from {handle.layout.root}")
    use_origin_host(handle.host_address)
    return BenchCluster(handle, pid)


async def create_namespace(kube: KubeClient, stem: str) -> str:
    """A fresh namespace, once its default ServiceAccount exists."""
    name = f"{stem}-{secrets.token_hex(3)}"
    await kube.create(NAMESPACES.path(), {"metadata": {"name": name}})

    async def has_account() -> bool:
        listing = await kube.get(SERVICE_ACCOUNTS.path(name))
        return any(item["metadata"]["name"] == "default" for item in listing["items"])

    await wait_for(has_account, timeout=60)
    return name


async def delete_namespace(kube: KubeClient, namespace: str) -> None:
    """Strip the Proxies' finalizers (their operator is stopped) and delete the namespace.

    On a shared cluster this takes the benchmark's pods away with it.
    """
    for item in (await kube.get(proxy_path(namespace)))["items"]:
        if item["metadata"].get("finalizers"):
            await kube.patch(
                proxy_path(namespace, item["metadata"]["name"]), {"metadata": {"finalizers": None}}
            )
    await kube.delete(NAMESPACES.path(name=namespace))
