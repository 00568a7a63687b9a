"""The outputs of a proxy stack, by name, and how a program is bound to its Proxy.

The inline programs export where the proxy is (`ip`, `port`, `instanceId`);
`bind` wraps a program so that every stack also exports whose it is
(`proxyUid`, `provider`, and `shard` for a sharded operator) and which spec
built it (`specHash`). The reconciler reads them back to tell whether a
stack is current, the GC to tell whose a stack is. Nothing else names these keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from egress_proxies.stacks.inputs import ProgramInputs

IP = "ip"
PORT = "port"
INSTANCE_ID = "instanceId"
SPEC_HASH = "specHash"
PROXY_UID = "proxyUid"
PROVIDER = "provider"
SHARD = "shard"

Program = Callable[[ProgramInputs], None]


@dataclass(frozen=True)
class BoundProgram:
    """The Pulumi program for one Proxy: `program(inputs)` plus the identity outputs.

    A value, not a closure, so that it pickles to the runner's worker process.
    """

    program: Program
    inputs: ProgramInputs
    spec_hash: str
    provider: str

    def __repr__(self) -> str:
        return f"<BoundProgram {self.provider} {self.inputs!r} spec={self.spec_hash}>"

    def __call__(self) -> None:
        """Declare the Proxy's resources and export its identity."""
        import pulumi  # noqa: PLC0415 (only where programs run: the operator imports no pulumi)

        self.program(self.inputs)
        pulumi.export(SPEC_HASH, self.spec_hash)
        pulumi.export(PROXY_UID, self.inputs.uid)
        pulumi.export(PROVIDER, self.provider)
        if self.inputs.shard is not None:
            pulumi.export(SHARD, self.inputs.shard)


def bind(
    program: Program, inputs: ProgramInputs, *, spec_hash: str, provider: str
) -> Callable[[], None]:
    """The Pulumi program for one Proxy (a BoundProgram)."""
    return BoundProgram(program, inputs, spec_hash, provider)


def text(outputs: Mapping[str, Any], key: str) -> str | None:
    """An output as a string, or None when the stack does not export it."""
    value = outputs.get(key)
    return None if value is None else str(value)
