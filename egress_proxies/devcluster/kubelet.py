"""The loopback kubelet: plays scheduler and node for every pod of the dev cluster.

It owns every pod that has no nodeName (it binds them to its node) or is
bound to its node. For each, it runs the pod's Squid as a real `squid`
process on a unique 127.x.y.z address, reports the pod Running/Ready with
that podIP, and stops the process and finalizes the pod when it is deleted.
A squid that exits is restarted in place, or fails its pod, as the pod's
`restartPolicy` says; see docs/dev-cluster.md for what it emulates of a
real kubelet (volume ownership and modes, the user a container runs as)
and what it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import shutil
import subprocess
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egress_proxies import toolchain
from egress_proxies.devcluster.processes import Child, Identity, spawn
from egress_proxies.devcluster.squidpod import (
    ERR_IMAGE_PULL,
    PodPath,
    PodRejectedError,
    RunAs,
    SquidPodPlan,
    file_content,
    plan_pod,
    pod_file_layout,
    rewrite_config,
    volume_files,
)
from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube import ApiError, ConflictError, JsonObject, KubeClient, NotFoundError
from egress_proxies.kube.resources import CONFIG_MAPS, NODES, PODS, SECRETS

logger = logging.getLogger(__name__)

NODE_NAME = "loopback"
_READY_TIMEOUT = 20.0
_MISSING_VOLUME_RETRY = 1.0
_EXIT_POLL_SECONDS = 0.5
_IMAGE_PULL_BACKOFF_AFTER = 3.0
# A real kubelet's container restart back-off: 10 s, doubling, at most 5 minutes.
_RESTART_BACKOFF_BASE = 10.0
_RESTART_BACKOFF_CAP = 300.0
# FallbackToLogsOnError: a real kubelet keeps the last 80 lines, at most 2048 bytes.
_TERMINATION_LOG_LINES = 80
_TERMINATION_LOG_BYTES = 2048


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
        # Stops and finalizations: each takes about a second (squid's shutdown), so they
        # run beside the watch loop instead of holding up every other pod's events.
        self._teardowns: set[asyncio.Task[None]] = set()

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
                listing = await self._client.get(PODS.path())
                for pod in listing.get("items", []):
                    await self._observe("ADDED", pod)
                if ready is not None:
                    ready.set()
                await self._watch(listing["metadata"]["resourceVersion"])
        finally:
            await self.stop_all()

    async def stop_all(self) -> None:
        """Stop every squid this kubelet started, all at once (each takes about a second)."""
        await asyncio.gather(
            *(self._stop(pod) for pod in list(self._pods.values())),
            *self._teardowns,
            return_exceptions=True,
        )
        self._pods.clear()

    async def _watch(self, resource_version: str) -> None:
        try:
            async for event in self._client.watch(PODS.path(), resource_version=resource_version):
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
                self._in_background(self._stop(known), f"stop {uid}")
            self._addresses.release(uid)
            return
        node = spec.get("nodeName", "")
        if node not in ("", NODE_NAME):
            return
        if meta.get("deletionTimestamp"):
            self._in_background(self._finalize(pod), f"finalize {meta['namespace']}/{meta['name']}")
            return
        if uid in self._pods or pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
            return
        task = asyncio.create_task(self._start(pod), name=f"pod {meta['namespace']}/{meta['name']}")
        self._pods[uid] = RunningPod(meta["namespace"], meta["name"], uid, task)

    def _in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._teardowns.add(task)
        task.add_done_callback(self._teardowns.discard)

    async def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        }
        with contextlib.suppress(ConflictError):  # registered by an earlier run
            await self._client.create(NODES.path(), node)
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
        await self._client.patch(NODES.path(name=NODE_NAME, subresource="status"), status)

    async def _start(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        container = ((pod.get("spec", {}).get("containers") or [{}])[0]).get("name", "")
        try:
            if not pod.get("spec", {}).get("nodeName"):
                await self._bind(namespace, name, uid)
            plan = plan_pod(pod)
            address = self._addresses.assign(uid, pod.get("status", {}).get("podIP"))
            await self._run_container(pod, plan, address)
        except PodRejectedError as rejected:
            logger.warning("pod %s/%s rejected: %s", namespace, name, rejected.message)
            if rejected.waiting:
                await self._wait_forever(namespace, name, container, rejected)
            else:
                await self._report_failed(namespace, name, rejected.reason, rejected.message)
        except (toolchain.MissingToolError, OSError) as error:
            logger.warning("pod %s/%s cannot run: %s", namespace, name, error)
            await self._report_failed(namespace, name, "CannotRunSquid", str(error))
        except NotFoundError:
            pass  # the pod was deleted meanwhile
        except ApiError as error:
            logger.warning("pod %s/%s: API error %s", namespace, name, error)

    async def _run_container(self, pod: JsonObject, plan: SquidPodPlan, address: str) -> None:
        """Run the container until the restart policy lets it end; report each state."""
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        restarts = 0
        last_state: JsonObject | None = None
        while True:
            running = self._pods.get(uid)
            if running is None or running.stopping:
                return
            try:
                child, port = await self._launch(pod, plan, address)
            except ContainerExitedError as exited:
                ended = exited
            else:
                if running.stopping:
                    child.stop()
                    return
                running.child = child
                await self._report_running(
                    namespace, name, plan, address, child, restarts, last_state
                )
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
                ended = ContainerExitedError(
                    _exit_code(child.process.returncode or 0),
                    child.log_tail(_TERMINATION_LOG_LINES),
                )
            if running.stopping:
                return
            terminated = _terminated_state(ended, plan, str(self._pods_dir / uid / "root"))
            if not _restarts(plan.restart_policy, ended.exit_code):
                await self._report_terminated(namespace, name, plan, terminated, restarts)
                return
            restarts += 1
            last_state = {"terminated": terminated}
            delay = min(_RESTART_BACKOFF_CAP, _RESTART_BACKOFF_BASE * 2 ** (restarts - 1))
            await self._report_container(
                namespace,
                name,
                plan.container,
                phase="Running",
                state={
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {delay:.0f}s restarting failed container",
                    }
                },
                restarts=restarts,
                last_state=last_state,
            )
            await asyncio.sleep(delay)

    async def _wait_forever(
        self, namespace: str, name: str, container: str, rejected: PodRejectedError
    ) -> None:
        """A container that cannot start stays waiting, as on a real node (image pull back-off)."""
        state = {"waiting": {"reason": rejected.reason, "message": rejected.message}}
        await self._report_container(namespace, name, container, phase="Pending", state=state)
        if rejected.reason == ERR_IMAGE_PULL:
            await asyncio.sleep(_IMAGE_PULL_BACKOFF_AFTER)
            backoff = {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f"Back-off pulling image: {rejected.message}",
                }
            }
            await self._report_container(namespace, name, container, phase="Pending", state=backoff)

    async def _bind(self, namespace: str, name: str, uid: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        await self._client.create(PODS.path(namespace, name, "binding"), binding)

    async def _launch(self, pod: JsonObject, plan: SquidPodPlan, address: str) -> tuple[Child, int]:
        meta = pod["metadata"]
        pod_dir = self._pods_dir / meta["uid"]
        root, run = pod_dir / "root", pod_dir / "run"
        volumes = await self._fetch_volumes(meta["namespace"], plan)
        layout = pod_file_layout(plan, volumes)
        config_text = file_content(layout, plan.config_path)
        if config_text is None:
            raise PodRejectedError(
                "InvalidConfig",
                f"no squid configuration at {plan.config_path} in the pod's volumes",
            )
        config, ports = rewrite_config(
            config_text.decode(errors="replace"),
            pod_ip=address,
            pod_root=str(root),
            mount_paths=list(plan.mounts),
        )
        identity = _identity(plan.run_as)
        await asyncio.to_thread(_write_pod_dir, pod_dir, layout, config, plan.run_as)
        squid = str(toolchain.squid())
        config_file = str(run / "squid.conf")
        parsed = await asyncio.to_thread(
            subprocess.run,
            [*_as_identity(identity), squid, "-k", "parse", "-f", config_file],
            capture_output=True,
            text=True,
            check=False,
        )
        if parsed.returncode != 0:
            errors = [
                line for line in parsed.stderr.splitlines() if "ERROR" in line or "FATAL" in line
            ]
            raise ContainerExitedError(parsed.returncode, "\n".join(errors[-3:]) or parsed.stderr)
        child = spawn(
            f"squid-{meta['uid']}",
            [squid, "-N", "-f", config_file],
            pid_dir=self._pid_dir,
            log=run / "squid.out",
            user=identity,
        )
        if not await _listening(child, address, ports[0]):
            child.stop()
            raise ContainerExitedError(
                child.process.returncode or 1,
                f"squid did not start listening on {address}:{ports[0]}\n"
                + child.log_tail(_TERMINATION_LOG_LINES),
            )
        return child, ports[0]

    async def _fetch_volumes(
        self, namespace: str, plan: SquidPodPlan
    ) -> dict[str, dict[str, tuple[bytes, int]]]:
        volumes: dict[str, dict[str, tuple[bytes, int]]] = {}
        for mount_path, mount in plan.mounts.items():
            source = mount.source
            if source.kind == "emptyDir":
                continue
            kind = CONFIG_MAPS if source.kind == "configMap" else SECRETS
            while True:
                try:
                    body = await self._client.get(kind.path(namespace, source.name))
                    break
                except NotFoundError:
                    await asyncio.sleep(_MISSING_VOLUME_RETRY)  # the real kubelet waits too
            volumes[mount_path] = volume_files(source, body.get("data") or {})
        return volumes

    async def _report_running(
        self,
        namespace: str,
        name: str,
        plan: SquidPodPlan,
        address: str,
        child: Child,
        restarts: int,
        last_state: JsonObject | None,
    ) -> None:
        now = _now()
        await self._report_container(
            namespace,
            name,
            plan.container,
            phase="Running",
            state={"running": {"startedAt": now}},
            restarts=restarts,
            ready=True,
            last_state=last_state,
            extra={
                "podIP": address,
                "podIPs": [{"ip": address}],
                "image": plan.image,
                "containerID": f"loopback://{_squid_pid(child.process.pid)}",
            },
        )

    async def _report_terminated(
        self,
        namespace: str,
        name: str,
        plan: SquidPodPlan,
        terminated: JsonObject,
        restarts: int,
    ) -> None:
        phase = "Succeeded" if terminated["exitCode"] == 0 else "Failed"
        await self._report_container(
            namespace,
            name,
            plan.container,
            phase=phase,
            state={"terminated": terminated},
            restarts=restarts,
        )

    async def _report_container(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        phase: str,
        state: JsonObject,
        restarts: int = 0,
        ready: bool = False,
        last_state: JsonObject | None = None,
        extra: JsonObject | None = None,
    ) -> None:
        """Patch the pod's phase, conditions and its one container's status."""
        now = _now()
        extra = dict(extra or {})
        image = extra.pop("image", "")
        container_id = extra.pop("containerID", None)
        flag = "True" if ready else "False"
        conditions = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastTransitionTime": now},
        ]
        container_status: JsonObject = {
            "name": container,
            "image": image,
            "imageID": "",
            "ready": ready,
            "started": "running" in state,
            "restartCount": restarts,
            "state": state,
            "lastState": last_state or {},
        }
        if container_id:
            container_status["containerID"] = container_id
        status = {
            "status": {
                "phase": phase,
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "startTime": now,
                "conditions": conditions,
                "containerStatuses": [container_status],
                **extra,
            }
        }
        with contextlib.suppress(ApiError):
            await self._client.patch(PODS.path(namespace, name, "status"), status)

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
            await self._client.patch(PODS.path(namespace, name, "status"), status)

    async def _finalize(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        known = self._pods.pop(meta["uid"], None)
        if known is not None:
            await self._stop(known)
        self._addresses.release(meta["uid"])
        with contextlib.suppress(ApiError):
            await self._client.request(
                "DELETE",
                PODS.path(meta["namespace"], meta["name"]),
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


class ContainerExitedError(EgressProxiesError):
    """The container's squid ended (or never served): its exit code and last log lines."""

    def __init__(self, exit_code: int, log_tail: str) -> None:
        super().__init__(f"exit code {exit_code}")
        self.exit_code = exit_code
        self.log_tail = log_tail


def _exit_code(returncode: int) -> int:
    """A container runtime's exit code: 128 + the signal for a process killed by one."""
    return 128 - returncode if returncode < 0 else returncode


def _restarts(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def _terminated_state(ended: ContainerExitedError, plan: SquidPodPlan, pod_root: str) -> JsonObject:
    """A container's `terminated` state; its message is the log tail only if the pod asks.

    Paths in the log are shown as the container sees them (without the pod root).
    """
    terminated: JsonObject = {
        "exitCode": ended.exit_code,
        "reason": "Completed" if ended.exit_code == 0 else "Error",
        "finishedAt": _now(),
    }
    if plan.logs_as_termination_message and ended.exit_code != 0 and ended.log_tail:
        tail = ended.log_tail.replace(pod_root, "").encode()[-_TERMINATION_LOG_BYTES:]
        terminated["message"] = tail.decode(errors="replace")
    return terminated


def _identity(run_as: RunAs) -> Identity:
    """The host identity of a container: its runAsUser, else root (the squid image's user)."""
    if run_as.uid is None:
        return Identity()
    gid = run_as.gid if run_as.gid is not None else 0
    return Identity(uid=run_as.uid, gid=gid, groups=run_as.groups)


def _as_identity(identity: Identity) -> list[str]:
    flags = identity.setpriv_flags()
    return ["/usr/bin/setpriv", *flags, "--"] if flags else []


def _squid_pid(pid: int) -> int:
    """The squid process under `pid`: a root squid runs below its PID namespace's init."""
    current = pid
    for _ in range(3):
        try:
            argv0 = Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")[0]
            if Path(argv0.decode()).name == "squid":
                return current
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (OSError, IndexError):
            return pid
        if not children:
            return pid
        current = int(children[0])
    return pid


def _write_pod_dir(pod_dir: Path, layout: Sequence[PodPath], config: str, run_as: RunAs) -> None:
    """Lay out the pod's files with a kubelet's owners and modes, and the kubelet's own files.

    The rewritten squid.conf and the container log are the kubelet's, not the
    pod's: root-owned and readable, the log owned by the container's user so
    squid can reopen /dev/stdout and /dev/stderr as it could a pipe.
    """
    shutil.rmtree(pod_dir, ignore_errors=True)
    root = pod_dir / "root"
    root.mkdir(parents=True, mode=0o755)
    for entry in layout:
        target = root / entry.path.lstrip("/")
        _make_parents(root, target.parent)
        if entry.content is None:
            target.mkdir(exist_ok=True)
        else:
            target.write_bytes(entry.content)
        os.chown(target, entry.uid, entry.gid)
        os.chmod(target, entry.mode)
    run = pod_dir / "run"
    run.mkdir(mode=0o755)
    (run / "squid.conf").write_text(config)
    (run / "squid.conf").chmod(0o644)
    log = run / "squid.out"
    log.touch(mode=0o644)
    if run_as.uid is not None:
        os.chown(log, run_as.uid, run_as.gid if run_as.gid is not None else 0)
    for directory in (pod_dir, root):
        directory.chmod(0o755)


def _make_parents(root: Path, directory: Path) -> None:
    """Create the missing directories below the pod root as an image has them: root, 0755."""
    missing = []
    while directory != root and not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir(mode=0o755)
        path.chmod(0o755)


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
