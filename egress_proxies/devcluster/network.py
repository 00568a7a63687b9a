"""The addresses of one dev cluster's node: a /16 of its own inside 10.0.0.0/8.

The node (containerd, the kubelet, kube-proxy and every pod) lives in a
network namespace the dev cluster creates, joined to the host by one veth
pair. Inside the cluster's block `10.K.0.0/16`:

| range | what |
|---|---|
| `10.K.0.0/24` | pod addresses (CNI host-local), gateway `10.K.0.1` on the node's bridge |
| `10.K.128.0/20` | Service ClusterIPs; `10.K.128.1` is the `kubernetes` Service |
| `10.K.128.10` | the `kube-dns` Service (cluster DNS) |
| `10.K.255.1` | the host's end of the veth: the API server and host origins, for pods |
| `10.K.255.2` | the node's end (the Node's InternalIP) |

The host routes the block to the node and nothing else; the node has no
default route, so nothing a pod sends can leave the machine.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

_FIRST_BLOCK, _LAST_BLOCK = 100, 249
IP = "/usr/sbin/ip"


@dataclass(frozen=True)
class NodeNetwork:
    """One cluster's block and the names of its host-side links."""

    block: int

    @property
    def cidr(self) -> str:
        """The whole block, routed from the host to the node."""
        return f"10.{self.block}.0.0/16"

    @property
    def pod_cidr(self) -> str:
        """Pod addresses."""
        return f"10.{self.block}.0.0/24"

    @property
    def pod_gateway(self) -> str:
        """The node's bridge address: the pods' default gateway."""
        return f"10.{self.block}.0.1"

    @property
    def service_cidr(self) -> str:
        """Service ClusterIPs."""
        return f"10.{self.block}.128.0/20"

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP (the first of the range)."""
        return f"10.{self.block}.128.1"

    @property
    def dns_service_ip(self) -> str:
        """The `kube-dns` Service's ClusterIP: the cluster DNS in every pod's resolv.conf."""
        return f"10.{self.block}.128.10"

    @property
    def host_address(self) -> str:
        """The host's end of the veth: reachable from every pod."""
        return f"10.{self.block}.255.1"

    @property
    def node_address(self) -> str:
        """The node's end of the veth: the Node's InternalIP."""
        return f"10.{self.block}.255.2"

    @property
    def link_prefix(self) -> int:
        """The veth pair's prefix length."""
        return 30

    @property
    def host_link(self) -> str:
        """The veth's host-side name (unique per cluster on this machine)."""
        return f"epx{self.block}h"

    @property
    def node_link(self) -> str:
        """The veth's name before it moves into the node's namespace."""
        return f"epx{self.block}n"

    def describe(self) -> dict[str, str]:
        """What tests and users read from the state dir's `network.json`."""
        return {
            "pod_cidr": self.pod_cidr,
            "service_cidr": self.service_cidr,
            "dns_service_ip": self.dns_service_ip,
            "host_address": self.host_address,
            "node_address": self.node_address,
            "host_link": self.host_link,
        }


def choose_network(state_file: Path) -> NodeNetwork:
    """The block this state dir used before if it is still free, else a free one."""
    taken = _blocks_in_use()
    try:
        previous = NodeNetwork(**{"block": json.loads(state_file.read_text())["block"]})
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        previous = None
    if previous is not None and previous.block not in taken:
        return previous
    free = [block for block in range(_FIRST_BLOCK, _LAST_BLOCK + 1) if block not in taken]
    if not free:
        raise RuntimeError(
            f"no free 10.K.0.0/16 block for a dev cluster (K in {_FIRST_BLOCK}-{_LAST_BLOCK})"
        )
    network = NodeNetwork(random.choice(free))  # noqa: S311 (a subnet pick, not a secret)
    state_file.write_text(json.dumps({**asdict(network), **network.describe()}, indent=2) + "\n")
    return network


def _blocks_in_use() -> set[int]:
    """Second octets of every 10.x address or route on the host."""
    out = "".join(
        subprocess.run([IP, *argv], capture_output=True, text=True, check=True).stdout
        for argv in (["-o", "addr"], ["route"])
    )
    taken: set[int] = set()
    for word in out.replace("/", " ").split():
        try:
            address = ipaddress.ip_address(word)
        except ValueError:
            continue
        if address in ipaddress.ip_network("10.0.0.0/8"):
            taken.add(int(str(address).split(".")[1]))
    return taken
