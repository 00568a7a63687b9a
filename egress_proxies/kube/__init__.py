"""A small async Kubernetes REST client shared by the operator, the dev cluster and the tests."""

from egress_proxies.kube.client import (
    ApiError,
    Credentials,
    JsonObject,
    KubeClient,
    write_kubeconfig,
)

__all__ = ["ApiError", "Credentials", "JsonObject", "KubeClient", "write_kubeconfig"]
