"""One real node: containerd, runc, the CNI plugins, the kubelet, kube-proxy and CoreDNS.

Everything of the node runs inside namespaces the dev cluster creates for
it, so two clusters on one machine never share a path, a socket, a chain or
an address:

- a **PID namespace** whose init is the pause binary: when the supervisor
  dies (even by SIGKILL) the init dies with it (parent-death signal), and
  the kernel kills every process of the node, containerd's shims and every
  container included;
- a **mount namespace** with tmpfs over `/run` (containerd's sockets and
  state, network namespace files), `/var/lib/cni`, `/var/lib/kubelet`,
  `/var/log/pods` and `/var/log/containers`, the paths containerd, libcni
  and the kubelet use whatever their configuration says;
- a **network namespace** joined to the host by one veth pair (see
  `network.py`), holding the CNI bridge and kube-proxy's iptables rules;
- a **cgroup** subtree of its own (`/egress-proxies-<id>` in every
  hierarchy): the kubelet's `cgroupRoot`, so every pod's cgroup is in it.

Like the kind node of the quickstart (its `extraMounts`), the node sees a
directory of the state dir at `/var/lib/egress-proxies-state`, where
`deploy/kind`'s hostPath PersistentVolume puts the operator's Pulumi state,
so the host can read the stacks with the plain `pulumi` CLI.

containerd's root (its images and snapshots) is on disk in the state dir,
so images are imported once per state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from egress_proxies import toolchain
from egress_proxies.devcluster import clusterdns
from egress_proxies.devcluster.network import NodeNetwork
from egress_proxies.devcluster.processes import Child, spawn
from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube import Credentials, KubeApiError, KubeClient, write_kubeconfig
from egress_proxies.kube.resources import NODES

NODE_NAME = "dev-node"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Private in the node's mount namespace: written by containerd, libcni and
# the kubelet at fixed paths.
PRIVATE_DIRS = ("/run", "/var/lib/cni", "/var/lib/kubelet", "/var/log/pods", "/var/log/containers")
IMAGES = ("pause", "squid")
# The node path of deploy/kind's hostPath PersistentVolume (the operator's state).
STATE_VOLUME_PATH = "/var/lib/egress-proxies-state"
# The operator image's user, who owns its state.
OPERATOR_UID = 65532
# Imported too when `tools/images.sh` has built them (the operator needs the pulumi builds).
OPTIONAL_IMAGES = ("operator", "redis")

Progress = Callable[[str], None]


class NodeError(RuntimeError, EgressProxiesError):
    """The node could not start."""


def cgroup_name(state_dir: Path) -> str:
    """The node's cgroup subtree, named after its state dir."""
    return "egress-proxies-" + hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]


def image_ref(image: str) -> str:
    """The local name of an image built by `tools/images.sh`."""
    return _image_file(f"{image}.ref").read_text().strip()


def has_image(image: str) -> bool:
    """Whether `tools/images.sh` has built the image."""
    return (toolchain.cache_dir() / "images" / f"{image}.ref").exists()


def _image_file(name: str) -> Path:
    path = toolchain.cache_dir() / "images" / name
    if not path.exists():
        raise toolchain.MissingToolError(
            f"{path} not found: run `make tools` (tools/images.sh) to build the node's images"
        )
    return path


class Node:
    """Starts, checks and stops the node's processes."""

    def __init__(
        self, root: Path, network: NodeNetwork, logs: Path, pids: Path, progress: Progress
    ) -> None:
        self.root = root
        self.network = network
        self._logs = logs
        self._pids = pids
        self._progress = progress
        self._children: list[Child] = []
        self._init_pid: int | None = None
        self.cgroup = cgroup_name(root.parent)

    def __repr__(self) -> str:
        return f"<Node {NODE_NAME} {self.network.cidr} init={self._init_pid}>"

    @property
    def state_volume(self) -> Path:
        """The host directory the node sees at `STATE_VOLUME_PATH`."""
        return self.root / "egress-proxies-state"

    # -- lifecycle -------------------------------------------------------

    async def start(
        self, credentials: Credentials, node_credentials: Credentials, ca_pem: bytes
    ) -> None:
        """Start the node and wait until the API server lists it Ready.

        `credentials` reach the API server from the host, `node_credentials`
        from inside the node.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        remove_cgroups(self.cgroup)
        make_cgroups(self.cgroup)
        kubeconfig = self.root / "kubeconfig"
        write_kubeconfig(kubeconfig, node_credentials)
        self._progress(f"starting the node's namespaces ({self.network.cidr})")
        await self._start_init()
        self._connect_network()
        await self._start_containerd()
        await self._import_images()
        self._write_cni_config()
        self._progress("starting kubelet")
        self._spawn_in_node("kubelet", self._kubelet_argv(kubeconfig, ca_pem))
        self._progress("starting kube-proxy")
        self._spawn_in_node("kube-proxy", self._kube_proxy_argv(kubeconfig))
        self._progress("starting CoreDNS")
        coredns = self._spawn_in_node("coredns", self._coredns_argv(kubeconfig))
        await self._wait_node_ready(credentials)
        async with KubeClient(credentials) as client:
            await clusterdns.publish(client, self.network)
        await self._wait_dns_ready(coredns)

    def stop(self) -> None:
        """Stop every node process, then the namespaces' init (which ends the rest)."""
        for child in reversed(self._children):
            child.stop(timeout=5)
        self._children.clear()
        self._init_pid = None
        remove_cgroups(self.cgroup)

    def alive(self) -> bool:
        """True while every node process runs."""
        return all(child.alive() for child in self._children)

    def failed_child(self) -> Child | None:
        """The first node process that exited."""
        return next((child for child in self._children if not child.alive()), None)

    # -- namespaces ------------------------------------------------------

    async def _start_init(self) -> None:
        self.state_volume.mkdir(exist_ok=True)
        os.chown(self.state_volume, OPERATOR_UID, OPERATOR_UID)
        volume = f"mount --bind {self.state_volume} {STATE_VOLUME_PATH}"
        mounts = "; ".join(
            [
                f"mkdir -p {path} && mount -t tmpfs -o mode=0755 tmpfs {path}"
                for path in PRIVATE_DIRS
            ]
            + [f"mkdir -p {STATE_VOLUME_PATH} && {volume}"]
        )
        init = _image_file("pause.bin")
        inner = f"set -e; {mounts}; mkdir -p /run/netns /run/containerd; exec {init}"
        child = self._spawn(
            "node-init",
            [
                "/usr/bin/unshare",
                "--pid",
                "--fork",
                "--kill-child=KILL",
                "--mount",
                "--propagation",
                "private",
                "--mount-proc",
                "--net",
                "--",
                "/bin/sh",
                "-c",
                inner,
            ],
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pid = _init_of(child.process.pid)
            if pid is not None and _runs_pause(pid):
                self._init_pid = pid
                return
            if not child.alive():
                raise NodeError(f"the node's namespaces did not start: {child.log_tail()}")
            await asyncio.sleep(0.05)
        raise NodeError(f"the node's namespaces did not start within 20s: {child.log_tail()}")

    def _enter(self, *, mount: bool = True) -> list[str]:
        assert self._init_pid is not None
        flags = ["-p", "-m", "-n"] if mount else ["-n"]
        return ["nsenter", "-t", str(self._init_pid), *flags, "--"]

    def _run_in_node(self, argv: list[str]) -> str:
        result = subprocess.run(
            [*self._enter(), *argv], capture_output=True, text=True, check=False, timeout=120
        )
        if result.returncode != 0:
            raise NodeError(f"{' '.join(argv)} in the node failed: {result.stderr.strip()}")
        return result.stdout

    def _connect_network(self) -> None:
        net = self.network
        host = [
            ["ip", "link", "add", net.host_link, "type", "veth", "peer", "name", net.node_link],
            ["ip", "link", "set", net.node_link, "netns", str(self._init_pid)],
            ["ip", "addr", "add", f"{net.host_address}/{net.link_prefix}", "dev", net.host_link],
            ["ip", "link", "set", net.host_link, "up"],
            ["ip", "route", "add", net.cidr, "via", net.node_address, "dev", net.host_link],
        ]
        node = [
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "set", net.node_link, "name", "eth0"],
            ["ip", "addr", "add", f"{net.node_address}/{net.link_prefix}", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
            # Forwarding between the veth and the bridge, in this namespace only.
            ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        ]
        for argv in host:
            _check(argv)
        for argv in node:
            _check([*self._enter(mount=False), *argv])
        # Pod-to-Service-to-pod on one bridge needs bridged traffic through iptables.
        with contextlib.suppress(NodeError):
            _check(
                [
                    *self._enter(mount=False),
                    "sysctl",
                    "-q",
                    "-w",
                    "net.bridge.bridge-nf-call-iptables=1",
                ]
            )

    # -- containerd ------------------------------------------------------

    async def _start_containerd(self) -> None:
        config = self.root / "containerd.toml"
        config.write_text(self._containerd_config())
        self._progress("starting containerd")
        child = self._spawn_in_node(
            "containerd", [str(toolchain.find("containerd")), "--config", str(config)]
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not child.alive():
                raise NodeError(
                    f"containerd exited; its log ({child.log}) ends:\n{child.log_tail()}"
                )
            probe = await asyncio.to_thread(
                subprocess.run,
                [
                    *self._enter(),
                    str(toolchain.find("ctr")),
                    "--address",
                    CONTAINERD_SOCKET,
                    "version",
                ],
                capture_output=True,
                check=False,
            )
            if probe.returncode == 0:
                return
            await asyncio.sleep(0.2)
        raise NodeError(f"containerd did not answer within 60s; its log ends:\n{child.log_tail()}")

    def _containerd_config(self) -> str:
        shim = toolchain.find("containerd-shim-runc-v2")
        return f"""\
version = 3
root = '{self.root / "containerd"}'
state = '/run/containerd'
disabled_plugins = [
  'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs', 'io.containerd.nri.v1.nri',
  'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing',
]

[grpc]
  address = '{CONTAINERD_SOCKET}'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{image_ref("pause")}'
  [plugins.'io.containerd.cri.v1.runtime']
    # This machine's bounding set has no CAP_SYS_RESOURCE: never lower an oom_score_adj.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        runtime_path = '{shim}'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{RUNC}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{CNI_BIN_DIR}']
      conf_dir = '{self.root / "cni"}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
"""

    async def _import_images(self) -> None:
        ctr = [str(toolchain.find("ctr")), "--address", CONTAINERD_SOCKET, "-n", "k8s.io"]
        present = self._run_in_node([*ctr, "images", "list", "-q"]).split()
        built = [image for image in OPTIONAL_IMAGES if has_image(image)]
        for image in (*IMAGES, *built):
            ref = image_ref(image)
            if ref in present:
                continue
            self._progress(f"importing image {ref}")
            archive = _image_file(f"{image}.tar").resolve()
            await asyncio.to_thread(self._run_in_node, [*ctr, "images", "import", str(archive)])

    def _write_cni_config(self) -> None:
        conf_dir = self.root / "cni"
        conf_dir.mkdir(exist_ok=True)
        config = {
            "cniVersion": "1.0.0",
            "name": "dev-cluster",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    # Nothing leaves the node: no masquerade, and the node has no default route.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [
                            [{"subnet": self.network.pod_cidr, "gateway": self.network.pod_gateway}]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (conf_dir / "10-dev-cluster.conflist").write_text(json.dumps(config, indent=2))

    # -- kubelet and kube-proxy -----------------------------------------

    def _kubelet_argv(self, kubeconfig: Path, ca_pem: bytes) -> list[str]:
        ca = self.root / "ca.crt"
        ca.write_bytes(ca_pem)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine: cgroup v1 (hybrid), no systemd, no swap, no CAP_SYS_RESOURCE.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
            "address": self.network.node_address,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca)},
            },
            "authorization": {"mode": "Webhook"},
            # A shared development disk: never evict or collect images for space.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "10s",
            "resolvConf": "/etc/resolv.conf",
            "clusterDNS": [self.network.dns_service_ip],
            "clusterDomain": clusterdns.CLUSTER_DOMAIN,
        }
        path = self.root / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        return [
            str(toolchain.find("kubelet")),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={self.network.node_address}",
            "--v=1",
        ]

    def _kube_proxy_argv(self, kubeconfig: Path) -> list[str]:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": self.network.pod_cidr,
            # Global sysctls: not this namespace's to change.
            "conntrack": {"maxPerCore": 0},
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
        }
        path = self.root / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        return [str(toolchain.find("kube-proxy")), f"--config={path}", "--v=1"]

    def _coredns_argv(self, kubeconfig: Path) -> list[str]:
        path = self.root / "Corefile"
        path.write_text(clusterdns.corefile(self.network, str(kubeconfig)))
        return [str(toolchain.find("coredns")), "-conf", str(path)]

    async def _wait_dns_ready(self, coredns: Child) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not coredns.alive():
                raise NodeError(
                    f"coredns exited with code {coredns.process.returncode}; "
                    f"its log ({coredns.log}) ends:\n{coredns.log_tail()}"
                )
            if await clusterdns.is_ready(self.network):
                self._progress(f"cluster DNS ready at {self.network.dns_service_ip}")
                return
            await asyncio.sleep(0.2)
        raise NodeError(f"coredns not ready after 60s; its log ends:\n{coredns.log_tail()}")

    async def _wait_node_ready(self, credentials: Credentials) -> None:
        deadline = time.monotonic() + 120
        async with KubeClient(credentials) as client:
            while time.monotonic() < deadline:
                failed = self.failed_child()
                if failed is not None:
                    raise NodeError(
                        f"{failed.name} exited with code {failed.process.returncode}; "
                        f"its log ({failed.log}) ends:\n{failed.log_tail()}"
                    )
                try:
                    node = await client.get(NODES.path(name=NODE_NAME))
                except KubeApiError:
                    node = {}
                conditions = (node.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    self._progress(f"node {NODE_NAME} is Ready")
                    return
                await asyncio.sleep(0.5)
        kubelet = next(child for child in self._children if child.name == "kubelet")
        raise NodeError(
            f"node {NODE_NAME} not Ready after 120s; the kubelet's log ends:\n{kubelet.log_tail()}"
        )

    # -- processes -------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> Child:
        child = spawn(name, argv, pid_dir=self._pids, log=self._logs / f"{name}.log")
        self._children.append(child)
        return child

    def _spawn_in_node(self, name: str, argv: list[str]) -> Child:
        return self._spawn(name, [*self._enter(), *argv])


def cgroup_dirs(name: str) -> list[Path]:
    """The node's cgroup directory in every mounted hierarchy."""
    hierarchies = sorted(
        path for path in CGROUP_ROOT.iterdir() if path.is_dir() and not path.is_symlink()
    )
    return [path / name for path in hierarchies]


def make_cgroups(name: str) -> None:
    """Create `/<name>` in every hierarchy (cpuset: with the parent's sets)."""
    for path in cgroup_dirs(name):
        path.mkdir(exist_ok=True)
        if (path / "cpuset.cpus").exists():
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((path.parent / knob).read_text())


def remove_cgroups(name: str, timeout: float = 10.0) -> None:
    """Kill whatever is left in the node's cgroups, then remove them deepest first."""
    directories = [directory for directory in cgroup_dirs(name) if directory.exists()]
    deadline = time.monotonic() + timeout
    for directory in directories:
        for procs in directory.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
    for directory in directories:
        nested = sorted(
            (p for p in directory.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        )
        for path in [*nested, directory]:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise NodeError(f"cgroup {path} stays busy") from None
                    time.sleep(0.05)


def _check(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def _init_of(unshare_shell_pid: int) -> int | None:
    """The pid (on the host) of the node's init: the child of unshare."""
    try:
        children = Path(f"/proc/{unshare_shell_pid}/task/{unshare_shell_pid}/children").read_text()
    except FileNotFoundError:
        return None
    pids = children.split()
    return int(pids[0]) if pids else None


def _runs_pause(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name.startswith("pause")
    except OSError:
        return False


def rmtree_node_state(root: Path) -> None:
    """Remove a node's on-disk state (containerd's images and snapshots included)."""
    shutil.rmtree(root, ignore_errors=True)
