"""The gs:// and azblob:// reader (obstore), run where it can be: over obstore's S3 store against
a real S3-compatible server (versitygw). Google Cloud Storage and Azure cannot be reached from
here; what this shows is that the reader's listing, reads, deletes and errors work under the
same `BlobBackend` as s3://, and that the URLs parse and build their stores without a network.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from obstore.store import S3Store

from egress_proxies.stacks.backends import GoneHolders, open_backend, parse_backend_url
from egress_proxies.stacks.backends.blob import BackendUnavailableError, BlobBackend
from egress_proxies.stacks.backends.cloud import CloudStore
from egress_proxies.stacks.naming import PROJECT
from harness.s3 import REGION, S3Server

pytestmark = pytest.mark.integration

PREFIX = "operator"


def checkpoint(ip: str) -> bytes:
    stack = {"type": "pulumi:pulumi:Stack", "urn": "urn:x", "outputs": {"ip": ip}}
    return json.dumps({"checkpoint": {"latest": {"resources": [stack]}}}).encode()


def lock(host: str) -> bytes:
    return json.dumps({"pid": 1, "hostname": host, "timestamp": "2026-01-01T00:00:00Z"}).encode()


def over_s3(s3: S3Server, bucket: str) -> CloudStore:
    store = S3Store(
        bucket,
        prefix=PREFIX,
        endpoint=s3.endpoint,
        region=REGION,
        access_key_id=s3.access_key,
        secret_access_key=s3.secret_key,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    return CloudStore(parse_backend_url(f"gs://{bucket}/{PREFIX}"), store)


@pytest.fixture
def bucket(s3_server: S3Server) -> Iterator[str]:
    name = f"cloud-{secrets.token_hex(4)}"
    s3_server.create_bucket(name)
    client = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint,
        region_name=REGION,
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key,
    )
    objects = {
        f".pulumi/stacks/{PROJECT}/ns.a.json": checkpoint("10.0.0.1"),
        f".pulumi/stacks/{PROJECT}/ns.b.json": checkpoint("10.0.0.2"),
        f".pulumi/stacks/{PROJECT}/ns.b.json.bak": b"not a checkpoint",
        f".pulumi/locks/organization/{PROJECT}/ns.a/x.json": lock("gone-pod"),
        f".pulumi/locks/organization/{PROJECT}/ns.b/y.json": lock("live-pod"),
    }
    for key, body in objects.items():
        client.put_object(Bucket=name, Key=f"{PREFIX}/{key}", Body=body)
    yield name


def test_the_reader_lists_reads_and_clears_locks_like_the_s3_one(
    s3_server: S3Server, bucket: str
) -> None:
    url = parse_backend_url(f"gs://{bucket}/{PREFIX}")
    backend = BlobBackend(url, over_s3(s3_server, bucket), PROJECT)
    backend.check()

    assert backend.stacks() == ["ns.a", "ns.b"]
    assert [(s.name, s.outputs) for s in backend.states()] == [
        ("ns.a", {"ip": "10.0.0.1"}),
        ("ns.b", {"ip": "10.0.0.2"}),
    ]
    assert backend.read("ns.missing") is None
    assert backend.lock_holders() == {"gone-pod", "live-pod"}
    assert backend.clear_stale_locks(GoneHolders(hosts=frozenset({"gone-pod"}))) == ["ns.a"]
    assert not backend.locked("ns.a")
    assert backend.locked("ns.b")


def test_a_missing_bucket_is_one_line_naming_the_backend(s3_server: S3Server) -> None:
    backend = BlobBackend(
        parse_backend_url("gs://no-such-bucket/operator"),
        over_s3(s3_server, "no-such-bucket"),
        PROJECT,
    )
    with pytest.raises(BackendUnavailableError) as raised:
        backend.check()
    message = str(raised.value)
    assert message.startswith("state backend gs://no-such-bucket/operator: ")
    assert "\n" not in message
    assert s3_server.secret_key not in message


@pytest.mark.parametrize(
    "url",
    ["gs://stacks/egress-proxies", "azblob://stacks/egress-proxies?storage_account=egress"],
)
def test_gs_and_azblob_urls_open_a_reader_without_a_network(url: str, tmp_path: Path) -> None:
    backend = open_backend(parse_backend_url(url), tmp_path, PROJECT)
    assert isinstance(backend, BlobBackend)
    assert url in repr(backend)
