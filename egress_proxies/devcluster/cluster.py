"""The dev cluster's supervisor: brings the parts up in order and takes them down together.

`up` runs in the foreground until SIGINT/SIGTERM; `up --detach` starts the
same supervisor as a daemon and returns once the cluster is ready; `down`
signals the supervisor and then kills anything a crashed run left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from egress_proxies.devcluster.controlplane import ControlPlane, StartupError, StateLayout
from egress_proxies.devcluster.network import choose_network
from egress_proxies.devcluster.node import Node, NodeError, cgroup_name, remove_cgroups
from egress_proxies.devcluster.processes import process_runs, reap_stale, terminate_group
from egress_proxies.devcluster.volumes import HostPathProvisioner
from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import CUSTOM_RESOURCE_DEFINITIONS
from egress_proxies.toolchain import MissingToolError

Progress = Callable[[str], None]

DEFAULT_CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
_APPLY_PATCH = "application/apply-patch+yaml"


def print_progress(message: str) -> None:
    """Progress lines go to stderr so stdout stays machine-readable."""
    print(f"[dev-cluster] {message}", file=sys.stderr, flush=True)


class DevCluster:
    """One local cluster: control plane, CRDs and a real node, owned by this process."""

    def __init__(
        self,
        state_dir: Path,
        *,
        crd_dir: Path = DEFAULT_CRD_DIR,
        progress: Progress = print_progress,
    ) -> None:
        self.layout = StateLayout(state_dir.resolve())
        self._crd_dir = crd_dir
        self._progress = progress
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._network = choose_network(self.layout.root / "network.json")
        self._control_plane = ControlPlane(self.layout, progress, self._network)
        self._node: Node | None = None

    def __repr__(self) -> str:
        return f"<DevCluster {self.layout.root} {self._control_plane!r}>"

    async def serve(self, stop: asyncio.Event) -> None:
        """Start everything, mark the cluster ready, and run until `stop` is set."""
        claim_state_dir(self.layout)
        for leftover in reap_stale(self.layout.pids):
            self._progress(f"killed a process left by an earlier run: {leftover}")
        client: KubeClient | None = None
        try:
            credentials = await self._control_plane.start()
            client = KubeClient(credentials)
            await install_crds(client, self._crd_dir, self._progress)
            await self._serve_node(credentials, client, stop)
        finally:
            self.layout.ready.unlink(missing_ok=True)
            self._progress("stopping")
            if client is not None:
                await client.close()
            if self._node is not None:
                self._node.stop()
            self._control_plane.stop()
            reap_stale(self.layout.pids)
            self.layout.supervisor_pid.unlink(missing_ok=True)
            self._progress("stopped")

    async def _serve_node(self, credentials: Any, client: KubeClient, stop: asyncio.Event) -> None:
        await self._control_plane.start_scheduler()
        self._node = Node(
            self.layout.root / "node",
            self._network,
            self.layout.logs,
            self.layout.pids,
            self._progress,
        )
        node_credentials = self._control_plane.node_credentials
        assert node_credentials is not None
        await self._node.start(
            credentials, node_credentials, (self.layout.pki / "ca.crt").read_bytes()
        )
        provisioner = HostPathProvisioner(client, self._node.root / "volumes")
        await provisioner.install()
        provisioning = asyncio.create_task(provisioner.run(), name="volume provisioner")
        self._mark_ready(credentials)
        try:
            while not stop.is_set():
                failed = self._node.failed_child()
                if failed is not None:
                    raise StartupError(
                        f"{failed.name} exited with code {failed.process.returncode}; "
                        f"its log ({failed.log}) ends:\n{failed.log_tail()}"
                    )
                if provisioning.done():
                    provisioning.result()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        finally:
            provisioning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await provisioning

    def _mark_ready(self, credentials: Any) -> None:
        info = {"server": credentials.server, "kubeconfig": str(self.layout.kubeconfig)}
        info.update(self._network.describe())
        if self._node is not None:
            info["state_volume"] = str(self._node.state_volume)
        self.layout.ready.write_text(json.dumps(info))
        self._progress(f"ready: export KUBECONFIG={self.layout.kubeconfig}")


def claim_state_dir(layout: StateLayout) -> None:
    """Record this process as the state dir's supervisor; refuse if another one lives."""
    running = supervisor_pid(layout)
    if running is not None and running != os.getpid():
        raise StartupError(
            f"a dev cluster already runs from {layout.root} (pid {running}); "
            f"stop it with `egress-proxies dev-cluster down --state-dir {layout.root}`"
        )
    layout.supervisor_pid.write_text(f"{os.getpid()}\n{Path(sys.executable).name}\n")


def supervisor_pid(layout: StateLayout) -> int | None:
    """The pid of the live supervisor of this state dir, if any."""
    try:
        pid_text, executable = layout.supervisor_pid.read_text().split()[:2]
    except (FileNotFoundError, ValueError):
        return None
    pid = int(pid_text)
    return pid if process_runs(pid, executable) else None


async def install_crds(client: KubeClient, crd_dir: Path, progress: Progress) -> list[str]:
    """Server-side apply every CRD in `crd_dir` and wait until each is Established."""
    names: list[str] = []
    if not crd_dir.is_dir():
        return names
    for path in sorted(crd_dir.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            name = document["metadata"]["name"]
            progress(f"installing CRD {name}")
            await client.request(
                "PATCH",
                CUSTOM_RESOURCE_DEFINITIONS.path(name=name),
                body=document,
                params={"fieldManager": "egress-proxies-dev-cluster", "force": "true"},
                content_type=_APPLY_PATCH,
            )
            names.append(name)
    for name in names:
        await _wait_established(client, name)
    return names


async def _wait_established(client: KubeClient, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            crd = await client.get(CUSTOM_RESOURCE_DEFINITIONS.path(name=name))
        except KubeApiError:
            crd = {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        await asyncio.sleep(0.2)
    raise StartupError(f"CRD {name} was not Established after 30s")


def run_foreground(state_dir: Path, crd_dir: Path = DEFAULT_CRD_DIR) -> int:
    """`dev-cluster up`: serve until SIGINT/SIGTERM. Returns the process exit code."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await DevCluster(state_dir, crd_dir=crd_dir).serve(stop)

    try:
        asyncio.run(main())
    except (StartupError, NodeError, MissingToolError, KubeApiError) as error:
        print_progress(f"error: {error}")
        return 1
    return 0


def run_detached(state_dir: Path, crd_dir: Path = DEFAULT_CRD_DIR, timeout: float = 300.0) -> int:
    """`dev-cluster up --detach`: start the supervisor as a daemon, return once it is ready."""
    layout = StateLayout(state_dir.resolve())
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.logs.mkdir(exist_ok=True)
    if supervisor_pid(layout) is not None and layout.ready.exists():
        print_progress(f"already running: export KUBECONFIG={layout.kubeconfig}")
        return 0
    layout.ready.unlink(missing_ok=True)  # left by a supervisor that was killed
    log = layout.logs / "supervisor.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "egress_proxies.cli",
                "dev-cluster",
                "up",
                "--state-dir",
                str(layout.root),
                "--crds",
                str(crd_dir),
            ],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    offset = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        offset = _echo_new_lines(log, offset)
        if layout.ready.exists():
            return 0
        if process.poll() is not None:
            print_progress(f"the supervisor exited with code {process.returncode}; see {log}")
            return 1
        time.sleep(0.2)
    print_progress(f"not ready after {timeout:.0f}s; see {log}")
    return 1


def _echo_new_lines(log: Path, offset: int) -> int:
    with log.open("rb") as handle:
        handle.seek(offset)
        chunk = handle.read()
    sys.stderr.write(chunk.decode(errors="replace"))
    return offset + len(chunk)


def stop(state_dir: Path, timeout: float = 30.0) -> int:
    """`dev-cluster down`: stop the supervisor, then anything a crashed run left behind."""
    layout = StateLayout(state_dir.resolve())
    pid = supervisor_pid(layout)
    if pid is not None:
        print_progress(f"stopping the supervisor (pid {pid})")
        terminate_group_or_pid(pid, timeout)
    for leftover in reap_stale(layout.pids):
        print_progress(f"killed a leftover process: {leftover}")
    # A killed supervisor's node: its namespaces died with it; its pods' cgroups may linger.
    remove_cgroups(cgroup_name(layout.root))
    layout.ready.unlink(missing_ok=True)
    layout.supervisor_pid.unlink(missing_ok=True)
    print_progress("down")
    return 0


def terminate_group_or_pid(pid: int, timeout: float) -> None:
    """SIGTERM the supervisor and wait for it, escalating to SIGKILL."""

    def gone() -> bool:
        return not Path(f"/proc/{pid}").exists() or _is_zombie(pid)

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not gone():
        time.sleep(0.1)
    if not gone():
        terminate_group(pid, 1.0, gone)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True
