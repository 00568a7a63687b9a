"""The GCE VM program: one VM running the authenticated Squid, and the firewall rule to reach it.

The stack runner calls `gce_vm_program` inside its inline program function;
nothing is declared at import time.

The VM takes zone, machine type and boot image from `spec.gcp`, with no
defaults: a default would create billable VMs of an arbitrary shape, so a
missing one is a PermanentProgramError naming the field. It joins
`spec.gcp.network`/`subnetwork` (the project's `default` network when
neither is set) with an ephemeral external IP, its egress address. It
carries the Proxy UID under the GCP label `GCE_UID_LABEL`, the network tag
of its own name besides `spec.gcp.tags`, and no service account.

Its user-data is a MIME multipart that cloud-init merges (lists appended,
the Proxy's own keys kept): the Proxy's cloud-init first, then a
cloud-config that installs Squid with the shared authenticated
configuration, the lease-credentials helper, the Proxy's signing key and the
digest of the operator's password (the password itself is not there). It is
a secret in state: the VM's metadata is the only way in for the key. No
lease's credentials ever are: the discovery API signs them with the key.
cloud-init runs at first boot only, so a user-data change replaces the VM,
as does a change of machine type, network or subnetwork (which Compute
applies only by stopping the VM); the instance name is fixed, so the old VM
is deleted before its replacement is created.

The firewall rule opens the proxy port to `spec.gcp.allowedSourceRanges`
only. No ranges, no rule: the VPC's implied deny-ingress rule then keeps the
proxy unreachable from outside the VPC, the safe default.

Exports `ip` (the NAT IP), `instanceId` (`zones/<zone>/instances/<name>`)
and `port`.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.mime.multipart import MIMEMultipart

import pulumi
import pulumi_gcp as gcp
import yaml

from egress_proxies.model import ProxySpec
from egress_proxies.providers.gcp import instance_id
from egress_proxies.stacks import outputs
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.programs.errors import PermanentProgramError
from egress_proxies.stacks.programs.squid_config import (
    LeaseAuth,
    lease_auth_helper,
    revocations_url,
    squid_conf,
)
from egress_proxies.values import SIGNING_KEY
from egress_proxies.vocabulary import GCE_SHARD_LABEL, GCE_UID_LABEL

USER_DATA_KEY = "user-data"
SQUID_CONF_PATH = "/etc/squid/squid.conf"
HELPER_PATH = "/etc/squid/squid_lease_auth.pl"
AUTH_DIR = "/etc/squid/auth"
# Writable by squid's `proxy` user on Debian and Ubuntu: the helper's revocation list.
STATE_DIR = "/var/spool/squid"
MERGE_TYPE = "list(append)+dict(no_replace,recurse_list)+str()"
DEFAULT_NETWORK = "default"
# MIME's own line limit (RFC 5322) rather than e-mail's 78, so config files stay plain text.
_MIME_POLICY = email.policy.default.clone(max_line_length=998)
# Compute changes these on a running VM only by stopping it; cattle are replaced instead.
_REPLACE_RATHER_THAN_STOP = ("machineType", "networkInterfaces")
_NO_DEFAULT = "is required; there is no default, which would create a VM of an arbitrary shape"


@dataclass(frozen=True)
class VmShape:
    """The validated `spec.gcp` of a Proxy: everything the VM and its firewall rule take."""

    project: str | None
    zone: str
    machine_type: str
    image: str
    network: str | None
    subnetwork: str | None
    tags: tuple[str, ...]
    allowed_source_ranges: tuple[str, ...]


def vm_shape(spec: ProxySpec) -> VmShape:
    """The VM a spec asks for; PermanentProgramError naming the first missing required field."""
    if spec.gcp is None:
        raise PermanentProgramError("spec.gcp", "is required for provider gcp")
    gcp_spec = spec.gcp
    zone = _required("spec.gcp.zone", gcp_spec.zone)
    machine_type = _required("spec.gcp.machineType", gcp_spec.machine_type)
    image = _required("spec.gcp.image", gcp_spec.image)
    network = gcp_spec.network or None
    subnetwork = gcp_spec.subnetwork or None
    return VmShape(
        project=gcp_spec.project,
        zone=zone,
        machine_type=machine_type,
        image=image,
        network=network if network or subnetwork else DEFAULT_NETWORK,
        subnetwork=subnetwork,
        tags=tuple(gcp_spec.tags),
        allowed_source_ranges=tuple(gcp_spec.allowed_source_ranges),
    )


def _required(field: str, value: str | None) -> str:
    if not value:
        raise PermanentProgramError(field, _NO_DEFAULT)
    return value


def gce_vm_program(inputs: ProgramInputs) -> None:
    """Declare the Proxy's VM and, when source ranges are given, its firewall rule."""
    shape = vm_shape(inputs.spec)
    name = inputs.instance_name
    description = f"egress-proxies Proxy {inputs.namespace}/{inputs.name}"
    instance = gcp.compute.Instance(
        name,
        name=name,
        project=shape.project,
        zone=shape.zone,
        machine_type=shape.machine_type,
        description=description,
        boot_disk=gcp.compute.InstanceBootDiskArgs(
            initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(image=shape.image)
        ),
        network_interfaces=[
            gcp.compute.InstanceNetworkInterfaceArgs(
                network=shape.network,
                subnetwork=shape.subnetwork,
                access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()],
            )
        ],
        tags=list(dict.fromkeys([name, *shape.tags])),
        labels={GCE_UID_LABEL: inputs.uid}
        | ({GCE_SHARD_LABEL: inputs.shard} if inputs.shard else {}),
        metadata={USER_DATA_KEY: pulumi.Output.secret(render_user_data(inputs))},
        opts=pulumi.ResourceOptions(
            replace_on_changes=[f'metadata["{USER_DATA_KEY}"]', *_REPLACE_RATHER_THAN_STOP],
            delete_before_replace=True,
            additional_secret_outputs=["metadata"],
            # A VM a killed `up` created but never recorded (providers/gcp_adoption.py).
            import_=inputs.adopt_instance,
        ),
    )
    if shape.allowed_source_ranges:
        gcp.compute.Firewall(
            f"{name}-squid",
            name=f"{name}-squid",
            project=shape.project,
            network=instance.network_interfaces.apply(_network_of),
            description=description,
            direction="INGRESS",
            source_ranges=list(shape.allowed_source_ranges),
            target_tags=[name],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(inputs.port)])],
            opts=pulumi.ResourceOptions(delete_before_replace=True),
        )
    pulumi.export(outputs.IP, instance.network_interfaces.apply(_nat_ip))
    pulumi.export(
        outputs.INSTANCE_ID, pulumi.Output.all(instance.zone, instance.name).apply(_instance_id)
    )
    pulumi.export(outputs.PORT, inputs.port)


def _network_of(interfaces: Sequence[gcp.compute.outputs.InstanceNetworkInterface]) -> str:
    """The VM's network; Compute fills it in from the subnetwork when only that was given."""
    network = interfaces[0].network
    if not network:
        raise ValueError("Compute returned a network interface without a network")
    return network


def _nat_ip(interfaces: Sequence[gcp.compute.outputs.InstanceNetworkInterface]) -> str | None:
    access_configs = interfaces[0].access_configs or []
    return access_configs[0].nat_ip if access_configs else None


def _instance_id(zone_and_name: list[str]) -> str:
    zone, name = zone_and_name
    return instance_id(zone, name)


def render_user_data(inputs: ProgramInputs) -> str:
    """The VM's user-data: the Proxy's cloud-init parts, then the Squid cloud-config part.

    Deterministic for the same inputs (the MIME boundary is derived from the
    content), so an unchanged Proxy never shows a diff that would replace its VM.
    """
    squid = _text_part(squid_cloud_config(inputs), "cloud-config")
    squid["X-Merge-Type"] = MERGE_TYPE
    parts = [*_user_parts(inputs.cloud_init), squid]
    digest = hashlib.sha256("\0".join(part.as_string() for part in parts).encode()).hexdigest()
    message = MIMEMultipart(boundary=f"==egress-proxies-{digest[:32]}==")
    for part in parts:
        message.attach(part)
    return message.as_string()


def lease_auth(inputs: ProgramInputs) -> LeaseAuth:
    """Where the VM's helper finds its files and its revocation list."""
    return LeaseAuth(
        helper_path=HELPER_PATH,
        secret_dir=AUTH_DIR,
        state_dir=STATE_DIR,
        proxy=f"{inputs.namespace}/{inputs.name}",
        revocations_url=revocations_url(inputs.discovery_url, inputs.namespace, inputs.name),
    )


def squid_cloud_config(inputs: ProgramInputs) -> str:
    """A cloud-config that installs Squid and Perl with the shared configuration, the
    lease-credentials helper, the signing key and the operator password's digest.

    cloud-init installs packages (refreshing the package lists first) and
    then writes deferred files, so the package neither overwrites them nor
    lacks the `proxy` group the secret files belong to.
    """
    credentials = inputs.credentials
    assert credentials.signing_key is not None, "the operator gives every managed proxy a key"
    secret_files = {
        "username": credentials.username,
        "passwordSha256": hashlib.sha256(credentials.password.encode()).hexdigest(),
        SIGNING_KEY: credentials.signing_key,
    }
    config = {
        "packages": ["squid", "perl"],
        "write_files": [
            {
                "path": SQUID_CONF_PATH,
                "content": squid_conf(inputs.port, lease_auth=lease_auth(inputs)),
                "owner": "root:root",
                "permissions": "0644",
                "defer": True,
            },
            {
                "path": HELPER_PATH,
                "content": lease_auth_helper(),
                "owner": "root:root",
                "permissions": "0755",
                "defer": True,
            },
            *(
                {
                    "path": f"{AUTH_DIR}/{name}",
                    "content": value,
                    "owner": "root:proxy",
                    "permissions": "0640",
                    "defer": True,
                }
                for name, value in secret_files.items()
            ),
        ],
        "runcmd": [["systemctl", "enable", "squid"], ["systemctl", "restart", "squid"]],
    }
    return "#cloud-config\n" + yaml.dump(config, Dumper=_BlockDumper, sort_keys=False)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the config files) as literal blocks, as a human would."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def _user_parts(cloud_init: str | None) -> list[Message]:
    """The Proxy's cloud-init as MIME parts: a multipart's own parts, or one part of any type.

    A MIME document keeps its own parts and types. Any other document goes in
    as text/plain, which cloud-init types by its first line (#cloud-config,
    #!, #include, ...), just as it would on its own.
    """
    if not cloud_init:
        return []
    parsed = email.message_from_string(cloud_init)
    if parsed.is_multipart():
        return list(parsed.get_payload())
    if "Content-Type" in parsed:
        return [parsed]
    return [_text_part(cloud_init, "plain")]


def _text_part(body: str, subtype: str) -> EmailMessage:
    """A text/<subtype> UTF-8 part: plain text when ASCII, else base64, which cloud-init decodes."""
    part = EmailMessage(policy=_MIME_POLICY)
    part.set_content(body, subtype=subtype)
    return part
