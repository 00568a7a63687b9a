"""The GCE inventory client and its google-auth tokens against a local stand-in for Google.

Google cannot be reached from here; `fake_compute` stands in for it (see its
docstring for what that does and does not prove). The stand-in serves on the
test's own event loop, so a token refresh that blocked the loop would never
get its answer: every test here that fetches a token also proves the refresh
runs off the loop.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.compute_engine import _metadata

from egress_proxies.clock import ManualClock
from egress_proxies.model import ProviderName
from egress_proxies.providers.gcp import GceInventory
from egress_proxies.providers.gcp_auth import (
    COMPUTE_SCOPE,
    CredentialsError,
    GoogleAuthTokens,
    key_file_tokens,
    metadata_server_tokens,
)
from egress_proxies.providers.inventory import (
    InstanceId,
    InstanceState,
    InventoryError,
    PartialFailure,
)
from egress_proxies.vocabulary import GCE_SHARD_LABEL, GCE_UID_LABEL
from tests.providers.fake_compute import (
    PROJECT,
    SERVICE_ACCOUNT_EMAIL,
    FakeCompute,
    FakeInstance,
    labelled,
)

pytestmark = pytest.mark.integration


async def test_lists_labelled_instances_across_zones(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [
        labelled("us-central1-a", "proxy-aaaa", "uid-a"),
        labelled("europe-west4-b", "proxy-bbbb", "uid-b", status="STAGING"),
        labelled("europe-west4-b", "proxy-cccc", "uid-c", status="SOME_NEW_STATE"),
        FakeInstance("us-central1-a", "somebody-elses-vm", {"team": "crawl"}),
    ]

    listing = await inventory.list_tagged()

    assert listing.complete
    assert listing.provider is ProviderName.GCP
    by_uid = {instance.uid_label: instance for instance in listing.instances}
    assert set(by_uid) == {"uid-a", "uid-b", "uid-c"}
    assert by_uid["uid-a"].instance_id == "zones/us-central1-a/instances/proxy-aaaa"
    assert by_uid["uid-a"].state is InstanceState.RUNNING
    assert by_uid["uid-b"].state is InstanceState.PROVISIONING
    assert by_uid["uid-c"].state is InstanceState.STOPPED
    assert by_uid["uid-a"].created_at == datetime(2024, 5, 1, 17, 20, 30, 123000, tzinfo=UTC)
    [query] = compute.list_queries
    assert query["filter"] == f"labels.{GCE_UID_LABEL}:*"
    assert query["returnPartialSuccess"] == "true"
    assert repr(listing) == "<InventoryListing gcp: 3 instances>"


async def test_follows_page_tokens_to_the_last_page(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.max_page_size = 2
    compute.instances = [labelled(f"zone-{n % 2}", f"proxy-{n}", f"uid-{n}") for n in range(5)]

    listing = await inventory.list_tagged()

    assert sorted(i.uid_label for i in listing.instances) == [f"uid-{n}" for n in range(5)]
    assert [q.get("pageToken") for q in compute.list_queries] == [None, "2", "4"]
    assert listing.complete


async def test_an_unreachable_zone_is_reported_not_fatal(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [labelled("us-central1-a", "proxy-aaaa", "uid-a")]
    compute.unreachable_zones = {"asia-east1-c"}

    listing = await inventory.list_tagged()

    assert [i.uid_label for i in listing.instances] == ["uid-a"]
    assert not listing.complete
    assert {failure.scope for failure in listing.partial_failures} == {"zones/asia-east1-c"}
    assert PartialFailure("zones/asia-east1-c", "unreachable") in listing.partial_failures
    assert repr(listing) == "<InventoryListing gcp: 1 instances | unreadable: zones/asia-east1-c>"


async def test_delete_by_id_and_an_instance_already_gone_is_deleted(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [labelled("us-central1-a", "proxy-aaaa", "uid-a")]
    target = InstanceId("zones/us-central1-a/instances/proxy-aaaa")

    await inventory.delete(target)
    await inventory.delete(target)

    assert compute.deleted == [target]
    assert compute.instances == []


@pytest.mark.parametrize(
    "instance_id",
    ["proxy-aaaa", "zones/us-central1-a/instances/../../global/networks/default", ""],
)
async def test_delete_refuses_what_is_not_an_instance_id(
    compute: FakeCompute, inventory: GceInventory, instance_id: str
) -> None:
    with pytest.raises(ValueError, match="zones/<zone>/instances/<name>"):
        await inventory.delete(InstanceId(instance_id))
    assert compute.issued_tokens == []


async def test_a_denied_listing_fails_whole_without_leaking_the_token(
    compute: FakeCompute, tokens: GoogleAuthTokens, session: aiohttp.ClientSession
) -> None:
    other = GceInventory(
        "another-project", tokens, session, compute_url=f"{compute.url}/compute/v1"
    )

    with pytest.raises(
        InventoryError, match=r"HTTP 403: Required 'compute\.instances\.list'"
    ) as error:
        await other.list_tagged()

    assert compute.issued_tokens
    assert all(token not in str(error.value) for token in compute.issued_tokens)


async def test_service_account_tokens_are_cached_until_shortly_before_expiry(
    compute: FakeCompute, inventory: GceInventory, clock: ManualClock
) -> None:
    await inventory.list_tagged()
    await inventory.list_tagged()
    assert len(compute.issued_tokens) == 1

    clock.advance(compute.token_lifetime - 310)
    await inventory.list_tagged()
    assert len(compute.issued_tokens) == 1

    clock.advance(20)
    await inventory.list_tagged()
    assert len(compute.issued_tokens) == 2


async def test_a_token_signed_with_another_key_is_refused_without_leaking_it(
    compute: FakeCompute, key_file: Path
) -> None:
    compute.service_account_key = rsa.generate_private_key(65537, 2048).public_key()
    tokens = key_file_tokens(key_file)

    with pytest.raises(InventoryError, match="invalid_grant: Invalid JWT Signature") as error:
        await tokens.bearer()

    assert "PRIVATE KEY" not in str(error.value)
    assert "assertion" not in str(error.value)
    tokens.close()


async def test_metadata_server_tokens(
    compute: FakeCompute, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # google-auth reads GCE_METADATA_HOST once, at import; this is its resolved value.
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", compute.url.removeprefix("http://"))
    tokens = metadata_server_tokens()
    inventory = GceInventory(PROJECT, tokens, session, compute_url=f"{compute.url}/compute/v1")
    compute.instances = [labelled("us-central1-a", "proxy-aaaa", "uid-a")]

    listing = await inventory.list_tagged()

    assert [i.uid_label for i in listing.instances] == ["uid-a"]
    assert compute.metadata_scopes == [COMPUTE_SCOPE]
    kind = "google.auth.compute_engine.credentials.Credentials"
    assert repr(tokens) == f"<GoogleAuthTokens {kind} {SERVICE_ACCOUNT_EMAIL} [token: fresh]>"
    tokens.close()


async def test_an_unreachable_api_is_an_inventory_error(
    tokens: GoogleAuthTokens, session: aiohttp.ClientSession
) -> None:
    inventory = GceInventory(PROJECT, tokens, session, compute_url="http://127.0.0.1:9/compute/v1")

    with pytest.raises(InventoryError, match="ClientConnectorError"):
        await inventory.list_tagged()


async def test_reprs_name_the_account_but_never_the_key_or_token(
    compute: FakeCompute, tokens: GoogleAuthTokens
) -> None:
    prefix = f"<GoogleAuthTokens google.oauth2.service_account.Credentials {SERVICE_ACCOUNT_EMAIL}"
    assert repr(tokens) == f"{prefix} [token: none]>"

    token = await tokens.bearer()

    assert token == compute.issued_tokens[-1]
    assert repr(tokens) == f"{prefix} [token: fresh]>"


def test_a_key_file_that_is_not_a_service_account_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "user.json"
    path.write_text(json.dumps({"type": "authorized_user", "refresh_token": "s3cr3t-refresh"}))

    with pytest.raises(CredentialsError, match="not a usable service-account key") as error:
        key_file_tokens(path)

    assert "s3cr3t-refresh" not in str(error.value)


async def test_a_shard_lists_only_its_own_vms_and_the_unsharded_inventory_none_of_them(
    compute: FakeCompute, tokens: GoogleAuthTokens, session: aiohttp.ClientSession
) -> None:
    def of_shard(name: str, uid: str, shard: str) -> FakeInstance:
        vm = labelled("us-central1-a", name, uid)
        vm.labels[GCE_SHARD_LABEL] = shard
        return vm

    compute.instances = [
        of_shard("proxy-aaaa", "uid-a", "a"),
        of_shard("proxy-bbbb", "uid-b", "b"),
        labelled("us-central1-a", "proxy-uuuu", "uid-u"),
    ]
    url = f"{compute.url}/compute/v1"
    found = {}
    for shard in ("a", "b", None):
        inventory = GceInventory(PROJECT, tokens, session, compute_url=url, shard=shard)
        found[shard] = [i.uid_label for i in (await inventory.list_tagged()).instances]
    assert found == {"a": ["uid-a"], "b": ["uid-b"], None: ["uid-u"]}
    assert "shard=a" in repr(GceInventory(PROJECT, tokens, session, compute_url=url, shard="a"))
