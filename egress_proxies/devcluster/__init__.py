"""A local cluster: a control plane and one real node (kubelet, containerd, runc).

Used by the tests, `make demo` and anyone developing the operator without a
cluster of their own. See docs/dev-cluster.md.
"""

from egress_proxies.devcluster.cluster import DevCluster, install_crds
from egress_proxies.devcluster.controlplane import StartupError, StateLayout
from egress_proxies.kube import Credentials, KubeApiError, KubeClient, write_kubeconfig
from egress_proxies.toolchain import MissingToolError

__all__ = [
    "Credentials",
    "DevCluster",
    "KubeApiError",
    "KubeClient",
    "MissingToolError",
    "StartupError",
    "StateLayout",
    "install_crds",
    "write_kubeconfig",
]
