"""The watches that feed a Fleet: Proxies and the Secrets their records read.

The operator and the discovery tier build their fleet the same way: one
reflector per watched namespace (or one for the cluster) for Proxies, and one
per label for the credentials Secrets (and, in the operator, the cloud-init
Secrets). `Watches.synced(PROXIES_WATCH)` is what a pool round waits for;
`Watches.synced()` (Proxies and Secrets) what the health engine and the lease
API wait for, since a record without its Secret has no credentials.
"""

from __future__ import annotations

from collections.abc import Sequence

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.catalog.sinks import ProxySink, SecretSink, Selects, keep_all
from egress_proxies.clock import Clock
from egress_proxies.kube.reflector import ListWatchClient, Reflector
from egress_proxies.kube.resources import PROXIES, SECRETS
from egress_proxies.kube.watches import Watches
from egress_proxies.vocabulary import CLOUD_INIT_LABEL, EXTERNAL_CREDENTIALS_LABEL, UID_LABEL

PROXIES_WATCH = "proxies"
SECRETS_WATCH = "secrets"


def fleet_watches(
    client: ListWatchClient,
    fleet: Fleet,
    clock: Clock,
    *,
    namespaces: Sequence[str] = (),
    selects: Selects = keep_all,
    cloud_init: bool = False,
) -> Watches:
    """The reflectors that keep `fleet` whole, in `namespaces` (none: the whole cluster).

    `selects` keeps only the Proxies a shard owns; `cloud_init` also reflects
    the labelled cloud-init Secrets (the operator renders them).
    """
    scopes: Sequence[str | None] = tuple(namespaces) or (None,)
    labels = [UID_LABEL, EXTERNAL_CREDENTIALS_LABEL]
    if cloud_init:
        labels.append(f"{CLOUD_INIT_LABEL}=true")
    return Watches(
        {
            PROXIES_WATCH: [
                Reflector(
                    client,
                    PROXIES.path(namespace),
                    ProxySink(fleet, selects=selects, namespace=namespace),
                    clock=clock,
                )
                for namespace in scopes
            ],
            SECRETS_WATCH: [
                Reflector(
                    client,
                    SECRETS.path(namespace),
                    SecretSink(fleet),
                    label_selector=label,
                    clock=clock,
                )
                for namespace in scopes
                for label in labels
            ],
        }
    )
