"""The providers' programs, each imported on its first run.

pulumi-kubernetes and pulumi-gcp are large. The operator only names the
programs (they pickle by reference to its stack worker), so these
wrappers keep both out of the operator: only the process that runs a
program imports it, and pulumi-gcp only where a GCE Proxy exists.
"""

from __future__ import annotations

from egress_proxies.stacks.inputs import ProgramInputs


def squid_pod_program(inputs: ProgramInputs) -> None:
    """`programs.squid_pod.squid_pod_program`, imported when first run."""
    from egress_proxies.stacks.programs.squid_pod import squid_pod_program as run  # noqa: PLC0415

    run(inputs)


def gce_vm_program(inputs: ProgramInputs) -> None:
    """`programs.gce_vm.gce_vm_program`, imported when first run."""
    from egress_proxies.stacks.programs.gce_vm import gce_vm_program as run  # noqa: PLC0415

    run(inputs)
