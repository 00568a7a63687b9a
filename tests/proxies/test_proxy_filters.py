"""The kopf filters that pick the Proxy handlers kopf runs, called as kopf calls them."""

from __future__ import annotations

import pytest

from egress_proxies.kube.selectors import parse_selector
from egress_proxies.proxies.filters import is_managed, managed_and_owned_by, owned_by
from egress_proxies.proxies.sharding import Shard

pytestmark = pytest.mark.unit

SHARD_A = Shard("a", parse_selector("shard=a"))
MANAGED = {"provider": "gcp"}
EXTERNAL = {"mode": "External", "endpoint": {"host": "h", "port": 3128}}


def test_only_an_external_proxy_is_not_managed() -> None:
    assert is_managed(MANAGED) and is_managed({"mode": "Managed"})
    assert not is_managed(EXTERNAL)


def test_a_shards_filters_pick_its_own_proxies_and_unsharded_ones_pick_all() -> None:
    assert owned_by(None)(labels={}, spec=MANAGED)
    assert owned_by(SHARD_A)(labels={"shard": "a"}, spec=MANAGED, body={})
    assert not owned_by(SHARD_A)(labels={"shard": "b"}, spec=MANAGED)


def test_only_its_own_managed_proxies_get_the_deletion_handler() -> None:
    assert managed_and_owned_by(SHARD_A)(spec=MANAGED, labels={"shard": "a"})
    assert not managed_and_owned_by(SHARD_A)(spec=EXTERNAL, labels={"shard": "a"})
    assert not managed_and_owned_by(SHARD_A)(spec=MANAGED, labels={"shard": "b"})
    assert managed_and_owned_by(None)(spec=MANAGED, labels={})
