"""Shared fixtures: a session-scoped dev cluster, a namespace per test, a Pulumi backend,
origins to probe through a proxy, and the operator as a process."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import secrets
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml
from xdist.remote import Producer
from xdist.scheduler import Scheduling

from egress_proxies import toolchain
from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeClient, NotFoundError
from egress_proxies.kube.resources import NAMESPACES, SERVICE_ACCOUNTS
from egress_proxies.settings import RunSettings
from harness import workers
from harness.cluster import ClusterHandle, start_supervised_cluster, wait_for
from harness.operator import OperatorProcess, new_operator
from harness.origins import Origin, serve_origin, use_origin_host
from harness.postgres import PostgresServer
from harness.redis import RedisServer
from harness.s3 import S3Server

__all__ = ["ClusterHandle", "start_supervised_cluster", "wait_for"]

# Tests are grouped by concept (tests/proxies, tests/pools, ...), and each
# module names its layer, by how much it starts, with `pytestmark`: unit
# (nothing), client (a real discovery API for the crawler client), integration
# (real processes on loopback: squid, the dev cluster, pulumi), e2e (the
# operator as a process). `make test` runs them all; `pytest -m unit` and
# `pytest -m "not e2e"` are the quick loops.
LAYERS = ("unit", "client", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test module that names no layer, or more than one."""
    for item in items:
        layers = {mark.name for mark in item.iter_markers() if mark.name in LAYERS}
        if len(layers) != 1:
            raise pytest.UsageError(
                f"{item.path}: a test module names exactly one layer with "
                f"`pytestmark = pytest.mark.<layer>` (one of {', '.join(LAYERS)}); "
                f"found {sorted(layers) or 'none'}"
            )
    workers.record_cluster_modules(config, items)


# `make test` runs the suite in pytest-xdist workers, each with a dev
# cluster of its own and a share of its modules (harness/workers.py).
def pytest_configure(config: pytest.Config) -> None:
    workers.start_controller(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    workers.stop_controller(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    return workers.make_scheduler(config, log)


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
    """A fresh namespace with its default ServiceAccount; deleted (not awaited) afterwards.

    An e2e test's enforces Pod Security "restricted": a regression is rejected.
    """
    restricted = request.node.get_closest_marker("e2e") is not None
    name = await create_namespace(kube, request, RESTRICTED if restricted else None)
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


# --- processes the integration tests serve beside the product --------------------------------


@pytest.fixture
def offline_operator_settings(tmp_path: Path) -> RunSettings:
    """Settings for an operator that is built, or run with kopf stood in, but reaches no cluster.

    Its API server address is one where nothing listens. The settings are the given
    values over the defaults: no variable of the test's environment reaches them.
    """
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {
        "server": "https://127.0.0.1:1",
        "certificate-authority-data": base64.b64encode(b"unused").decode(),
    }
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "dev",
                "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}],
                "clusters": [{"name": "dev", "cluster": cluster}],
                "users": [{"name": "dev", "user": {"token": "not-used"}}],
            }
        )
    )
    return RunSettings.model_validate(
        {"state_dir": tmp_path / "state", "kubeconfig": kubeconfig, "standalone": True}
    )


@pytest.fixture(scope="module")
async def http_origin() -> AsyncIterator[Origin]:
    """A plain HTTP origin, one per test module."""
    async with serve_origin() as origin:
        yield origin


@pytest.fixture(scope="module")
async def https_origin(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Origin]:
    """An HTTPS origin with a CA of its own (`client_ssl` trusts it), one per test module."""
    async with serve_origin(tmp_path_factory.mktemp("origin-tls")) as origin:
        yield origin


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def clock() -> ManualClock:
    """Virtual time from the real wall time, which google-auth stamps a token's expiry with."""
    return ManualClock(wall=datetime.datetime.now(datetime.UTC))


# --- the operator as a process (e2e) ------------------------------------------------------------


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
