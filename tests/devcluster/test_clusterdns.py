"""The dev cluster's DNS: what CoreDNS is told and what the `kube-dns` Service says."""

from __future__ import annotations

import ipaddress

import pytest

from egress_proxies.devcluster import clusterdns
from egress_proxies.devcluster.network import NodeNetwork

pytestmark = pytest.mark.unit

NETWORK = NodeNetwork(150)


def test_the_corefile_serves_the_cluster_zones_from_the_api_and_nothing_else() -> None:
    corefile = clusterdns.corefile(NETWORK, "/state/node/kubeconfig")
    assert corefile.startswith("cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {\n")
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {\n" in corefile
    assert "kubeconfig /state/node/kubeconfig\n" in corefile
    assert "ready 10.150.255.2:8181\n" in corefile
    # No upstream: every other name is NXDOMAIN at once.
    assert "forward" not in corefile
    root_block = corefile[corefile.index(".:53 {") :]
    assert "template ANY ANY {\n        rcode NXDOMAIN\n" in root_block


def test_kube_dns_is_a_fixed_cluster_ip_whose_endpoint_is_the_node() -> None:
    service = clusterdns.service(NETWORK)
    cluster_ip = service["spec"]["clusterIP"]
    assert cluster_ip == "10.150.128.10"
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(NETWORK.service_cidr)
    assert "selector" not in service["spec"]
    assert {(p["protocol"], p["port"]) for p in service["spec"]["ports"]} == {
        ("UDP", 53),
        ("TCP", 53),
    }

    slice_ = clusterdns.endpoint_slice(NETWORK)
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert slice_["endpoints"][0]["addresses"] == [NETWORK.node_address]
    # Each slice port carries the name of the Service port it serves.
    assert {p["name"] for p in slice_["ports"]} == {p["name"] for p in service["spec"]["ports"]}
