"""Shared fixtures: a session-scoped dev cluster, a namespace per test, a Pulumi backend."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from egress_proxies import toolchain
from egress_proxies.kube import KubeClient, NotFoundError
from egress_proxies.kube.resources import NAMESPACES, SERVICE_ACCOUNTS
from harness.cluster import ClusterHandle, start_supervised_cluster, wait_for
from harness.origins import use_origin_host
from harness.postgres import PostgresServer
from harness.redis import RedisServer
from harness.s3 import S3Server

__all__ = ["ClusterHandle", "start_supervised_cluster", "wait_for"]

# Tests are grouped by how much they start: unit (nothing), integration (real
# processes on loopback: squid, the dev cluster, pulumi), e2e (the operator as a
# process). `make test` runs them all; `pytest -m "not e2e"` is the quick loop.
_KINDS = ("unit", "integration", "e2e", "client")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the kind of its directory (tests/<kind>/...)."""
    for item in items:
        for kind in _KINDS:
            if f"/tests/{kind}/" in str(item.path):
                item.add_marker(getattr(pytest.mark, kind))


# How long a test's own tasks get to finish after its fixtures are torn down.
_LEFTOVER_GRACE_SECONDS = 2.0


@pytest.fixture(autouse=True)
async def no_leftover_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks of its own running (opt out: `leaves_tasks`).

    A task is the test's own if it started after the test's setup began: tasks
    of session-scoped fixtures are older. The one exception is the connection
    handler an aiohttp server starts per keep-alive connection: it belongs to
    the server (often a session fixture) and ends when the client lets go.
    Being torn down last, this runs after the test's other fixtures closed.
    """
    before = asyncio.all_tasks()
    yield
    if request.node.get_closest_marker("leaves_tasks"):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LEFTOVER_GRACE_SECONDS
    while True:
        leftover = [
            task
            for task in asyncio.all_tasks() - before
            if task is not asyncio.current_task() and not _serves_a_connection(task)
        ]
        if not leftover or loop.time() >= deadline:
            break
        await asyncio.sleep(0.05)
    for task in leftover:
        task.cancel()
    if leftover:
        pytest.fail(f"the test left {len(leftover)} task(s) running: {leftover}")


def _serves_a_connection(task: asyncio.Task[object]) -> bool:
    """An aiohttp server's per-connection handler, which outlives a test by keep-alive."""
    name = getattr(task.get_coro(), "__qualname__", "")
    return isinstance(name, str) and name.startswith("RequestHandler.")


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """One dev cluster for the whole run, supervised by a child that dies with pytest.

    Origins listen where its pods reach this machine.
    """
    with supervised_cluster(tmp_path_factory) as handle:
        use_origin_host(handle.host_address)
        yield handle


@contextlib.contextmanager
def supervised_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A dev cluster of its own, for the `with` block."""
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
            # containerd's images and snapshots (2 GB with the operator image);
            # the logs stay for a failed test's report.
            shutil.rmtree(state / "node" / "containerd", ignore_errors=True)


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
    await kube.create(NAMESPACES.path(), {"metadata": {"name": name, "labels": labels or {}}})
    await wait_for(lambda: _exists(kube, SERVICE_ACCOUNTS.path(name, "default")))
    return name


@pytest.fixture
async def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace with its default ServiceAccount; deleted (not awaited) afterwards."""
    name = await create_namespace(kube, request)
    yield name
    await kube.delete(NAMESPACES.path(name=name))


@pytest.fixture
async def restricted_namespace(
    kube: KubeClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A fresh namespace whose pods must pass Pod Security "restricted" (API server admission)."""
    name = await create_namespace(kube, request, RESTRICTED)
    yield name
    await kube.delete(NAMESPACES.path(name=name))


async def _exists(kube: KubeClient, path: str) -> bool:
    try:
        await kube.get(path)
    except NotFoundError:
        return False
    return True


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


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server (with a password) for the run; tests keep apart by key prefix."""
    with RedisServer(password=secrets.token_urlsafe(12)) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL for the run; tests keep apart by table (`?table=` of the URL)."""
    with PostgresServer(password=secrets.token_urlsafe(12)) as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One real S3-compatible server (versitygw) for the run; tests keep apart by bucket."""
    with S3Server(secret_key=secrets.token_urlsafe(16)) as server:
        yield server


@pytest.fixture
def redis_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own, so tests sharing the server never see each other."""
    return f"test-{request.node.name[:40]}-{secrets.token_hex(4)}"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, for tests that stop, freeze or restart it."""
    with RedisServer(password=secrets.token_urlsafe(12)) as server:
        yield server
