"""Shared fixtures: a session-scoped dev cluster, a namespace per test, a Pulumi backend."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from egress_proxies.devcluster import ApiError, Credentials, KubeClient, StateLayout, toolchain
from egress_proxies.devcluster.processes import Child, spawn

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterHandle:
    """A running dev cluster: where its state lives and how to reach it as admin."""

    layout: StateLayout
    credentials: Credentials

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (for kopf, kubectl and the pulumi kubernetes provider)."""
        return self.layout.kubeconfig


def start_supervised_cluster(state: Path, pid_dir: Path) -> tuple[Child, ClusterHandle]:
    """`dev-cluster up` as a child that dies with this process; returns once it is ready.

    Raises RuntimeError with the supervisor's log tail when it does not start.
    """
    layout = StateLayout(state)
    supervisor = spawn(
        "supervisor",
        [
            sys.executable,
            "-m",
            "egress_proxies.cli",
            "dev-cluster",
            "up",
            "--state-dir",
            str(state),
        ],
        pid_dir=pid_dir,
        log=state / "supervisor.log",
    )
    deadline = time.monotonic() + 180
    while not layout.ready.exists():
        if not supervisor.alive() or time.monotonic() > deadline:
            supervisor.stop()
            raise RuntimeError(f"the dev cluster did not start:\n{supervisor.log_tail(40)}")
        time.sleep(0.2)
    return supervisor, ClusterHandle(layout, Credentials.from_kubeconfig(layout.kubeconfig))


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """One dev cluster for the whole run, supervised by a child that dies with pytest."""
    state = tmp_path_factory.mktemp("dev-cluster")
    try:
        supervisor, handle = start_supervised_cluster(state, state / "test-pids")
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield handle
    finally:
        os.kill(supervisor.process.pid, signal.SIGTERM)
        try:
            supervisor.process.wait(timeout=60)
        finally:
            supervisor.stop()


@pytest.fixture
async def kube(dev_cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    """An admin API client for one test."""
    async with KubeClient(dev_cluster.credentials) as client:
        yield client


RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


async def create_namespace(
    kube: KubeClient, request: pytest.FixtureRequest, labels: dict[str, str] | None = None
) -> str:
    """A fresh namespace named after the test, once its default ServiceAccount exists."""
    stem = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"{stem}-{secrets.token_hex(3)}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    await wait_for(lambda: _exists(kube, f"/api/v1/namespaces/{name}/serviceaccounts/default"))
    return name


@pytest.fixture
async def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace with its default ServiceAccount; deleted (not awaited) afterwards."""
    name = await create_namespace(kube, request)
    yield name
    await kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
async def restricted_namespace(
    kube: KubeClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A fresh namespace whose pods must pass Pod Security "restricted" (API server admission)."""
    name = await create_namespace(kube, request, RESTRICTED)
    yield name
    await kube.delete(f"/api/v1/namespaces/{name}")


async def _exists(kube: KubeClient, path: str) -> bool:
    try:
        await kube.get(path)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


async def wait_for(
    check: Callable[[], Awaitable[T | None]], timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Poll an async predicate until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@dataclass(frozen=True)
class PulumiBackend:
    """A file:// Pulumi backend in a temp dir, and the environment the CLI needs for it."""

    url: str
    home: Path
    env: dict[str, str]


@pytest.fixture
def pulumi_backend(tmp_path: Path, dev_cluster: ClusterHandle) -> PulumiBackend:
    """An isolated backend + PULUMI_HOME; plugins come only from the tool bin dir on PATH."""
    state, home = tmp_path / "pulumi-state", tmp_path / "pulumi-home"
    state.mkdir()
    home.mkdir()
    env = {
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_HOME": str(home),
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
        "KUBECONFIG": str(dev_cluster.kubeconfig),
        "PATH": toolchain.environment_with_tools()["PATH"],
    }
    return PulumiBackend(url=env["PULUMI_BACKEND_URL"], home=home, env=env)
