"""The GCE VM program under pulumi's mocks: resources, labels, firewall, secrets, replacement.

Google cannot be reached from here, so no VM is created: the program runs
against `pulumi.runtime` mocks, and the tests read what it registered (inputs
and resource options, as the engine would receive them) and what it exported.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pulumi
import pytest
from pulumi.runtime import mocks
from pulumi.runtime.proto import resource_pb2

from egress_proxies.model import ProxySpec
from egress_proxies.stacks.errors import ErrorClass, classify
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.naming import PROJECT, instance_name
from egress_proxies.stacks.programs.errors import PermanentProgramError
from egress_proxies.stacks.programs.gce_vm import USER_DATA_KEY, gce_vm_program, vm_shape
from egress_proxies.vocabulary import GCE_UID_LABEL

pytestmark = pytest.mark.unit

UID = "6f1c2a4e-93b7-4d2e-8f1a-0c5e7b9d3a21"
NAME = instance_name(UID)
NAT_IP = "203.0.113.7"
INSTANCE = "gcp:compute/instance:Instance"
FIREWALL = "gcp:compute/firewall:Firewall"
# The signature pulumi puts on a secret value on the wire (sdk/python/lib/pulumi/runtime/rpc.py).
SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


class ComputeMocks(mocks.Mocks):
    """Answers like the Google provider: the VM's network filled in, an external IP assigned."""

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == INSTANCE:
            interface = state["networkInterfaces"][0]
            network = interface.get("network") or f"{interface['subnetwork']}-parent-network"
            interface["network"] = f"https://www.googleapis.com/compute/v1/{network}"
            interface["accessConfigs"][0]["natIp"] = NAT_IP
        return f"{args.name}-id", state

    def call(self, args: mocks.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


class RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, keeping every RegisterResource request: inputs and resource options."""

    def __init__(self, resource_mocks: mocks.Mocks) -> None:
        super().__init__(resource_mocks)
        self.requests: dict[str, resource_pb2.RegisterResourceRequest] = {}

    def RegisterResource(  # noqa: N802 (the gRPC method name)
        self, request: resource_pb2.RegisterResourceRequest
    ) -> Any:
        self.requests[request.type] = request
        return super().RegisterResource(request)  # type: ignore[no-untyped-call]


@dataclass
class Deployment:
    """What one mocked run of the program registered and exported."""

    requests: dict[str, resource_pb2.RegisterResourceRequest]
    states: dict[str, dict[str, Any]]
    outputs: dict[str, Any] = field(default_factory=dict)

    def options(self, resource_type: str) -> resource_pb2.RegisterResourceRequest:
        return self.requests[resource_type]


def deploy(inputs: ProgramInputs, *, preview: bool = False) -> Deployment:
    """Run the program under mocks in a thread of its own.

    Pulumi keeps its runtime settings in context variables and module state; a
    fresh thread starts from an empty context and gets its own event loop, so
    nothing set here reaches other tests.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_deploy_in_this_thread, inputs, preview).result()


def _deploy_in_this_thread(inputs: ProgramInputs, preview: bool) -> Deployment:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        monitor = RecordingMonitor(ComputeMocks())
        mocks.set_mocks(
            monitor.mocks, project=PROJECT, stack="ns.proxy-a", preview=preview, monitor=monitor
        )
        outputs: dict[str, Any] = {}

        @pulumi.runtime.test  # type: ignore[untyped-decorator]
        def run() -> pulumi.Output[None]:
            gce_vm_program(inputs)
            stack = pulumi.runtime.get_root_resource()
            exported: dict[str, Any] = stack.outputs  # type: ignore[union-attr]
            return pulumi.Output.all(**exported).apply(outputs.update)

        run()
        states_by_type = {
            registration.urn.split("::")[2].split("$")[-1]: registration.state
            for registration in monitor.resources.values()
        }
        return Deployment(monitor.requests, states_by_type, outputs)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def proxy(cloud_init: str | None = None, **gcp: Any) -> ProgramInputs:
    spec = {"zone": "europe-west4-b", "machineType": "e2-small", "image": "ubuntu-2404"} | gcp
    return ProgramInputs(
        namespace="crawl",
        name="proxy-a",
        uid=UID,
        instance_name=NAME,
        spec=ProxySpec.model_validate({"provider": "gcp", "gcp": spec}),
        credentials=ProxyCredentials("crawler", "s3cret-password", "k" * 64),
        cloud_init=cloud_init,
    )


def test_the_vm_has_the_spec_shape_the_uid_label_and_no_service_account() -> None:
    deployment = deploy(
        proxy(project="crawler-proxies", tags=["egress", "egress"], subnetwork="regions/x/s")
    )

    vm = deployment.states[INSTANCE]
    assert vm["name"] == NAME
    assert vm["project"] == "crawler-proxies"
    assert vm["zone"] == "europe-west4-b"
    assert vm["machineType"] == "e2-small"
    assert vm["bootDisk"] == {"initializeParams": {"image": "ubuntu-2404"}}
    assert vm["networkInterfaces"][0]["subnetwork"] == "regions/x/s"
    assert vm["networkInterfaces"][0]["accessConfigs"][0]["natIp"] == NAT_IP
    assert vm["tags"] == [NAME, "egress"]
    assert vm["labels"] == {GCE_UID_LABEL: UID}
    assert "serviceAccount" not in vm
    assert "crawl/proxy-a" in vm["description"]


def test_without_network_or_subnetwork_the_vm_joins_the_default_network() -> None:
    vm = deploy(proxy()).states[INSTANCE]

    assert vm["networkInterfaces"][0]["network"].endswith("/default")
    assert "project" not in vm


def test_user_data_is_sent_as_a_secret_and_its_output_kept_secret() -> None:
    deployment = deploy(proxy(cloud_init="#cloud-config\npackages: [htop]\n"))

    request = deployment.options(INSTANCE)
    user_data = request.object.fields["metadata"].struct_value.fields[USER_DATA_KEY]
    assert user_data.struct_value.fields[SECRET_SIG_KEY].string_value == SECRET_SIG
    plaintext = user_data.struct_value.fields["value"].string_value
    assert "packages: [htop]" in plaintext
    assert "s3cret-password" not in plaintext
    # The signing key reaches the VM only inside this secret (its squid's helper needs it).
    assert "k" * 64 in plaintext
    assert "metadata" in request.additionalSecretOutputs


def test_changes_a_running_vm_cannot_take_replace_it_deleting_it_first() -> None:
    request = deploy(proxy()).options(INSTANCE)

    assert set(request.replaceOnChanges) == {
        f'metadata["{USER_DATA_KEY}"]',
        "machineType",
        "networkInterfaces",
    }
    assert request.deleteBeforeReplace


def test_the_firewall_opens_only_the_proxy_port_to_the_allowed_ranges() -> None:
    ranges = ["198.51.100.0/24", "203.0.113.0/28"]
    deployment = deploy(proxy(allowedSourceRanges=ranges, network="crawl-vpc"))

    rule = deployment.states[FIREWALL]
    assert rule["name"] == f"{NAME}-squid"
    assert rule["direction"] == "INGRESS"
    assert rule["sourceRanges"] == ranges
    assert rule["allows"] == [{"protocol": "tcp", "ports": ["3128"]}]
    assert rule["targetTags"] == [NAME]
    assert rule["network"] == "https://www.googleapis.com/compute/v1/crawl-vpc"
    assert NAME in deployment.states[INSTANCE]["tags"]
    assert deployment.options(FIREWALL).deleteBeforeReplace


def test_with_only_a_subnetwork_the_firewall_uses_the_network_compute_infers() -> None:
    deployment = deploy(proxy(allowedSourceRanges=["10.0.0.0/8"], subnetwork="regions/r/s"))

    network = deployment.states[FIREWALL]["network"]
    assert network == "https://www.googleapis.com/compute/v1/regions/r/s-parent-network"


def test_without_source_ranges_there_is_no_firewall_rule() -> None:
    assert FIREWALL not in deploy(proxy()).requests


def test_exports_the_nat_ip_the_zone_qualified_id_and_the_port() -> None:
    outputs = deploy(proxy()).outputs

    assert outputs == {
        "ip": NAT_IP,
        "instanceId": f"zones/europe-west4-b/instances/{NAME}",
        "port": 3128,
    }


def test_the_program_runs_in_preview_too() -> None:
    assert INSTANCE in deploy(proxy(), preview=True).requests


@pytest.mark.parametrize(
    ("missing", "field"),
    [
        ({"zone": None}, "spec.gcp.zone"),
        ({"machineType": None}, "spec.gcp.machineType"),
        ({"image": None}, "spec.gcp.image"),
    ],
)
def test_a_missing_required_field_is_a_permanent_error_naming_it(
    missing: dict[str, None], field: str
) -> None:
    with pytest.raises(PermanentProgramError) as raised:
        deploy(proxy(**missing))

    assert raised.value.field == field
    assert field in str(raised.value)
    assert classify(str(raised.value)) is ErrorClass.PERMANENT


def test_a_gcp_proxy_without_a_gcp_block_is_a_permanent_error() -> None:
    with pytest.raises(PermanentProgramError) as raised:
        vm_shape(ProxySpec.model_validate({"provider": "gcp"}))
    assert raised.value.field == "spec.gcp"


def test_mocked_runs_leave_no_pulumi_runtime_state_behind() -> None:
    deploy(proxy())

    assert pulumi.runtime.get_root_resource() is None
    assert not isinstance(pulumi.runtime.settings.get_monitor(), mocks.MockMonitor)


def test_a_vm_left_by_a_killed_create_is_imported_by_its_id_and_only_then() -> None:
    vm_id = f"projects/crawler-proxies/zones/europe-west4-b/instances/{NAME}"

    adopting = deploy(replace(proxy(), adopt_instance=vm_id))

    assert adopting.options(INSTANCE).importId == vm_id
    assert deploy(proxy()).options(INSTANCE).importId == ""
