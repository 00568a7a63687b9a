"""ProxyPools end to end: real operator, real squid pods, real crawler traffic through the API.

One namespace, one operator and one origin serve every test of this module
(each test has its own pool and selector), so the Proxy provisioning cost is
paid for pools, not for operators.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies import toolchain
from egress_proxies.events import SERIES_INTERVAL
from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.model import GROUP, VERSION
from egress_proxies.pool_model import POOL_PLURAL
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL, TEMPLATE_HASH_LABEL
from harness.cluster import ClusterHandle
from harness.operator import OperatorProcess, new_operator, proxy_path
from harness.operator_metrics import converged_rounds
from harness.origins import Origin, serve_origin
from tests.conftest import RESTRICTED, wait_for

pytestmark = pytest.mark.e2e


class Env:
    """What every test of the module shares."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        operator: OperatorProcess,
        origin: Origin,
        kubeconfig: Path,
        session: aiohttp.ClientSession,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.operator = operator
        self.origin = origin
        self.kubeconfig = kubeconfig
        self.session = session
        self._auth = {"Authorization": f"Bearer {operator.discovery_token}"}

    def pools(self, name: str = "") -> str:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{POOL_PLURAL}"
        return f"{base}/{name}" if name else base

    def pool_body(self, name: str, replicas: int, **spec: Any) -> dict[str, Any]:
        health = {
            "url": self.origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 1,
            "timeoutSeconds": 1,
            "failureThreshold": 2,
        }
        template = {
            "metadata": {"labels": {"team": "crawl"}},
            "spec": {
                "provider": "kubernetes",
                "kubernetes": {},
                "attributes": {"pool": name},
                "healthCheck": health,
            },
        }
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyPool",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "template": template, **spec},
        }

    async def pool(self, name: str) -> dict[str, Any]:
        return await self.kube.get(self.pools(name))

    async def rounds_pass(self, pool: str, count: int) -> None:
        """Wait until the pool controller has converged `pool` `count` more times."""
        key = f"{self.namespace}/{pool}"
        start = await converged_rounds(self.operator, key)

        async def passed() -> bool:
            return await converged_rounds(self.operator, key) >= start + count

        await wait_for(passed, timeout=60, interval=0.2)

    async def members(self, pool: str) -> list[dict[str, Any]]:
        listing = await self.kube.get(proxy_path(self.namespace))
        return [
            p
            for p in listing["items"]
            if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        ]

    async def wait_status(self, name: str, timeout: float = 240, **wanted: int) -> dict[str, Any]:
        async def matches() -> dict[str, Any] | None:
            body = await self.pool(name)
            status = body.get("status") or {}
            if all(status.get(key) == value for key, value in wanted.items()):
                members = [m for m in await self.members(name) if not _going(m)]
                if len(members) == wanted.get("replicas", len(members)):
                    return body
            return None

        return await wait_for(matches, timeout=timeout, interval=0.5)

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(
            [
                str(toolchain.bin_dir() / "kubectl"),
                f"--kubeconfig={self.kubeconfig}",
                f"--namespace={self.namespace}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def lease(self, pool: str, ttl: int = 120) -> tuple[int, dict[str, Any]]:
        body = {"selector": {"pool": pool}, "ttlSeconds": ttl, "target": "127.0.0.1"}
        async with self.session.post(
            f"{self.operator.discovery_url}/v1/leases", json=body, headers=self._auth
        ) as response:
            return response.status, await response.json()

    async def report(self, lease_id: str, result: str, target: str) -> int:
        async with self.session.post(
            f"{self.operator.discovery_url}/v1/leases/{lease_id}/report",
            json={"result": result, "target": target},
            headers=self._auth,
        ) as response:
            return response.status

    async def release(self, lease_id: str) -> None:
        async with self.session.delete(
            f"{self.operator.discovery_url}/v1/leases/{lease_id}", headers=self._auth
        ) as response:
            assert response.status == 204

    async def listed(self, pool: str) -> dict[str, dict[str, Any]]:
        async with self.session.get(
            f"{self.operator.discovery_url}/v1/proxies",
            params={"attr.pool": pool},
            headers=self._auth,
        ) as response:
            assert response.status == 200
            return {p["name"]: p for p in (await response.json())["proxies"]}

    async def events(self, pool: str) -> list[dict[str, Any]]:
        listing = await self.kube.get(f"/api/v1/namespaces/{self.namespace}/events")
        return [
            e
            for e in listing["items"]
            if e["involvedObject"].get("kind") == "ProxyPool"
            and e["involvedObject"]["name"] == pool
        ]


def _going(proxy: dict[str, Any]) -> bool:
    meta = proxy["metadata"]
    return bool(
        meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(DRAINING_ANNOTATION)
    )


def _ready(proxy: dict[str, Any]) -> bool:
    return (proxy.get("status") or {}).get("phase") == "Ready" and not _going(proxy)


@pytest.fixture(scope="module")
def pool_operator(
    dev_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, OperatorProcess]]:
    """A restricted namespace and the operator watching it, for the whole module."""
    namespace = f"pools-{int(time.time()) % 100000}"
    subprocess.run(
        [
            str(toolchain.bin_dir() / "kubectl"),
            f"--kubeconfig={dev_cluster.kubeconfig}",
            "create",
            "namespace",
            namespace,
        ],
        check=True,
        capture_output=True,
    )
    for key, value in RESTRICTED.items():
        subprocess.run(
            [
                str(toolchain.bin_dir() / "kubectl"),
                f"--kubeconfig={dev_cluster.kubeconfig}",
                "label",
                "namespace",
                namespace,
                f"{key}={value}",
            ],
            check=True,
            capture_output=True,
        )
    process = new_operator(
        dev_cluster.kubeconfig,
        namespace,
        tmp_path_factory.mktemp("pool-operator"),
        {"EGRESS_PROXIES_LEASE_MAX_TTL_SECONDS": "600"},
    )
    process.start()
    yield namespace, process
    process.stop()
    subprocess.run(
        [
            str(toolchain.bin_dir() / "kubectl"),
            f"--kubeconfig={dev_cluster.kubeconfig}",
            "delete",
            "namespace",
            namespace,
            "--wait=false",
        ],
        check=False,
        capture_output=True,
    )


@pytest.fixture
async def env(
    dev_cluster: ClusterHandle, kube: KubeClient, pool_operator: tuple[str, OperatorProcess]
) -> AsyncIterator[Env]:
    namespace, operator = pool_operator
    await wait_for(lambda: _exists(kube, f"/api/v1/namespaces/{namespace}/serviceaccounts/default"))
    async with serve_origin() as origin, aiohttp.ClientSession() as session:
        yield Env(kube, namespace, operator, origin, dev_cluster.kubeconfig, session)


async def _exists(kube: KubeClient, path: str) -> bool:
    try:
        await kube.get(path)
    except KubeApiError:
        return False
    return True


def _row(env: Env, name: str) -> list[str]:
    output = env.kubectl("get", "pxp", name, "--no-headers")
    print(output.strip())
    return output.split()


async def test_pool_becomes_available_and_follows_kubectl_scale(env: Env) -> None:
    await env.kube.create(env.pools(), env.pool_body("basic", 3))
    body = await env.wait_status("basic", replicas=3, readyReplicas=3)
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert body["status"]["selector"] == f"{POOL_LABEL}=basic"
    print(env.kubectl("get", "pxp", "basic"))
    assert _row(env, "basic")[1:6] == ["3", "3", "3", "0", "0"]
    members = await env.members("basic")
    assert all(m["metadata"]["name"].startswith("basic-") for m in members)
    assert all(m["metadata"]["ownerReferences"][0]["kind"] == "ProxyPool" for m in members)
    assert all(m["metadata"]["labels"]["team"] == "crawl" for m in members)

    env.kubectl("scale", "pxp/basic", "--replicas=5")
    await env.wait_status("basic", replicas=5, readyReplicas=5)
    assert _row(env, "basic")[1:6] == ["5", "5", "5", "0", "0"]
    scale = await env.kube.get(env.pools("basic") + "/scale")
    assert scale["spec"]["replicas"] == 5 and scale["status"]["replicas"] == 5
    assert scale["status"]["selector"] == f"{POOL_LABEL}=basic"

    env.kubectl("scale", "pxp/basic", "--replicas=2")
    await env.wait_status("basic", replicas=2, readyReplicas=2, drainingReplicas=0)

    async def two_left() -> bool:
        return len(await env.members("basic")) == 2

    await wait_for(two_left, timeout=120, interval=0.5)
    assert _row(env, "basic")[1:6] == ["2", "2", "2", "0", "0"]
    await env.kube.delete(env.pools("basic"))


async def test_scale_down_removes_the_leased_proxy_last_and_only_after_release(
    env: Env,
) -> None:
    await env.kube.create(env.pools(), env.pool_body("drain", 3))
    await env.wait_status("drain", replicas=3, readyReplicas=3)

    async def granted() -> dict[str, Any] | None:
        status, body = await env.lease("drain")
        return body if status == 201 else None

    lease = await wait_for(granted, timeout=60)
    leased = lease["proxy"]["name"]
    start = time.monotonic()
    timeline: list[tuple[float, str]] = []
    seen: dict[str, str] = {}

    async def watch(until: asyncio.Event) -> None:
        while True:
            # Set means "all gone": one more poll records that, then stop.
            last = until.is_set()
            current = {m["metadata"]["name"]: m for m in await env.members("drain")}
            for name in set(seen) | set(current):
                state = (
                    "gone"
                    if name not in current
                    else "draining"
                    if _going(current[name])
                    else "serving"
                )
                if seen.get(name) != state:
                    seen[name] = state
                    timeline.append((time.monotonic() - start, f"{name} {state}"))
            if last:
                return
            await asyncio.sleep(0.2)

    done = asyncio.Event()
    watcher = asyncio.create_task(watch(done))
    env.kubectl("scale", "pxp/drain", "--replicas=0")

    async def idle_ones_gone() -> bool:
        return [m["metadata"]["name"] for m in await env.members("drain")] == [leased]

    await wait_for(idle_ones_gone, timeout=120, interval=0.3)
    listed = await env.listed("drain")
    assert listed[leased]["draining"] is True
    status, refused = await env.lease("drain")
    assert status == 409 and refused["considered"] == 1
    # It stays while the lease is held: rounds of the pool controller pass and keep it.
    await env.rounds_pass("drain", 3)
    assert [m["metadata"]["name"] for m in await env.members("drain")] == [leased]
    timeline.append((time.monotonic() - start, f"lease on {leased} released"))
    await env.release(lease["leaseId"])

    async def all_gone() -> bool:
        return not await env.members("drain")

    await wait_for(all_gone, timeout=120, interval=0.3)
    done.set()
    await watcher
    for moment, what in timeline:
        print(f"{moment:7.2f}s  {what}")
    # The order itself is asserted above (only the leased one left, for 5 s, until
    # the release); the timeline shows it. One poll can see several go at once.
    gone_at = {what.split()[0]: t for t, what in timeline if what.endswith(" gone")}
    released_at = next(t for t, what in timeline if what.startswith("lease on"))
    assert gone_at[leased] > released_at
    assert all(t < released_at for name, t in gone_at.items() if name != leased)
    await env.kube.delete(env.pools("drain"))


async def test_banned_proxy_is_rotated_surge_first_never_below_min_available(env: Env) -> None:
    rotation = {"maxBans": 3, "banWindowSeconds": 600, "minAvailable": 2}
    await env.kube.create(env.pools(), env.pool_body("rot", 2, rotation=rotation))
    await env.wait_status("rot", replicas=2, readyReplicas=2)
    before = {m["metadata"]["name"]: m["status"]["ip"] for m in await env.members("rot")}

    async def granted() -> dict[str, Any] | None:
        status, body = await env.lease("rot")
        return body if status == 201 else None

    lease = await wait_for(granted, timeout=60)
    banned = lease["proxy"]["name"]
    ready_counts: list[int] = []
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            ready_counts.append(sum(1 for m in await env.members("rot") if _ready(m)))
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())
    for target in ("a.example", "b.example", "c.example"):
        assert await env.report(lease["leaseId"], "banned", target) == 200
    await env.release(lease["leaseId"])

    async def replaced() -> dict[str, str] | None:
        members = await env.members("rot")
        names = {m["metadata"]["name"]: str((m.get("status") or {}).get("ip")) for m in members}
        ready = [m for m in members if _ready(m)]
        return names if banned not in names and len(ready) == 2 and len(names) == 2 else None

    after = await wait_for(replaced, timeout=240, interval=0.5)
    done.set()
    await watcher
    new = set(after) - set(before)
    print(f"banned {banned} at {before[banned]}; replaced by {new} at {[after[n] for n in new]}")
    print(f"Ready counts seen: min {min(ready_counts)} over {len(ready_counts)} samples")
    assert len(new) == 1 and after[new.pop()] != before[banned]
    assert min(ready_counts) >= 2
    events = [e["reason"] for e in await env.events("rot")]
    assert "Draining" in events
    await env.kube.delete(env.pools("rot"))


async def test_template_change_rolls_every_proxy_without_a_moment_unleasable(env: Env) -> None:
    strategy = {"maxSurge": 1, "maxUnavailable": 0}
    await env.kube.create(env.pools(), env.pool_body("roll", 2, strategy=strategy))
    await env.wait_status("roll", replicas=2, readyReplicas=2)
    old = {m["metadata"]["name"] for m in await env.members("roll")}
    outcomes: dict[int, int] = {}
    refusals: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            status, body = await env.lease("roll", ttl=5)
            outcomes[status] = outcomes.get(status, 0) + 1
            if status == 201:
                await env.release(body["leaseId"])
            else:
                refusals.append(body)
            await asyncio.sleep(0.05)

    poller = asyncio.create_task(poll())
    body = await env.pool("roll")
    template = body["spec"]["template"]
    template["spec"]["attributes"]["generation"] = "2"
    await env.kube.patch(env.pools("roll"), {"spec": {"template": template}})

    async def rolled() -> bool:
        members = await env.members("roll")
        names = {m["metadata"]["name"] for m in members}
        hashes = {m["metadata"]["labels"][TEMPLATE_HASH_LABEL] for m in members}
        ready = [m for m in members if _ready(m)]
        return not (names & old) and len(hashes) == 1 and len(ready) == 2 == len(members)

    await wait_for(rolled, timeout=300, interval=0.5)
    done.set()
    await poller
    print(f"lease outcomes during the roll: {outcomes}")
    assert outcomes.get(201, 0) > 20
    assert refusals == []
    listed = await env.listed("roll")
    assert all(p["attributes"]["generation"] == "2" for p in listed.values())
    await env.kube.delete(env.pools("roll"))


async def test_demand_grows_the_pool_to_max_and_idleness_shrinks_it_back(env: Env) -> None:
    autoscale = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "targetUtilizationPercent": 100,
        "scaleUpOnWaiting": 1,
        "scaleDownDelaySeconds": 10,
        "minIdle": 0,
    }
    await env.kube.create(env.pools(), env.pool_body("auto", 1, autoscale=autoscale))
    await env.wait_status("auto", replicas=1, readyReplicas=1)
    held: list[str] = []
    waited = [0]
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set():
            status, body = await env.lease("auto", ttl=300)
            if status == 201:
                held.append(body["leaseId"])
                return
            waited[0] += 1
            await asyncio.sleep(0.5)

    clients = [asyncio.create_task(client()) for _ in range(4)]  # one more than maxReplicas
    await env.wait_status("auto", timeout=300, replicas=3, readyReplicas=3)

    async def three_held() -> bool:
        return len(held) == 3

    await wait_for(three_held, timeout=60)

    async def limited_at_max() -> dict[str, Any] | None:
        # The demand figures reach the status on the controller's next pass.
        body = await env.pool("auto")
        conditions = (body.get("status") or {}).get("conditions") or []
        limited: dict[str, Any] = next((c for c in conditions if c["type"] == "ScalingLimited"), {})
        at_max = limited.get("status") == "True" and limited.get("reason") == "AtMaxReplicas"
        return body if at_max else None

    body = await wait_for(limited_at_max, timeout=30, interval=0.5)
    assert body["spec"]["replicas"] == 3
    print(f"at max: {body['status']}; requests waited {waited[0]} times")
    stop.set()
    await asyncio.gather(*clients)
    released_at = time.monotonic()
    for lease_id in held:
        await env.release(lease_id)
    await env.wait_status("auto", timeout=120, replicas=1, readyReplicas=1)
    shrunk_after = time.monotonic() - released_at
    print(f"back to 1 replica {shrunk_after:.1f}s after the release")
    # Not before the pool was idle for scaleDownDelaySeconds; how soon after is
    # the machine's speed, bounded by wait_status's timeout above.
    assert shrunk_after >= autoscale["scaleDownDelaySeconds"]
    await env.rounds_pass("auto", 3)  # no decision follows once it settled

    async def scaling_counts() -> dict[str, int] | None:
        # One Event object per reason; a repeat is written within SERIES_INTERVAL.
        counts: dict[str, int] = {}
        for event in await env.events("auto"):
            counts[event["reason"]] = counts.get(event["reason"], 0) + event.get("count", 1)
        settled = counts.get("ScaledUp") == 2 and counts.get("ScaledDown") == 1
        return counts if settled else None

    counts = await wait_for(scaling_counts, timeout=3 * SERIES_INTERVAL, interval=1.0)
    print(f"pool events: {counts}")
    async with env.session.get(env.operator.metrics_url) as response:
        metrics = await response.text()
    decisions = {
        line.split('direction="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("egress_proxies_pool_scaling_decisions_total{")
        and f'pool="{env.namespace}/auto"' in line
    }
    assert decisions == {"ScaledUp": 2.0, "ScaledDown": 1.0}
    await env.kube.delete(env.pools("auto"))
