"""Smoke tests of the dev cluster's loopback kubelet against real squid processes."""

from __future__ import annotations

import base64
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.devcluster import ApiError, KubeClient
from egress_proxies.devcluster.processes import process_runs
from egress_proxies.model import ProxySpec
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.programs.squid_config import passwd_line, squid_conf
from egress_proxies.stacks.programs.squid_pod import CONTAINER_DIRECTIVES
from egress_proxies.stacks.programs.squid_pod import pod_spec as squid_pod_program_spec
from harness.origins import ORIGIN_BODY, serve_origin
from tests.conftest import ClusterHandle, supervised_cluster, wait_for


@pytest.fixture(scope="module")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """This module tests the loopback kubelet itself: a cluster of its own on it."""
    with supervised_cluster(tmp_path_factory, "loopback") as handle:
        yield handle


CREDENTIALS = ProxyCredentials(username="crawler", password="a-long-random-password-1234")
OPEN_SQUID_CONF = """\
http_port 3128
http_access allow all
"""


def squid_pod(
    name: str, *, image: str = "ubuntu/squid:6.10-24.10_beta", restart: str = "Never"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "squid",
                    "image": image,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "ports": [{"containerPort": 3128}],
                    "volumeMounts": [
                        {
                            "name": "config",
                            "mountPath": "/etc/squid/squid.conf",
                            "subPath": "squid.conf",
                        }
                    ],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}],
        },
    }


async def start_squid_pod(
    kube: KubeClient, namespace: str, name: str, config: str, **pod: Any
) -> dict[str, Any]:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": f"{name}-config"}, "data": {"squid.conf": config}},
    )
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", squid_pod(name, **pod))
    return await wait_for_phase(kube, namespace, name, {"Running", "Failed"})


async def wait_for_phase(
    kube: KubeClient, namespace: str, name: str, phases: set[str]
) -> dict[str, Any]:
    async def settled() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if pod.get("status", {}).get("phase") in phases else None

    return await wait_for(settled, timeout=30)


def squid_pid(pod: dict[str, Any]) -> int:
    container_id: str = pod["status"]["containerStatuses"][0]["containerID"]
    return int(container_id.removeprefix("loopback://"))


async def test_squid_pod_runs_proxies_http_and_connect_and_stops_on_delete(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    pod = await start_squid_pod(kube, namespace, "squid", OPEN_SQUID_CONF)
    assert pod["status"]["phase"] == "Running", pod["status"]
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("127.") and pod_ip != "127.0.0.1"
    assert pod["spec"]["nodeName"] == "loopback"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"
    pid = squid_pid(pod)
    assert process_runs(pid, "squid")

    proxy = f"http://{pod_ip}:3128"
    async with (
        serve_origin() as http_origin,
        serve_origin(tmp_path) as https_origin,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(http_origin.url, proxy=proxy) as response:
            assert response.status == 200
            assert await response.text() == ORIGIN_BODY
            assert "squid" in response.headers.get("Via", "")
        assert https_origin.client_ssl is not None
        async with session.get(
            https_origin.url, proxy=proxy, ssl=https_origin.client_ssl
        ) as response:
            assert response.status == 200
            assert await response.text() == ORIGIN_BODY

    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/squid")

    async def pod_gone() -> bool:
        listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
        return not listing["items"]

    await wait_for(pod_gone, timeout=30)
    assert not process_runs(pid, "squid")


def container_state(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    return state


async def test_an_image_it_cannot_run_stays_pending_in_image_pull_back_off(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": "web-config"}, "data": {"squid.conf": OPEN_SQUID_CONF}},
    )
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", squid_pod("web", image="nginx:1.27"))

    async def backing_off() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/web")
        waiting = (
            container_state(pod).get("waiting", {})
            if "containerStatuses" in pod.get("status", {})
            else {}
        )
        return pod if waiting.get("reason") == "ImagePullBackOff" else None

    pod = await wait_for(backing_off, timeout=30)
    assert pod["status"]["phase"] == "Pending"
    assert "nginx:1.27" in container_state(pod)["waiting"]["message"]


async def test_pod_with_bad_squid_config_fails_with_squids_error(
    kube: KubeClient, namespace: str
) -> None:
    config = OPEN_SQUID_CONF + "no_such_directive on\nhttp_access allow nobody_acl\n"
    pod = await start_squid_pod(kube, namespace, "broken", config)
    assert pod["status"]["phase"] == "Failed"
    terminated = container_state(pod)["terminated"]
    assert terminated["exitCode"] != 0 and terminated["reason"] == "Error"
    assert "nobody_acl" in terminated["message"]


async def test_restart_policy_always_restarts_a_dead_squid_in_place(
    kube: KubeClient, namespace: str
) -> None:
    pod = await start_squid_pod(kube, namespace, "phoenix", OPEN_SQUID_CONF, restart="Always")
    first_pid, ip = squid_pid(pod), pod["status"]["podIP"]
    os.kill(first_pid, signal.SIGKILL)

    async def restarted() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/phoenix")
        status = pod["status"]["containerStatuses"][0]
        return pod if status["restartCount"] == 1 and "running" in status["state"] else None

    pod = await wait_for(restarted, timeout=30)  # the first back-off is 10 s, as on a node
    assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"] == ip
    assert squid_pid(pod) != first_pid
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] != 0


async def test_a_token_without_rights_is_forbidden(kube: KubeClient, namespace: str) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "nobody"}}
    )
    issued = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = issued["status"]["token"]
    credentials = kube.credentials.with_token(token)
    async with KubeClient(credentials) as nobody:
        review = await nobody.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:nobody"
        )
        with pytest.raises(ApiError) as denied:
            await nobody.get(f"/api/v1/namespaces/{namespace}/pods")
        assert denied.value.status == 403
        assert "forbidden" in denied.value.message


def program_objects(name: str, *, secure: bool) -> tuple[dict[str, Any], ...]:
    """The Secret, ConfigMap and Pod the squid program declares (without its security
    contexts when `secure` is false: squid starts as root and no fsGroup is set)."""
    spec = ProxySpec.model_validate({"provider": "kubernetes", "kubernetes": {}})
    inputs = ProgramInputs(
        namespace="unused",
        name=name,
        uid=f"uid-{name}",
        instance_name=name,
        spec=spec,
        credentials=CREDENTIALS,
        cloud_init=None,
    )
    pod_spec = squid_pod_program_spec(inputs, f"{name}-auth", f"{name}-config")
    if not secure:
        del pod_spec["securityContext"]
        del pod_spec["containers"][0]["securityContext"]
    return (
        {"metadata": {"name": f"{name}-auth"}, "stringData": {"passwd": passwd_line(CREDENTIALS)}},
        {
            "metadata": {"name": f"{name}-config"},
            "data": {"squid.conf": squid_conf(3128) + CONTAINER_DIRECTIVES},
        },
        {"metadata": {"name": name}, "spec": pod_spec},
    )


async def start_program_pod(kube: KubeClient, namespace: str, name: str, *, secure: bool) -> None:
    secret, config, pod = program_objects(name, secure=secure)
    base = f"/api/v1/namespaces/{namespace}"
    await kube.create(f"{base}/secrets", secret)
    await kube.create(f"{base}/configmaps", config)
    await kube.create(f"{base}/pods", pod)


async def authenticated_get(pod: dict[str, Any], origin_url: str) -> int:
    token = base64.b64encode(f"{CREDENTIALS.username}:{CREDENTIALS.password}".encode()).decode()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                origin_url,
                proxy=f"http://{pod['status']['podIP']}:3128",
                headers={"Proxy-Authorization": f"Basic {token}"},
            ) as response,
        ):
            return response.status
    except aiohttp.ClientError:
        return 0


def previous_program_pod(name: str) -> dict[str, Any]:
    """The squid pod as the program declared it before it met Pod Security "restricted":
    squid started as root by the image, the passwd Secret at 0440, no fsGroup."""
    return {
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "squid",
                    "image": "ubuntu/squid:6.10-24.10_beta",
                    "args": ["-f", "/etc/squid/squid.conf", "-NYC"],
                    "ports": [{"name": "proxy", "containerPort": 3128}],
                    "volumeMounts": [
                        {
                            "name": "config",
                            "mountPath": "/etc/squid/squid.conf",
                            "subPath": "squid.conf",
                        },
                        {"name": "auth", "mountPath": "/etc/squid/auth", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{name}-config"}},
                {"name": "auth", "secret": {"secretName": f"{name}-auth", "defaultMode": 0o440}},
            ],
        },
    }


def pod_file(pod: dict[str, Any], path: str) -> str:
    """A file inside a running pod (what `kubectl exec cat` would show)."""
    (root,) = Path("/tmp").glob(f"egress-proxies-pods-*/{pod['metadata']['uid']}/root")
    return (root / path.lstrip("/")).read_text(errors="replace")


async def test_the_previous_pod_spec_crash_loops_on_the_passwd_file(
    kube: KubeClient, namespace: str
) -> None:
    # As on a real node: squid starts as root and drops to `proxy`; its auth helper runs
    # as `proxy`; the Secret's passwd file is root:root 0440 without an fsGroup.
    secret, config, _ = program_objects("legacy", secure=True)
    config["data"]["squid.conf"] = squid_conf(3128)  # the configuration of that time
    base = f"/api/v1/namespaces/{namespace}"
    await kube.create(f"{base}/secrets", secret)
    await kube.create(f"{base}/configmaps", config)
    await kube.create(f"{base}/pods", previous_program_pod("legacy"))
    pod = await wait_for_phase(kube, namespace, "legacy", {"Running"})
    async with serve_origin() as origin:
        assert await authenticated_get(pod, origin.url) != 200

    async def crashed() -> dict[str, Any] | None:
        pod = await kube.get(f"{base}/pods/legacy")
        status = pod["status"]["containerStatuses"][0]
        return pod if status["lastState"].get("terminated") else None

    pod = await wait_for(crashed, timeout=30)
    status = pod["status"]["containerStatuses"][0]
    print("previous spec:", status["state"], status["lastState"])
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    cache_log = pod_file(pod, "/var/log/squid/cache.log")
    print("its cache.log:", [line for line in cache_log.splitlines() if "FATAL" in line])
    assert "/etc/squid/auth/passwd: (13) Permission denied" in cache_log
    assert "helpers are crashing too rapidly" in cache_log


async def test_a_squid_started_as_root_cannot_reopen_stdout_as_proxy(
    kube: KubeClient, namespace: str
) -> None:
    # The current configuration logs to stdout/stderr; squid started as root reopens them
    # after dropping to `proxy`, and the runtime's stdio belongs to root (runc hands it to
    # the container's user only when that user is not root).
    await start_program_pod(kube, namespace, "rootful", secure=False)
    pod = await wait_for_phase(kube, namespace, "rootful", {"Failed"})
    message = container_state(pod)["terminated"]["message"]
    assert "FATAL: Cannot open '/dev/stdout' for writing" in message


async def test_the_program_pod_as_declared_runs_as_proxy_and_authenticates(
    kube: KubeClient, namespace: str
) -> None:
    await start_program_pod(kube, namespace, "strict", secure=True)
    pod = await wait_for_phase(kube, namespace, "strict", {"Running", "Failed"})
    assert pod["status"]["phase"] == "Running", pod["status"]
    status_line = Path(f"/proc/{squid_pid(pod)}/status").read_text()
    uid_line = next(line for line in status_line.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == ["13", "13", "13", "13"]
    async with serve_origin() as origin:
        assert await authenticated_get(pod, origin.url) == 200
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/strict")
    assert pod["status"]["phase"] == "Running"
