"""After a crash the active replica clears a stack's lock only when its holder is provably
gone: its pod no longer exists, or its keep-alive in the peering object expired and it was
the only operator on its host (real API server, real PostgreSQL backend), or it ran on this
host and its pulumi process is gone. A live holder's lock is never touched."""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from egress_proxies.clock import ManualClock, SystemClock
from egress_proxies.gc.sweeper import always_sweep
from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import PODS
from egress_proxies.operator.peering import Peering, peering_paths
from egress_proxies.operator.stale_locks import StaleLockSweeper
from egress_proxies.stacks.backends import StateBackend, open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.postgres import PostgresServer

pytestmark = pytest.mark.integration

LIVE_POD = "operator-live-replica"
GONE_POD = "operator-gone-replica"


@pytest.fixture
def table_backend(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StateBackend, str]]:
    for name, value in postgres_server.env.items():
        monkeypatch.setenv(name, value)
    table = f"locks_{secrets.token_hex(4)}"
    url = parse_backend_url(f"{postgres_server.url}&table={table}")
    backend = open_backend(url, postgres_server.run_dir, PROJECT)
    backend.check()
    yield backend, table


@pytest.fixture
def local_pulumi() -> Iterator[tuple[int, int]]:
    """The pid of a process that has exited, and of a live one that runs as `pulumi`."""
    dead = subprocess.Popen(["true"])  # noqa: S607
    dead.wait()
    live = subprocess.Popen(["bash", "-c", "exec -a pulumi sleep 300"])  # noqa: S607
    try:
        yield dead.pid, live.pid
    finally:
        live.kill()
        live.wait()


def put_lock(
    server: PostgresServer,
    table: str,
    stack: str,
    pid: int,
    host: str,
    taken: str = "2026-01-01T00:00:00Z",
) -> None:
    owner = {"pid": pid, "username": "x", "hostname": host, "timestamp": taken}
    data = base64.b64encode(json.dumps(owner).encode()).decode()
    key = f"postgres/.pulumi/locks/organization/{PROJECT}/{stack}/{secrets.token_hex(4)}.json"
    with psycopg.connect(
        server.url.replace("postgres://", "postgresql://"), password=server.password
    ) as connection:
        connection.execute(
            f"INSERT INTO {table} (key, data) VALUES (%s, %s)",  # noqa: S608
            (key, json.dumps({"data": data})),
        )


async def test_only_locks_of_gone_pods_and_dead_local_processes_are_cleared(
    kube: KubeClient,
    namespace: str,
    postgres_server: PostgresServer,
    table_backend: tuple[StateBackend, str],
    local_pulumi: tuple[int, int],
) -> None:
    backend, table = table_backend
    # A replica's pod that exists (never scheduled: existing is what counts).
    await kube.create(
        PODS.path(namespace),
        {
            "metadata": {"name": LIVE_POD},
            "spec": {
                "nodeSelector": {"egress-proxies.test/none": "none"},
                "containers": [{"name": "operator", "image": "egress-proxies:none"}],
            },
        },
    )
    dead_pid, live_pid = local_pulumi
    put_lock(postgres_server, table, "ns.live-pod", 4242, LIVE_POD)
    put_lock(postgres_server, table, "ns.gone-pod", 4242, GONE_POD)
    put_lock(postgres_server, table, "ns.local-dead", dead_pid, socket.gethostname())
    put_lock(postgres_server, table, "ns.local-live", live_pid, socket.gethostname())

    async def standby() -> str:
        return "another peer is active"

    clock = SystemClock()
    assert await StaleLockSweeper(backend, kube, standby, clock, namespace=namespace).round() == []
    assert backend.locked("ns.gone-pod"), "a standby clears nothing"

    sweeper = StaleLockSweeper(backend, kube, always_sweep, clock, namespace=namespace)
    cleared = await sweeper.round()

    assert sorted(cleared) == ["ns.gone-pod", "ns.local-dead"]
    assert backend.locked("ns.live-pod"), "a holder whose pod exists keeps its lock"
    assert backend.locked("ns.local-live"), "a live pulumi on this host keeps its lock"
    assert not backend.locked("ns.gone-pod")
    assert not backend.locked("ns.local-dead")
    assert await sweeper.round() == [], "a second round finds nothing more"


W0 = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


def keepalive(seconds_before_w0: float, lifetime: int = 60) -> dict[str, Any]:
    lastseen = W0 - datetime.timedelta(seconds=seconds_before_w0)
    return {"priority": 0, "lifetime": lifetime, "lastseen": lastseen.isoformat()}


def stamp(seconds_after_w0: float) -> str:
    return (W0 + datetime.timedelta(seconds=seconds_after_w0)).isoformat().replace("+00:00", "Z")


async def test_a_host_whose_only_operator_stopped_renewing_its_keepalive_loses_its_locks(
    kube: KubeClient,
    namespace: str,
    postgres_server: PostgresServer,
    table_backend: tuple[StateBackend, str],
) -> None:
    """Replicas as host processes: no pods to look up, only the peering object's keep-alives."""
    backend, table = table_backend
    peering = Peering(kube, "locks", 0, "op@this-host/1", (namespace,))
    await peering.ensure()
    (path,) = peering_paths("locks", (namespace,))
    await kube.patch(
        path,
        {
            "status": {
                "op@ghost/1": keepalive(10),  # renews, then dies: expires at W0+50
                "op@late/1": keepalive(10),  # the same, but its host's lock is newer
                "op@busy/1": keepalive(100),  # expired already (W0-40) ...
                "op@busy/2": keepalive(10),  # ... but another operator there lives on
                "alive-pod": keepalive(10),  # a POD_ID identity: the pod's hostname
            }
        },
    )
    put_lock(postgres_server, table, "ns.expired", 4242, "ghost", taken=stamp(-20))
    put_lock(postgres_server, table, "ns.after-expiry", 4242, "late", taken=stamp(55))
    put_lock(postgres_server, table, "ns.shared-host", 4242, "busy", taken=stamp(-50))
    put_lock(postgres_server, table, "ns.live", 4242, "alive-pod", taken=stamp(-20))
    put_lock(postgres_server, table, "ns.unknown", 4242, "laptop", taken=stamp(-20))

    active: list[str | None] = ["standing by"]

    async def gate() -> str | None:
        return active[0]

    clock = ManualClock(wall=W0)
    sweeper = StaleLockSweeper(backend, kube, gate, clock, peers=peering.peers)
    assert await sweeper.round() == [], "a standby clears nothing, but remembers the keep-alives"

    # kopf deletes expired keep-alives moments after they expire; the live ones renew.
    await kube.patch(
        path,
        {
            "status": {
                "op@ghost/1": None,
                "op@late/1": None,
                "op@busy/2": keepalive(-60),
                "alive-pod": keepalive(-60),
            }
        },
    )
    clock.advance(70)
    active[0] = None
    restarted = StaleLockSweeper(backend, kube, gate, clock, peers=peering.peers)
    assert await restarted.round() == [], "a replica that never saw a holder cannot prove it gone"

    assert await sweeper.round() == ["ns.expired"]
    assert not backend.locked("ns.expired")
    for kept in ("ns.after-expiry", "ns.shared-host", "ns.live", "ns.unknown"):
        assert backend.locked(kept), kept
    assert await sweeper.round() == [], "a second round finds nothing more"
