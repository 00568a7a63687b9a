"""The dev cluster's real node: kubelet on containerd and runc, pods in real containers.

On the session's dev cluster. Every check is made the way a user would make
it on kind or GKE: the API, `kubectl exec` and `kubectl logs`, and /proc on
the host for what only the host can show.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies import toolchain
from egress_proxies.devcluster import KubeClient
from egress_proxies.devcluster.node import cgroup_name, image_ref
from egress_proxies.model import ProxySpec
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.programs.squid_config import HELPER_FILE, lease_auth_helper, squid_conf
from egress_proxies.stacks.programs.squid_pod import CONTAINER_DIRECTIVES, lease_auth
from egress_proxies.stacks.programs.squid_pod import pod_spec as program_pod_spec
from harness.cluster import ClusterHandle, wait_for
from harness.origins import serve_origin
from harness.procfs import ancestor_named, read_proc
from tests.conftest import create_namespace

pytestmark = pytest.mark.integration

CREDENTIALS = ProxyCredentials("crawler", "a-long-random-password-1234", "k" * 64)
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


@pytest.fixture
def real_node(dev_cluster: ClusterHandle) -> ClusterHandle:
    """The session's dev cluster, named for what this module looks at."""
    return dev_cluster


@pytest.fixture
async def node_kube(real_node: ClusterHandle) -> AsyncIterator[KubeClient]:
    async with KubeClient(real_node.credentials) as client:
        yield client


@pytest.fixture
async def node_namespace(
    node_kube: KubeClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A namespace enforcing Pod Security "restricted", as the product's are."""
    name = await create_namespace(node_kube, request, RESTRICTED)
    yield name
    await node_kube.delete(f"/api/v1/namespaces/{name}")


def kubectl(cluster: ClusterHandle, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        [str(toolchain.find("kubectl")), *args],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout + result.stderr


def program_objects(name: str) -> tuple[dict[str, Any], ...]:
    """The credentials Secret (the operator's), and the ConfigMap and Pod the squid program
    declares, on the local squid image."""
    spec = ProxySpec.model_validate(
        {"provider": "kubernetes", "kubernetes": {"image": image_ref("squid")}}
    )
    inputs = ProgramInputs(
        namespace="unused",
        name=name,
        uid=f"uid-{name}",
        instance_name=name,
        spec=spec,
        credentials=CREDENTIALS,
        cloud_init=None,
    )
    return (
        {
            "metadata": {"name": f"{name}-auth"},
            "stringData": {
                "username": CREDENTIALS.username,
                "password": CREDENTIALS.password,
                "signingKey": str(CREDENTIALS.signing_key),
            },
        },
        {
            "metadata": {"name": f"{name}-config"},
            "data": {
                "squid.conf": squid_conf(3128, lease_auth=lease_auth(inputs))
                + CONTAINER_DIRECTIVES,
                HELPER_FILE: lease_auth_helper(),
            },
        },
        {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": program_pod_spec(inputs, f"{name}-auth", f"{name}-config"),
        },
    )


async def create_all(kube: KubeClient, namespace: str, objects: tuple[dict[str, Any], ...]) -> None:
    base = f"/api/v1/namespaces/{namespace}"
    for collection, body in zip(("secrets", "configmaps", "pods"), objects, strict=True):
        await kube.create(f"{base}/{collection}", body)


async def pod_where(
    kube: KubeClient, namespace: str, name: str, condition: Any, timeout: float = 90
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if condition(pod) else None

    return await wait_for(check, timeout=timeout, interval=0.3)


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = pod.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0]


async def authenticated_get(pod_ip: str, url: str) -> int:
    token = base64.b64encode(f"{CREDENTIALS.username}:{CREDENTIALS.password}".encode()).decode()
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            url,
            proxy=f"http://{pod_ip}:3128",
            headers={"Proxy-Authorization": f"Basic {token}"},
            timeout=aiohttp.ClientTimeout(total=20),
        ) as response,
    ):
        await response.read()
        return response.status


async def test_the_node_is_a_kubelet_on_containerd(
    real_node: ClusterHandle, node_kube: KubeClient
) -> None:
    print(kubectl(real_node, "get", "nodes", "-o", "wide"))
    (node,) = (await node_kube.get("/api/v1/nodes"))["items"]
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.36.3"
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert is_ready(node)
    assert not [t for t in node["spec"].get("taints") or [] if t["effect"] == "NoSchedule"]


async def test_the_program_pod_runs_confined_in_runc_and_authenticates(
    real_node: ClusterHandle, node_kube: KubeClient, node_namespace: str
) -> None:
    await create_all(node_kube, node_namespace, program_objects("strict"))
    pod = await pod_where(node_kube, node_namespace, "strict", is_ready)
    exec_ = ["exec", "-n", node_namespace, "strict", "--"]
    status = kubectl(
        real_node, *exec_, "grep", "-E", "^(Uid|CapEff|NoNewPrivs|Seccomp):", "/proc/1/status"
    )
    print("inside the pod:", status)
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["Uid"].split() == ["13", "13", "13", "13"]
    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    write = kubectl(real_node, *exec_, "touch", "/written-by-a-test", check=False)
    print("writing to /:", write)
    assert "Read-only file system" in write

    # On the host: squid is a runc container, a child of containerd's runc shim,
    # in a pod cgroup under the node's own cgroup root.
    container_id = container_status(pod)["containerID"]
    assert container_id.startswith("containerd://")
    squid_pids = [
        int(proc.parent.name)
        for proc in Path("/proc").glob("[0-9]*/cgroup")
        if container_id.removeprefix("containerd://") in read_proc(proc)
    ]
    assert squid_pids, "no host process in the container's cgroup"
    cgroup = read_proc(Path(f"/proc/{squid_pids[0]}/cgroup"))
    assert f"/{cgroup_name(real_node.layout.root)}/kubepods/" in cgroup
    shim = ancestor_named(squid_pids[0], "containerd-shim-runc-v2")
    assert shim is not None, "squid does not run under containerd-shim-runc-v2"

    async with serve_origin(host=real_node.host_address) as origin:
        assert await authenticated_get(pod["status"]["podIP"], origin.url) == 200
    # The origin saw the request come from the pod, through the node's network.
    assert origin.peers == [pod["status"]["podIP"]]


async def test_the_previous_pod_spec_crash_loops_with_squids_permission_error(
    real_node: ClusterHandle, node_kube: KubeClient, node_namespace: str
) -> None:
    # The pod as the program declared it before Pod Security "restricted": no
    # fsGroup, so the Secret's files (root:root 0440) are unreadable to squid's user.
    secret, config, pod = program_objects("legacy")
    spec = pod["spec"]
    del spec["securityContext"]["fsGroup"]
    spec["restartPolicy"] = "Always"
    await create_all(node_kube, node_namespace, (secret, config, pod))
    base = f"/api/v1/namespaces/{node_namespace}/pods/legacy"

    # squid's auth helper cannot read the key; squid dies as soon as its first
    # helper does (it may never be Ready long enough to be seen so), and the
    # kubelet restarts it. While it is up, nothing passes.
    async def crashed() -> dict[str, Any] | None:
        pod = await node_kube.get(base)
        pod_ip = (pod.get("status") or {}).get("podIP")
        if pod_ip:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                target = f"http://{real_node.host_address}:1/"
                assert await authenticated_get(pod_ip, target) != 200
        return pod if container_status(pod).get("lastState", {}).get("terminated") else None

    pod = await wait_for(crashed, timeout=90, interval=0.5)
    status = container_status(pod)
    print("restarted:", status["restartCount"], status["lastState"]["terminated"]["exitCode"])
    assert status["restartCount"] >= 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    logs = kubectl(real_node, "logs", "--previous", "-n", node_namespace, "legacy")
    print("kubectl logs --previous:", [line for line in logs.splitlines() if "auth" in line])
    assert "/etc/squid/auth/signingKey: Permission denied" in logs


async def test_an_image_the_node_lacks_fails_to_pull_in_the_runtime(
    node_kube: KubeClient, node_namespace: str
) -> None:
    _, _, pod = program_objects("absent")
    pod["spec"]["containers"][0]["image"] = "localhost/egress-proxies/no-such-image:1"
    pod["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    pod["spec"]["volumes"] = []
    pod["spec"]["containers"][0]["volumeMounts"] = []
    await node_kube.create(f"/api/v1/namespaces/{node_namespace}/pods", pod)

    def pull_failed(pod: dict[str, Any]) -> bool:
        reason = container_status(pod).get("state", {}).get("waiting", {}).get("reason")
        return reason in {"ErrImagePull", "ImagePullBackOff"}

    pod = await pod_where(node_kube, node_namespace, "absent", pull_failed)
    waiting = container_status(pod)["state"]["waiting"]
    print("waiting:", waiting)
    assert "no-such-image" in waiting.get("message", "")


async def test_a_pod_over_its_memory_limit_is_oom_killed(
    node_kube: KubeClient, node_namespace: str
) -> None:
    _, _, pod = program_objects("hog")
    container = pod["spec"]["containers"][0]
    container.update(
        {
            # The shell holds the command's output in memory: 256 MiB.
            "command": ["/bin/sh", "-c", 'x="$(head -c 268435456 /dev/zero | tr "\\0" a)"'],
            "args": [],
            "resources": {"limits": {"memory": "32Mi", "cpu": "500m"}},
            "volumeMounts": [],
        }
    )
    container.pop("readinessProbe")
    pod["spec"]["volumes"] = []
    await node_kube.create(f"/api/v1/namespaces/{node_namespace}/pods", pod)

    def terminated(pod: dict[str, Any]) -> bool:
        ended = bool(container_status(pod).get("state", {}).get("terminated"))
        return ended and pod["status"].get("phase") == "Failed"

    pod = await pod_where(node_kube, node_namespace, "hog", terminated)
    state = container_status(pod)["state"]["terminated"]
    print("terminated:", state)
    assert state["reason"] == "OOMKilled"
    assert pod["status"]["phase"] == "Failed"


async def test_a_cluster_ip_service_reaches_its_endpoints_from_a_pod(
    real_node: ClusterHandle, node_kube: KubeClient, node_namespace: str
) -> None:
    await create_all(node_kube, node_namespace, program_objects("via-service"))
    pod = await pod_where(node_kube, node_namespace, "via-service", is_ready)
    base = f"/api/v1/namespaces/{node_namespace}"
    async with serve_origin(host=real_node.host_address) as origin:
        port = int(origin.url.rsplit(":", 1)[1].strip("/"))
        # A Service without a selector whose endpoints are the origin on the host.
        service = await node_kube.create(
            f"{base}/services",
            {"metadata": {"name": "origin"}, "spec": {"ports": [{"port": 80, "targetPort": port}]}},
        )
        await node_kube.create(
            f"/apis/discovery.k8s.io/v1/namespaces/{node_namespace}/endpointslices",
            {
                "metadata": {
                    "name": "origin-1",
                    "labels": {"kubernetes.io/service-name": "origin"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [real_node.host_address]}],
                "ports": [{"port": port, "protocol": "TCP"}],
            },
        )
        cluster_ip = service["spec"]["clusterIP"]

        async def through_the_service() -> bool:
            try:
                return (
                    await authenticated_get(pod["status"]["podIP"], f"http://{cluster_ip}/") == 200
                )
            except (aiohttp.ClientError, TimeoutError):
                return False

        # kube-proxy programs the Service's rules within a few seconds.
        assert await wait_for(through_the_service, timeout=60, interval=0.5)
    assert origin.hits[0] >= 1


async def test_a_pod_resolves_a_service_by_name_through_cluster_dns(
    real_node: ClusterHandle, node_kube: KubeClient, node_namespace: str
) -> None:
    _, _, pod = program_objects("dns-client")
    client = pod["spec"]["containers"][0]
    client.update({"command": ["/bin/sleep", "3600"], "args": [], "volumeMounts": []})
    client.pop("readinessProbe")
    client.pop("livenessProbe")
    pod["spec"]["volumes"] = []
    await node_kube.create(f"/api/v1/namespaces/{node_namespace}/pods", pod)
    async with serve_origin(host=real_node.host_address) as origin:
        port = int(origin.url.rsplit(":", 1)[1].strip("/"))
        service = await node_kube.create(
            f"/api/v1/namespaces/{node_namespace}/services",
            {"metadata": {"name": "origin"}, "spec": {"ports": [{"port": 80, "targetPort": port}]}},
        )
        await node_kube.create(
            f"/apis/discovery.k8s.io/v1/namespaces/{node_namespace}/endpointslices",
            {
                "metadata": {
                    "name": "origin-1",
                    "labels": {"kubernetes.io/service-name": "origin"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [real_node.host_address]}],
                "ports": [{"port": port, "protocol": "TCP"}],
            },
        )
        cluster_ip = service["spec"]["clusterIP"]
        await pod_where(
            node_kube, node_namespace, "dns-client", lambda p: p["status"].get("phase") == "Running"
        )
        exec_ = ["exec", "-n", node_namespace, "dns-client", "--"]

        resolv_conf = kubectl(real_node, *exec_, "cat", "/etc/resolv.conf")
        print("the pod's /etc/resolv.conf:", resolv_conf)
        dns = (await node_kube.get("/api/v1/namespaces/kube-system/services/kube-dns"))["spec"]
        assert f"nameserver {dns['clusterIP']}\n" in resolv_conf
        assert f"search {node_namespace}.svc.cluster.local svc.cluster.local" in resolv_conf

        async def in_pod(*argv: str) -> str:
            # In a thread: the origin answers from this test's event loop.
            return await asyncio.to_thread(kubectl, real_node, *exec_, *argv, check=False)

        for name in (f"origin.{node_namespace}.svc", f"origin.{node_namespace}.svc.cluster.local"):

            async def resolved(name: str = name) -> str | None:
                answer = await in_pod("getent", "hosts", name)
                return answer if answer.split()[:1] == [cluster_ip] else None

            # CoreDNS learns of the Service from its watch, within moments.
            print(f"getent hosts {name}:", (await wait_for(resolved, timeout=30)).strip())

        # Reached by its name: bash resolves it (libc, the search list) and
        # connects; kube-proxy carries the connection to the origin once it
        # has programmed the Service's rules.
        request = (
            f"exec 3<>/dev/tcp/origin.{node_namespace}.svc/80 && "
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3"
        )

        async def reached() -> str | None:
            status_line = await in_pod("bash", "-c", request)
            return status_line if status_line.startswith("HTTP/1.") else None

        status_line = await wait_for(reached, timeout=60, interval=0.5)
        print("GET http://origin.NAMESPACE.svc/:", status_line.strip())
        assert " 200 " in status_line
        assert origin.hits[0] >= 1

        # Nothing leaves the machine: a name outside the cluster does not exist.
        outside = await in_pod("getent", "hosts", "example.com")
        print("getent hosts example.com:", outside.strip())
        assert "exit code 2" in outside  # getent's "not found": NXDOMAIN, no timeout
