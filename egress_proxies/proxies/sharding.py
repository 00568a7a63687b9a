"""A shard as one Proxy controller sees it: which Proxies it handles, and what it does at the edges.

Several operators split a fleet by label selector and/or namespace; each is a
shard with a name (the process builds it from its flags: `operator/shard.py`).
The name goes into everything the shard creates or writes, so two shards never
act on each other's things:

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from egress_proxies.kube.selectors import LabelSelector
from egress_proxies.vocabulary import FINALIZER, OWNER_ANNOTATION, SHARD_LABEL


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
