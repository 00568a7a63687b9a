"""Kubernetes objects addressed by type (`kube/resources.py`), one annotation, a closed client."""

from __future__ import annotations

import pytest

from egress_proxies.errors import ClosedError
from egress_proxies.kube import Credentials, KubeClient, NotFoundError
from egress_proxies.kube.client import JsonObject, annotate
from egress_proxies.kube.resources import (
    CLUSTER_KOPF_PEERINGS,
    NAMESPACES,
    PODS,
    PROXIES,
    PROXY_POOLS,
    Resource,
)

pytestmark = pytest.mark.unit


def test_paths_of_collections_objects_and_subresources() -> None:
    assert PODS.path("crawl", "squid") == "/api/v1/namespaces/crawl/pods/squid"
    assert PODS.path("crawl") == "/api/v1/namespaces/crawl/pods"
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("crawl", "squid", "binding") == "/api/v1/namespaces/crawl/pods/squid/binding"
    assert NAMESPACES.path(name="crawl") == "/api/v1/namespaces/crawl"
    assert PROXIES.path("a", "p1", "status") == (
        "/apis/crawl.example.com/v1alpha1/namespaces/a/proxies/p1/status"
    )
    assert PROXY_POOLS.path() == "/apis/crawl.example.com/v1alpha1/proxypools"
    assert CLUSTER_KOPF_PEERINGS.path(name="e") == "/apis/kopf.dev/v1/clusterkopfpeerings/e"
    assert (PODS.api_version, PROXIES.api_version) == ("v1", "crawl.example.com/v1alpha1")


@pytest.mark.parametrize(
    ("resource", "address", "message"),
    [
        (NAMESPACES, {"namespace": "a", "name": "b"}, "namespaces are cluster-scoped"),
        (PODS, {"name": "squid"}, "pods 'squid': a namespaced object needs its namespace"),
        (PODS, {"namespace": "a", "subresource": "status"}, "'status' needs an object name"),
    ],
)
def test_an_address_the_api_has_no_path_for_is_refused(
    resource: Resource, address: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        resource.path(**address)


class RecordingApi:
    """Merge patches by path; a path it does not hold answers 404 as the API server does."""

    def __init__(self, *paths: str) -> None:
        self.patches: dict[str, list[JsonObject]] = {path: [] for path in paths}

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        if path not in self.patches:
            raise NotFoundError(404, "NotFound", path)
        self.patches[path].append(body)
        return body


async def test_annotate_sets_one_annotation_and_leaves_a_gone_object_alone() -> None:
    here, gone, key = PROXIES.path("a", "p1"), PROXIES.path("a", "p2"), "crawl.example.com/k"
    api = RecordingApi(here)
    await annotate(api, here, key, "now")
    await annotate(api, gone, key, "now")
    assert api.patches == {here: [{"metadata": {"annotations": {key: "now"}}}]}


async def test_a_closed_client_refuses_new_requests_instead_of_reopening() -> None:
    # Nothing listens on port 1: a client that reopened would fail with a TransportError.
    client = KubeClient(Credentials.from_token("https://127.0.0.1:1", b"", "unused"))
    await client.close()
    with pytest.raises(ClosedError, match=r"client for https://127.0.0.1:1 is closed"):
        await client.get(PODS.path("a", "b"))
    assert repr(client) == "<KubeClient https://127.0.0.1:1 [closed]>"
