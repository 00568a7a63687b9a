"""The shard this process is: built from its flags, and bound to its state dir.

What a shard means for the Proxies it handles (the selector, the owner
annotation, the finalizer) lives with the Proxy controller in
`proxies/sharding.py`; this module is the process's side: the flags that name
a shard, and the state dir that belongs to one shard only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube.selectors import LabelSelector, SelectorError, parse_selector
from egress_proxies.proxies.sharding import Shard

SHARD_FILE = "shard"
# A label value, a GCE label value and a DNS label at once, with room for prefixes.
_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,38}[a-z0-9])?")


class ShardError(ValueError, EgressProxiesError):
    """Shard flags that cannot work, or a state dir that belongs to another shard."""


def shard_from_flags(
    name: str | None, selector: str | None, namespaces: Sequence[str]
) -> Shard | None:
    """The shard the flags describe; None (one operator owns everything) when neither is given.

    Raises ShardError naming the flag at fault.
    """
    if name is None and selector is None:
        return None
    try:
        parsed = parse_selector(selector or "")
    except SelectorError as error:
        raise ShardError(f"--shard-selector {selector!r}: {error}") from error
    chosen = name if name is not None else derive_name(parsed, namespaces)
    if not _NAME.fullmatch(chosen):
        raise ShardError(
            f"--shard-name {chosen!r}: up to 40 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return Shard(chosen, parsed)


def derive_name(selector: LabelSelector, namespaces: Sequence[str]) -> str:
    """A readable default: the value of a one-label selector (`shard=a` is `a`), else a digest."""
    values = list(selector.equalities().values())
    if len(selector.requirements) == 1 and len(values) == 1 and _NAME.fullmatch(values[0]):
        return values[0]
    if not selector.requirements and len(namespaces) == 1 and _NAME.fullmatch(namespaces[0]):
        return namespaces[0]
    scope = f"{selector}|{','.join(sorted(namespaces))}"
    return f"s-{hashlib.sha256(scope.encode()).hexdigest()[:8]}"


def bind_state_dir(state_dir: Path, shard: Shard | None) -> None:
    """Record the shard in its state dir; ShardError if the dir already belongs to another.

    A shard's Pulumi backend lives in its state dir: two shards sharing one
    would each see the other's stacks as orphans.
    """
    path = state_dir / SHARD_FILE
    wanted = shard.name if shard else ""
    recorded = path.read_text().strip() if path.exists() else None
    if recorded is not None and recorded != wanted:
        owner = f"shard {recorded!r}" if recorded else "the unsharded operator"
        mine = f"shard {wanted!r}" if wanted else "an unsharded operator"
        raise ShardError(
            f"--state-dir {state_dir} belongs to {owner}; {mine} needs its own --state-dir"
        )
    if recorded is None and shard is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted + "\n")
