"""The loopback kubelet: plays scheduler and node for every pod of the dev cluster.

It owns every pod that has no nodeName (it binds them to its node) or is
bound to its node. For each, it runs the pod's Squid as a real `squid`
process on a unique 127.x.y.z address, reports the pod Running/Ready with
that podIP, and stops the process and finalizes the pod when it is deleted.
It restarts nothing on its own: a squid that exits leaves its pod Failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from egress_proxies.devcluster import toolchain
from egress_proxies.devcluster.processes import Child, spawn
from egress_proxies.devcluster.squidpod import (
    PodRejectedError,
    SquidPodPlan,
    plan_pod,
    pod_file_layout,
    rewrite_config,
    volume_files,
)
from egress_proxies.kube.client import ApiError, JsonObject, KubeClient

logger = logging.getLogger(__name__)

NODE_NAME = "loopback"
SQUID_USER = "proxy"
_READY_TIMEOUT = 20.0
_MISSING_VOLUME_RETRY = 1.0
_EXIT_POLL_SECONDS = 0.5


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodAddresses:
    """Hands out unique 127.<net>.x.y addresses, one per pod."""

    def __init__(self, network_octet: int) -> None:
        self._octet = network_octet
        self._next = 1
        self._by_uid: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<PodAddresses 127.{self._octet}.0.0/16 [{len(self._by_uid)} assigned]>"

    def assign(self, uid: str, previous: str | None = None) -> str:
        """The address of a pod: its previous one if it had one in this network, else a new one."""
        if uid in self._by_uid:
            return self._by_uid[uid]
        if previous and previous.startswith(f"127.{self._octet}."):
            address = previous
        else:
            index = self._next
            self._next += 1
            address = f"127.{self._octet}.{index // 254}.{index % 254 + 1}"
        self._by_uid[uid] = address
        return address

    def release(self, uid: str) -> None:
        """Forget a deleted pod's address."""
        self._by_uid.pop(uid, None)


@dataclass
class RunningPod:
    """A pod the kubelet is running (or starting)."""

    namespace: str
    name: str
    uid: str
    task: asyncio.Task[None]
    child: Child | None = None
    stopping: bool = False


class LoopbackKubelet:
    """Watches pods and runs their Squid containers as local processes."""

    def __init__(self, client: KubeClient, pods_dir: Path, pid_dir: Path, addresses: PodAddresses):
        self._client = client
        self._pods_dir = pods_dir
        self._pid_dir = pid_dir
        self._addresses = addresses
        self._pods: dict[str, RunningPod] = {}

    def __repr__(self) -> str:
        running = sum(1 for pod in self._pods.values() if pod.child and pod.child.alive())
        return (
            f"<LoopbackKubelet node={NODE_NAME} [pods: {len(self._pods)} known, {running} running]>"
        )

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Register the node, then serve pods until cancelled."""
        await self._register_node()
        try:
            while True:
                listing = await self._client.get("/api/v1/pods")
                for pod in listing.get("items", []):
                    await self._observe("ADDED", pod)
                if ready is not None:
                    ready.set()
                await self._watch(listing["metadata"]["resourceVersion"])
        finally:
            await self.stop_all()

    async def stop_all(self) -> None:
        """Stop every squid this kubelet started, all at once (each takes about a second)."""
        await asyncio.gather(*(self._stop(pod) for pod in list(self._pods.values())))
        self._pods.clear()

    async def _watch(self, resource_version: str) -> None:
        try:
            async for event in self._client.watch(
                "/api/v1/pods", resource_version=resource_version
            ):
                if event["type"] == "ERROR":
                    return  # typically 410 Gone: relist
                if event["type"] == "BOOKMARK":
                    continue
                await self._observe(event["type"], event["object"])
        except (ApiError, OSError, TimeoutError) as error:
            logger.warning("pod watch ended (%s); relisting", error)
            await asyncio.sleep(1)

    async def _observe(self, event_type: str, pod: JsonObject) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        uid = meta["uid"]
        if event_type == "DELETED":
            known = self._pods.pop(uid, None)
            if known is not None:
                await self._stop(known)
            self._addresses.release(uid)
            return
        node = spec.get("nodeName", "")
        if node not in ("", NODE_NAME):
            return
        if meta.get("deletionTimestamp"):
            await self._finalize(pod)
            return
        if uid in self._pods or pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
            return
        task = asyncio.create_task(self._start(pod), name=f"pod {meta['namespace']}/{meta['name']}")
        self._pods[uid] = RunningPod(meta["namespace"], meta["name"], uid, task)

    async def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        }
        try:
            await self._client.create("/api/v1/nodes", node)
        except ApiError as error:
            if error.status != 409:
                raise
        now = _now()
        status = {
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "1000"},
                "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "1000"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "LoopbackKubeletReady",
                        "message": "the loopback kubelet runs squid pods as local processes",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "kubeletVersion": "loopback",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "bootID": "",
                    "containerRuntimeVersion": "loopback://squid",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "osImage": "",
                    "systemUUID": "",
                },
            }
        }
        await self._client.patch(f"/api/v1/nodes/{NODE_NAME}/status", status)

    async def _start(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        try:
            if not pod.get("spec", {}).get("nodeName"):
                await self._bind(namespace, name, uid)
            plan = plan_pod(pod)
            address = self._addresses.assign(uid, pod.get("status", {}).get("podIP"))
            child, port = await self._launch(pod, plan, address)
            running = self._pods.get(uid)
            if running is None or running.stopping:
                child.stop()
                return
            running.child = child
            await self._report_running(namespace, name, plan, address, child)
            logger.info(
                "pod %s/%s running squid pid %d on %s:%d",
                namespace,
                name,
                child.process.pid,
                address,
                port,
            )
            # Polled, not waited for in a thread: a thread per running pod would
            # exhaust the loop's default executor and stall every other pod.
            while child.alive():  # noqa: ASYNC110 - a Popen has nothing to await
                await asyncio.sleep(_EXIT_POLL_SECONDS)
            exit_code = child.process.returncode
            if not running.stopping:
                await self._report_failed(
                    namespace,
                    name,
                    "SquidExited",
                    f"squid exited with code {exit_code}: {child.log_tail(5)}",
                )
        except PodRejectedError as rejected:
            logger.warning("pod %s/%s rejected: %s", namespace, name, rejected.message)
            await self._report_failed(namespace, name, rejected.reason, rejected.message)
        except (toolchain.MissingToolError, OSError) as error:
            logger.warning("pod %s/%s cannot run: %s", namespace, name, error)
            await self._report_failed(namespace, name, "CannotRunSquid", str(error))
        except ApiError as error:
            if error.status != 404:
                logger.warning("pod %s/%s: API error %s", namespace, name, error)

    async def _bind(self, namespace: str, name: str, uid: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        await self._client.create(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)

    async def _launch(self, pod: JsonObject, plan: SquidPodPlan, address: str) -> tuple[Child, int]:
        meta = pod["metadata"]
        pod_dir = self._pods_dir / meta["uid"]
        root, run = pod_dir / "root", pod_dir / "run"
        volumes = await self._fetch_volumes(meta["namespace"], plan)
        layout = pod_file_layout(plan, volumes)
        config_text = layout.get(plan.config_path)
        if config_text is None:
            raise PodRejectedError(
                "InvalidConfig",
                f"no squid configuration at {plan.config_path} in the pod's volumes",
            )
        config, ports = rewrite_config(
            config_text.decode(errors="replace"),
            pod_ip=address,
            pod_root=str(root),
            run_dir=str(run),
            mount_paths=list(plan.mounts),
        )
        await asyncio.to_thread(_write_pod_dir, pod_dir, layout, config)
        squid = str(toolchain.squid())
        config_file = str(run / "squid.conf")
        parsed = await asyncio.to_thread(
            subprocess.run,
            [squid, "-k", "parse", "-f", config_file],
            capture_output=True,
            text=True,
            user=SQUID_USER,
            check=False,
        )
        if parsed.returncode != 0:
            errors = [
                line for line in parsed.stderr.splitlines() if "ERROR" in line or "FATAL" in line
            ]
            raise PodRejectedError(
                "InvalidConfig",
                "squid rejected the configuration: "
                + ("; ".join(errors[-3:]) or parsed.stderr[-500:]),
            )
        child = spawn(
            f"squid-{meta['uid']}",
            [squid, "-N", "-f", config_file],
            pid_dir=self._pid_dir,
            log=run / "squid.out",
            user=SQUID_USER,
        )
        if not await _listening(child, address, ports[0]):
            tail = (
                (run / "cache.log").read_text(errors="replace")[-800:]
                if (run / "cache.log").exists()
                else child.log_tail()
            )
            child.stop()
            raise PodRejectedError(
                "SquidFailed", f"squid did not start listening on {address}:{ports[0]}: {tail}"
            )
        return child, ports[0]

    async def _fetch_volumes(
        self, namespace: str, plan: SquidPodPlan
    ) -> dict[str, dict[str, bytes]]:
        volumes: dict[str, dict[str, bytes]] = {}
        for mount_path, (source, _) in plan.mounts.items():
            plural = "configmaps" if source.kind == "configMap" else "secrets"
            while True:
                try:
                    body = await self._client.get(
                        f"/api/v1/namespaces/{namespace}/{plural}/{source.name}"
                    )
                    break
                except ApiError as error:
                    if error.status != 404:
                        raise
                    await asyncio.sleep(_MISSING_VOLUME_RETRY)  # the real kubelet waits too
            volumes[mount_path] = volume_files(
                source, body.get("data") or {}, secret=source.kind == "secret"
            )
        return volumes

    async def _report_running(
        self, namespace: str, name: str, plan: SquidPodPlan, address: str, child: Child
    ) -> None:
        now = _now()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {
            "status": {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": address,
                "podIPs": [{"ip": address}],
                "startTime": now,
                "conditions": conditions,
                "containerStatuses": [
                    {
                        "name": plan.container,
                        "image": plan.image,
                        "imageID": "",
                        "containerID": f"loopback://{child.process.pid}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                    }
                ],
            }
        }
        await self._client.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", status)

    async def _report_failed(self, namespace: str, name: str, reason: str, message: str) -> None:
        status = {
            "status": {
                "phase": "Failed",
                "reason": reason,
                "message": message[:1000],
                "conditions": [{"type": "Ready", "status": "False", "reason": reason}],
            }
        }
        with contextlib.suppress(ApiError):
            await self._client.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", status)

    async def _finalize(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        known = self._pods.pop(meta["uid"], None)
        if known is not None:
            await self._stop(known)
        self._addresses.release(meta["uid"])
        with contextlib.suppress(ApiError):
            await self._client.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )

    async def _stop(self, pod: RunningPod) -> None:
        pod.stopping = True
        if pod.child is not None:
            await asyncio.to_thread(pod.child.stop, 5.0)
        if not pod.task.done():
            pod.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pod.task
        await asyncio.to_thread(shutil.rmtree, self._pods_dir / pod.uid, True)


def _write_pod_dir(pod_dir: Path, layout: dict[str, bytes], config: str) -> None:
    proxy_user = pwd.getpwnam(SQUID_USER)
    shutil.rmtree(pod_dir, ignore_errors=True)
    for in_pod_path, content in layout.items():
        target = pod_dir / "root" / in_pod_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    run = pod_dir / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "squid.conf").write_text(config)
    for directory, _, files in os.walk(pod_dir):
        os.chown(directory, proxy_user.pw_uid, proxy_user.pw_gid)
        os.chmod(directory, 0o750)
        for file in files:
            os.chown(os.path.join(directory, file), proxy_user.pw_uid, proxy_user.pw_gid)
            os.chmod(os.path.join(directory, file), 0o640)


async def _listening(child: Child, address: str, port: int) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READY_TIMEOUT
    while loop.time() < deadline:
        if not child.alive():
            return False
        try:
            _, writer = await asyncio.open_connection(address, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False
