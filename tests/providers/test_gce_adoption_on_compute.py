"""A create killed mid-flight: the VM exists in Compute (the local stand-in) but not in the stack.

Google cannot be reached here, and the pulumi-gcp plugin is not in this
project's toolchain, so the `up` that imports the VM cannot run; this proves
the part between the failed `up` and the retried one: from the error text
and one `instances.get` against the stand-in, which VM is adopted and which
is refused.
"""

from __future__ import annotations

import pytest

from egress_proxies.providers.gcp import GceInventory
from egress_proxies.providers.gcp_adoption import adoptable
from tests.providers.fake_compute import PROJECT, FakeCompute, labelled

pytestmark = pytest.mark.integration

ZONE = "us-central1-a"
NAME = "proxy-0123456789abcdef"
FAILED_UP = (
    "\t* Error creating instance: googleapi: Error 409: The resource "
    f"'projects/{PROJECT}/zones/{ZONE}/instances/{NAME}' already exists, alreadyExists"
)


async def test_the_vm_a_killed_create_left_is_adopted(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [labelled(ZONE, NAME, "uid-1")]

    assert await adoptable(inventory, "uid-1", FAILED_UP) == (
        f"projects/{PROJECT}/zones/{ZONE}/instances/{NAME}"
    )


async def test_a_same_name_vm_of_another_uid_is_never_adopted(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [labelled(ZONE, NAME, "uid-of-another-proxy")]

    assert await adoptable(inventory, "uid-1", FAILED_UP) is None


async def test_nothing_is_adopted_when_the_vm_is_gone_or_in_another_project(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    assert await adoptable(inventory, "uid-1", FAILED_UP) is None

    compute.instances = [labelled(ZONE, NAME, "uid-1")]
    other_project = FAILED_UP.replace(f"projects/{PROJECT}/", "projects/another-project/")
    assert await adoptable(inventory, "uid-1", other_project) is None
    assert await adoptable(inventory, "uid-1", "some other failure") is None


async def test_a_failed_lookup_adopts_nothing(
    compute: FakeCompute, inventory: GceInventory
) -> None:
    compute.instances = [labelled(ZONE, NAME, "uid-1")]
    compute.project = "the-stand-in-now-denies-this-project"

    assert await adoptable(inventory, "uid-1", FAILED_UP) is None
