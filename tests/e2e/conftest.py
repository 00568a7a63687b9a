"""Running the real operator (`egress-proxies run`) against the dev cluster, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from harness.cluster import ClusterHandle
from harness.operator import (
    OperatorProcess,
    counting_pulumi_root,
    descendants,
    managed_proxy,
    new_operator,
    proxy_credentials,
    proxy_path,
    wait_for_condition,
    wait_gone,
)

__all__ = [
    "OperatorProcess",
    "counting_pulumi_root",
    "descendants",
    "managed_proxy",
    "new_operator",
    "proxy_credentials",
    "proxy_path",
    "wait_for_condition",
    "wait_gone",
]


@pytest.fixture
def namespace(restricted_namespace: str) -> str:
    """Every e2e namespace enforces Pod Security "restricted": a regression is rejected."""
    return restricted_namespace


@pytest.fixture
def operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """The operator watching the test's namespace, as the dev cluster's admin.

    `@pytest.mark.operator_env(NAME="value")` adds environment for one test.
    """
    marker = request.node.get_closest_marker("operator_env")
    process = new_operator(
        dev_cluster.kubeconfig, namespace, tmp_path, marker.kwargs if marker else None
    )
    process.start()
    yield process
    process.stop()


PodRow = tuple[str, str, str, str]
PodLister = Callable[[], Awaitable[list[PodRow]]]


@pytest.fixture
async def squid_pods(kube: KubeClient, namespace: str) -> AsyncIterator[PodLister]:
    """A function listing the namespace's pods as (name, uid, podIP, phase)."""

    async def pods() -> list[tuple[str, str, str, str]]:
        listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
        return [
            (
                p["metadata"]["name"],
                p["metadata"]["uid"],
                (p.get("status") or {}).get("podIP", ""),
                (p.get("status") or {}).get("phase", ""),
            )
            for p in listing["items"]
        ]

    yield pods
