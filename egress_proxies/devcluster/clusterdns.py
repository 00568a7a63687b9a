"""Cluster DNS: CoreDNS on the node, and the `kube-dns` Service pods query.

CoreDNS (built by `tools/build.sh` with only the plugins the Corefile below
names) runs in the node's namespaces beside the kubelet and reads Services,
EndpointSlices, Pods and Namespaces with the node's kubeconfig. Pods reach it
as on any cluster: the kubelet writes the `kube-dns` Service's ClusterIP
(`10.K.128.10`) into every pod's /etc/resolv.conf, and kube-proxy carries the
query from that ClusterIP to the Service's one endpoint, the node's address,
where CoreDNS listens on port 53.

Nothing leaves this machine, so there is no `forward`: names outside the
cluster's zones get NXDOMAIN at once from `template`, so a resolver walking
its search list goes on to the next name instead of stopping at SERVFAIL.
"""

from __future__ import annotations

import aiohttp

from egress_proxies.devcluster.network import NodeNetwork
from egress_proxies.kube import JsonObject, KubeClient
from egress_proxies.kube.resources import ENDPOINT_SLICES, SERVICES

CLUSTER_DOMAIN = "cluster.local"
SERVICE_NAME = "kube-dns"
NAMESPACE = "kube-system"
READY_PORT = 8181
HEALTH_PORT = 8080
FIELD_MANAGER = "egress-proxies-dev-cluster"
_PORTS = ({"name": "dns", "protocol": "UDP"}, {"name": "dns-tcp", "protocol": "TCP"})


def corefile(network: NodeNetwork, kubeconfig: str) -> str:
    """CoreDNS's configuration: the cluster's zones from the API, NXDOMAIN for every other name.

    `cache` keeps upstream's default of not caching cluster.local answers, so
    a Service resolves as soon as it exists.
    """
    node = network.node_address
    return f"""\
{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    errors
    health {node}:{HEALTH_PORT}
    ready {node}:{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 30
    }}
    cache 30 {{
        disable success {CLUSTER_DOMAIN}
        disable denial {CLUSTER_DOMAIN}
    }}
    loadbalance
}}
.:53 {{
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def service(network: NodeNetwork) -> JsonObject:
    """The `kube-dns` Service: a fixed ClusterIP and no selector (CoreDNS is not a pod)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": SERVICE_NAME,
            "namespace": NAMESPACE,
            "labels": {"k8s-app": SERVICE_NAME, "kubernetes.io/name": "CoreDNS"},
        },
        "spec": {
            "clusterIP": network.dns_service_ip,
            "ports": [{**port, "port": 53, "targetPort": 53} for port in _PORTS],
        },
    }


def endpoint_slice(network: NodeNetwork) -> JsonObject:
    """The Service's one endpoint: CoreDNS on the node's address."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{SERVICE_NAME}-node",
            "namespace": NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": SERVICE_NAME,
                # Not the EndpointSlice controller's: it leaves this slice alone.
                "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [network.node_address], "conditions": {"ready": True}}],
        "ports": [{**port, "port": 53} for port in _PORTS],
    }


async def publish(client: KubeClient, network: NodeNetwork) -> None:
    """Create or update the `kube-dns` Service and its EndpointSlice."""
    await client.apply(
        SERVICES.path(NAMESPACE, SERVICE_NAME),
        service(network),
        field_manager=FIELD_MANAGER,
        force=True,
    )
    await client.apply(
        ENDPOINT_SLICES.path(NAMESPACE, f"{SERVICE_NAME}-node"),
        endpoint_slice(network),
        field_manager=FIELD_MANAGER,
        force=True,
    )


async def is_ready(network: NodeNetwork) -> bool:
    """True once CoreDNS answers its readiness check (its informers have synced)."""
    url = f"http://{network.node_address}:{READY_PORT}/ready"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False
