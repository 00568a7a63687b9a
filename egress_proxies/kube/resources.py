"""Kubernetes objects addressed by type: the one place that builds an API path.

A `Resource` names a kind by API group, version and plural; `path()` adds a
namespace, an object's name and a subresource:

    PODS.path("crawl", "squid")          /api/v1/namespaces/crawl/pods/squid
    PROXIES.path("crawl", "p1", "status")
        /apis/crawl.example.com/v1alpha1/namespaces/crawl/proxies/p1/status
    PROXIES.path()                       the Proxies of every namespace
    NAMESPACES.path(name="crawl")        /api/v1/namespaces/crawl

`tests/kube/test_kube_addressing.py` keeps it the one place: it fails on an
API path spelled out anywhere else in the package, the harness or the benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

from egress_proxies.model import GROUP, PLURAL, VERSION
from egress_proxies.pool_model import POOL_PLURAL


@dataclass(frozen=True)
class Resource:
    """A kind the API server serves: its group ("" for the core group), version and plural."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` an object of this kind carries: `v1`, or `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The path of a collection (in `namespace`, or in all), an object, or its subresource.

        ValueError for an address the API has no path for: a namespace for a
        cluster-scoped kind, a namespaced object without its namespace, a
        subresource without its object.
        """
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.plural} are cluster-scoped: no namespace {namespace!r}")
        if name is not None and namespace is None and self.namespaced:
            raise ValueError(f"{self.plural} {name!r}: a namespaced object needs its namespace")
        if subresource is not None and name is None:
            raise ValueError(f"{self.plural}: the subresource {subresource!r} needs an object name")
        parts = ["/api", self.version] if not self.group else ["/apis", self.group, self.version]
        if namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)


NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
PODS = Resource("", "v1", "pods")
SECRETS = Resource("", "v1", "secrets")
CONFIG_MAPS = Resource("", "v1", "configmaps")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
EVENTS = Resource("", "v1", "events")
SERVICES = Resource("", "v1", "services")
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices")
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", namespaced=False)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False
)
KOPF_PEERINGS = Resource("kopf.dev", "v1", "kopfpeerings")
CLUSTER_KOPF_PEERINGS = Resource("kopf.dev", "v1", "clusterkopfpeerings", namespaced=False)
PROXIES = Resource(GROUP, VERSION, PLURAL)
PROXY_POOLS = Resource(GROUP, VERSION, POOL_PLURAL)
