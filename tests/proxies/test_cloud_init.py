"""A Proxy's cloud-init Secret as the state machine is told of it, and which Proxies it nudges."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.proxies.cloud_init import CLOUD_INIT_KEY, CloudInit, read, revision, to_nudge
from egress_proxies.vocabulary import CLOUD_INIT_LABEL, CLOUD_INIT_REVISION_ANNOTATION

pytestmark = pytest.mark.unit


def proxy(name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "crawl", "name": name, "annotations": annotations}}


def test_the_cloud_init_is_the_secrets_user_data() -> None:
    assert read("crawl", "init", {CLOUD_INIT_KEY: "#cloud-config"}) == CloudInit("#cloud-config")


def test_a_missing_secret_or_key_is_an_error_naming_secret_key_label_and_namespace() -> None:
    for data in (None, {"other": "x"}):
        error = read("crawl", "init", data).error
        assert error is not None and read("crawl", "init", data).text is None
        assert "init" in error and CLOUD_INIT_KEY in error and CLOUD_INIT_LABEL in error
        assert "namespace crawl" in error


def test_a_secrets_revision_is_its_resource_version_and_a_deletion_its_own() -> None:
    assert revision("MODIFIED", {"resourceVersion": "42"}) == "42"
    assert revision("DELETED", {"resourceVersion": "42"}) == "deleted"


def test_only_proxies_not_yet_nudged_for_the_revision_are_nudged() -> None:
    proxies = [
        proxy("fresh"),
        proxy("seen", **{CLOUD_INIT_REVISION_ANNOTATION: "42"}),
        proxy("older", **{CLOUD_INIT_REVISION_ANNOTATION: "41"}),
    ]
    assert to_nudge(proxies, "42") == [("crawl", "fresh"), ("crawl", "older")]
