"""A shard: the Proxies one operator owns, and the names that keep its work apart from others'.

Several operators split a fleet by label selector (`--shard-selector`) and/or
namespace (`--namespace`); each is a shard with a name (`--shard-name`, or
derived). The name goes into everything the shard creates or writes, so two
shards never act on each other's things:

- the kopf peering object `<peering>-<shard>` (shards don't pause each other),
- the finalizer `<finalizer>-<shard>` (kopf drops a finalizer from an object
  no handler matches any more; one shared name would flip between two shards
  during a move),
- the `crawl.example.com/shard` label on pods, ConfigMaps and Secrets and the
  `egress-proxies-shard` label on GCE VMs, which the orphan GC filters on,
- the `shard` stack output, and a `shard` file in the state dir, so a state dir
  (its Pulumi backend) belongs to one shard only.

A Proxy carries `crawl.example.com/owner-shard`: the shard whose stack holds
its resources. A shard that no longer selects a Proxy stops reconciling it at
once and forgets its stack (without destroying anything) when another shard
has written its own name there, i.e. has taken the resources over.

The rules a handler applies to one Proxy are pure functions here, from what
it read to what to do: `selects`, `release`, `claim` and `finalizers_to_keep`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from egress_proxies.errors import EgressProxiesError
from egress_proxies.kube.selectors import LabelSelector, SelectorError, parse_selector
from egress_proxies.model import FINALIZER, GROUP, SHARD_LABEL

OWNER_ANNOTATION = f"{GROUP}/owner-shard"
SHARD_FILE = "shard"
# A label value, a GCE label value and a DNS label at once, with room for prefixes.
_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,38}[a-z0-9])?")


class ShardError(ValueError, EgressProxiesError):
    """Shard flags that cannot work, or a state dir that belongs to another shard."""


@dataclass(frozen=True)
class Shard:
    """One operator's share of the fleet: the Proxies its selector (and namespaces) pick."""

    name: str
    selector: LabelSelector

    def __repr__(self) -> str:
        return f"<Shard {self.name} [selector: {self.selector or 'everything'}]>"

    def owns(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a Proxy with these labels belongs to this shard."""
        return self.selector.matches(labels)

    @property
    def finalizer(self) -> str:
        """This shard's finalizer on the Proxies it owns."""
        return f"{FINALIZER}-{self.name}"

    @property
    def labels(self) -> dict[str, str]:
        """The labels on every Kubernetes object this shard creates."""
        return {SHARD_LABEL: self.name}

    def peering(self, base: str) -> str:
        """This shard's kopf peering object name."""
        return f"{base}-{self.name}"


def selects(shard: Shard | None, labels: Mapping[str, str] | None) -> bool:
    """Whether this operator handles a Proxy with these labels (an unsharded one: all)."""
    return shard is None or shard.owns(labels)


@dataclass(frozen=True)
class Release:
    """What a shard does with a Proxy its selector no longer picks."""

    stop_handling: bool  # it was handled here until now: forget what is remembered of it
    forget_stack_for: str | None = None  # the shard that took the resources over: forget ours


def release(
    shard: Shard | None,
    annotations: Mapping[str, str],
    *,
    handled: bool,
    has_stack: bool,
) -> Release:
    """Stop handling at once; forget the stack only once another shard has recorded itself owner.

    Until then the stack is kept (and the Proxy left unreconciled), so a move
    to a shard that is not running loses nothing.
    """
    owner = annotations.get(OWNER_ANNOTATION)
    taken_over = shard is not None and bool(owner) and owner != shard.name and has_stack
    return Release(stop_handling=handled, forget_stack_for=owner if taken_over else None)


@dataclass(frozen=True)
class Claim:
    """This shard's pending claim on a Proxy: it records itself owner once its stack holds it."""

    owner: str

    def annotations(self, *, stack_holds_instance: bool) -> dict[str, str]:
        """The annotations to set: the owner once this shard's own stack holds the instance."""
        return {OWNER_ANNOTATION: self.owner} if stack_holds_instance else {}


def claim(shard: Shard | None, annotations: Mapping[str, str]) -> Claim | None:
    """The claim still to make on a Proxy; None when unsharded or when it names this shard."""
    if shard is None or annotations.get(OWNER_ANNOTATION) == shard.name:
        return None
    return Claim(shard.name)


def finalizers_to_keep(shard: Shard | None, finalizers: Sequence[str]) -> list[str] | None:
    """The finalizers without the unsharded operator's, on a Proxy this shard holds with its own.

    Left by the operator a fleet was split from, that finalizer would never
    be removed by a running operator and the Proxy could not be deleted.
    None: nothing to remove.
    """
    if shard is None or FINALIZER not in finalizers or shard.finalizer not in finalizers:
        return None
    return [finalizer for finalizer in finalizers if finalizer != FINALIZER]


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
