"""`egress-proxies run` imports only what an operator of Squid pods on the memory store uses.

Each of these libraries costs resident memory for the operator's whole life
(about 25 MiB together; docs/operator.md "Memory"): redis-py for the Redis
lease store, google-auth and pulumi-gcp for GCE, cryptography for the dev
cluster's PKI. They are imported when a setting or a Proxy asks for them.
pulumi-kubernetes' typed SDK (16 MiB) is never imported by the operator: the
Squid pod program declares its objects by type token
(`stacks/programs/core_objects.py`). Nor is pulumi itself, with gRPC and
protobuf (about 21 MiB): the stack worker process runs every operation
(`stacks/worker.py`), and only it imports them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

LOADED_LATER = ("redis", "google.auth", "google.oauth2", "pulumi_gcp", "cryptography", "requests")
NEVER_LOADED = ("pulumi_kubernetes", "pulumi", "grpc", "google.protobuf")


def modules_of_the_operator() -> set[str]:
    """The modules a fresh interpreter holds once `run`'s code is imported."""
    code = (
        "import json, sys\n"
        "import egress_proxies.cli, egress_proxies.operator.main\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return set(json.loads(output))


@pytest.fixture(scope="module")
def loaded() -> set[str]:
    return modules_of_the_operator()


@pytest.mark.parametrize("package", LOADED_LATER + NEVER_LOADED)
def test_the_operator_starts_without(package: str, loaded: set[str]) -> None:
    assert not {name for name in loaded if name == package or name.startswith(f"{package}.")}


def test_the_redis_store_is_still_exported() -> None:
    from egress_proxies import leases  # noqa: PLC0415
    from egress_proxies.leases import redis_store  # noqa: PLC0415

    assert leases.RedisLeaseStore is redis_store.RedisLeaseStore
