"""The reflector against the dev cluster's real kube-apiserver: list, watch, 410, a sinked Fleet."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping

import pytest

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.catalog.sinks import ProxySink, SecretSink
from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.client import JsonObject
from egress_proxies.kube.reflector import GONE, Reflector
from egress_proxies.vocabulary import UID_LABEL
from harness.cluster import wait_for
from harness.operator import proxy_path
from harness.tier import external_proxy, report_healthy

pytestmark = pytest.mark.integration


class CountingWatches:
    """The client, counting the watches a reflector starts."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.watches = 0

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """The client's request."""
        return await self._client.request(
            method, path, body=body, params=params, content_type=content_type
        )

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[JsonObject]:
        """The client's watch, counted."""
        self.watches += 1
        return self._client.watch(
            path, resource_version=resource_version, timeout_seconds=timeout_seconds
        )


async def test_mirrors_proxies_and_their_status_into_a_fleet(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(proxy_path(namespace), external_proxy("listed", 3128))
    fleet = Fleet()
    client = CountingWatches(kube)
    reflector = Reflector(client, proxy_path(namespace), ProxySink(fleet), watch_timeout=5)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 10)
        assert [r.name for r in fleet.records()] == ["listed"]
        listed_version = reflector.resource_version

        await kube.create(proxy_path(namespace), external_proxy("watched", 3129, max_leases=3))
        await report_healthy(kube, namespace, "watched", latency=12)

        async def watched_is_healthy() -> bool:
            records = {r.name: r for r in fleet.records()}
            return "watched" in records and records["watched"].healthy is True

        await wait_for(watched_is_healthy, timeout=10)
        watched = {r.name: r for r in fleet.records()}["watched"]
        assert (watched.port, watched.max_leases, watched.latency_millis) == (3129, 3, 12)
        assert reflector.resource_version != listed_version

        await kube.delete(proxy_path(namespace, "listed"))

        async def listed_is_gone() -> bool:
            return [r.name for r in fleet.records()] == ["watched"]

        await wait_for(listed_is_gone, timeout=10)

        # The server ends each watch after watch_timeout; the reflector resumes, never relists.
        async def resumed() -> bool:
            return client.watches >= 2

        await wait_for(resumed, timeout=15)
        assert reflector.lists == 1
        assert reflector.errors == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_compacted_resource_version_is_410_and_the_reflector_relists(
    kube: KubeClient, namespace: str
) -> None:
    reflector = Reflector(kube, proxy_path(namespace), ProxySink(Fleet()))
    reflector.resource_version = "1"
    with pytest.raises(KubeApiError) as raised:
        await reflector.watch_once()
    assert raised.value.status == GONE

    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 10)
        assert reflector.resource_version not in (None, "1")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_label_selected_secrets_give_records_their_credentials(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {"name": "unrelated"},
            "data": {"username": base64.b64encode(b"u").decode()},
        },
    )
    fleet = Fleet()
    proxies = Reflector(kube, proxy_path(namespace), ProxySink(fleet))
    secrets = Reflector(
        kube, f"/api/v1/namespaces/{namespace}/secrets", SecretSink(fleet), label_selector=UID_LABEL
    )
    tasks = [asyncio.create_task(r.run()) for r in (proxies, secrets)]
    try:
        await asyncio.wait_for(secrets.synced.wait(), 10)
        assert fleet.secret(namespace, "unrelated") is None
        await kube.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "metadata": {"name": "creds", "labels": {UID_LABEL: "some-uid"}},
                "data": {
                    "username": base64.b64encode(b"crawler").decode(),
                    "password": base64.b64encode(b"s3cret").decode(),
                },
            },
        )

        async def creds_seen() -> bool:
            return fleet.secret(namespace, "creds") == {"username": "crawler", "password": "s3cret"}

        await wait_for(creds_seen, timeout=10)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
