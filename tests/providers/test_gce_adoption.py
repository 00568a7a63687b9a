"""Reading a failed `up` for the VM that already exists, and deciding whether it is ours."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.model import ProviderName
from egress_proxies.providers.gcp_adoption import existing_instance, import_id
from egress_proxies.providers.inventory import InstanceId, InstanceState, TaggedInstance

pytestmark = pytest.mark.unit

VM = InstanceId("zones/us-central1-a/instances/proxy-0123456789abcdef")
# The shape the terraform-bridged Google provider prints for a 409 on instances.insert
# (Error creating instance: googleapi: Error 409: ..., alreadyExists).
ALREADY_EXISTS = (
    "error: 1 error occurred:\n"
    "\t* creating urn:pulumi:crawl.p1::egress-proxies::gcp:compute/instance:Instance::"
    "proxy-0123456789abcdef: 1 error occurred:\n"
    "\t* Error creating instance: googleapi: Error 409: The resource "
    "'projects/crawler-proxies/zones/us-central1-a/instances/proxy-0123456789abcdef' "
    "already exists, alreadyExists\n"
)


def vm(uid: str) -> TaggedInstance:
    created = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return TaggedInstance(ProviderName.GCP, VM, uid, created, InstanceState.RUNNING)


def test_a_409_on_the_instance_names_project_and_vm() -> None:
    assert existing_instance(ALREADY_EXISTS) == ("crawler-proxies", VM)


def test_other_failures_name_nothing() -> None:
    firewall = ALREADY_EXISTS.replace("/zones/us-central1-a/instances/", "/global/firewalls/")
    assert existing_instance(firewall) is None
    assert existing_instance("googleapi: Error 403: Required 'compute.instances.create'") is None


def test_only_a_vm_carrying_this_proxys_uid_is_adopted() -> None:
    assert import_id("crawler-proxies", vm("uid-1"), "uid-1") == (
        "projects/crawler-proxies/zones/us-central1-a/instances/proxy-0123456789abcdef"
    )
    assert import_id("crawler-proxies", vm("uid-2"), "uid-1") is None
    assert import_id("crawler-proxies", None, "uid-1") is None
