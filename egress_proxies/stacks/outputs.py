"""The outputs of a proxy stack, by name, and how a program is bound to its Proxy.

The inline programs export where the proxy is (`ip`, `port`, `instanceId`);
`bind` wraps a program so that every stack also exports whose it is
(`proxyUid`, `provider`, and `shard` for a sharded operator) and which spec
built it (`specHash`). The reconciler reads them back to tell whether a
stack is current, the GC to tell whose a stack is. Nothing else names these keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pulumi

from egress_proxies.stacks.inputs import ProgramInputs

IP = "ip"
PORT = "port"
INSTANCE_ID = "instanceId"
SPEC_HASH = "specHash"
PROXY_UID = "proxyUid"
PROVIDER = "provider"
SHARD = "shard"

Program = Callable[[ProgramInputs], None]


def bind(
    program: Program, inputs: ProgramInputs, *, spec_hash: str, provider: str
) -> Callable[[], None]:
    """The Pulumi program for one Proxy: `program(inputs)` plus the identity outputs."""

    def run() -> None:
        program(inputs)
        pulumi.export(SPEC_HASH, spec_hash)
        pulumi.export(PROXY_UID, inputs.uid)
        pulumi.export(PROVIDER, provider)
        if inputs.shard is not None:
            pulumi.export(SHARD, inputs.shard)

    return run


def text(outputs: Mapping[str, Any], key: str) -> str | None:
    """An output as a string, or None when the stack does not export it."""
    value = outputs.get(key)
    return None if value is None else str(value)
