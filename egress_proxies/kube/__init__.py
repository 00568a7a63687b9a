"""Kubernetes API access shared by the operator, the dev cluster and the tests (over lightkube)."""

from egress_proxies.kube.client import JsonObject, KubeClient
from egress_proxies.kube.config import Credentials, LoginMaterial, write_kubeconfig
from egress_proxies.kube.errors import (
    ConflictError,
    KubeApiError,
    KubeConfigError,
    NotFoundError,
    TransportError,
)

__all__ = [
    "ConflictError",
    "Credentials",
    "JsonObject",
    "KubeApiError",
    "KubeClient",
    "KubeConfigError",
    "LoginMaterial",
    "NotFoundError",
    "TransportError",
    "write_kubeconfig",
]
