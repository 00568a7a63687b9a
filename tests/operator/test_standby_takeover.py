"""A replica that worked on a Proxy, then stood by, then took over: it reconciles that Proxy.

kopf peering is pausing, not election: a replica can run handlers and then be paused (two
replicas started together, before each saw the other; a peer of higher priority joining).
What it recorded stays: kopf marks the Proxy handled in its own memory and on the Proxy,
and a paused replica that resumes relists without resuming what it handled before. The
retry timers of the replica at work die with it. So after a failover nothing woke a Proxy
left failing: it stayed failed. Deterministic here, with two operator processes on one
shared backend (a real PostgreSQL): explicit priorities set who is paused, and a pulumi that
fails every `up` while a flag file exists sets when the Proxy can succeed.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_proxies.kube import KubeClient
from harness.cluster import ClusterHandle, wait_for
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.postgres import PostgresServer

pytestmark = pytest.mark.e2e

LIFETIME = 15
RESUMED = "Resuming operations after the pause"
PAUSED = "Pausing operations in favour of"  # kopf, as a higher-priority peer appears


def failing_while(operator: OperatorProcess, flag: Path) -> None:
    """Make the operator's pulumi fail every `up` while `flag` exists (a transient error)."""
    wrapper = Path(operator.env["EGRESS_PROXIES_PULUMI_ROOT"]) / "bin" / "pulumi"
    lines = wrapper.read_text().splitlines()
    check = (
        f'case " $* " in *" up "*) if [ -e {flag} ]; then '
        'echo "error: connection refused (injected by the test)" >&2; exit 1; fi;; esac'
    )
    wrapper.write_text("\n".join([*lines[:-1], check, lines[-1]]) + "\n")


async def logged(operator: OperatorProcess, text: str, times: int = 1) -> None:
    async def seen() -> bool:
        return operator.log_text().count(text) >= times

    await wait_for(seen, timeout=120, interval=0.2)


@contextlib.contextmanager
def telling(replicas: dict[str, OperatorProcess]) -> Iterator[None]:
    """On a failed wait, say whether each replica runs and how its log ends."""
    try:
        yield
    except AssertionError as failed:
        tails = "".join(
            f"\n--- {name} ({'running' if replica.running() else 'exited'}), its log's end:\n"
            + "\n".join(replica.log_text().splitlines()[-30:])
            for name, replica in replicas.items()
        )
        raise AssertionError(f"{failed}{tails}") from None


async def failures(kube: KubeClient, namespace: str, name: str, at_least: int) -> dict[str, Any]:
    async def counted() -> dict[str, Any] | None:
        body = await kube.get(proxy_path(namespace, name))
        backoff = (body.get("status") or {}).get("backoff") or {}
        return body if int(backoff.get("failures", 0)) >= at_least else None

    return await wait_for(counted, timeout=120, interval=0.2)


async def test_the_replica_that_takes_over_reconciles_a_proxy_it_handled_before_it_stood_by(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    postgres_server: PostgresServer,
) -> None:
    table = f"takeover_{secrets.token_hex(3)}"
    env = {
        "EGRESS_PROXIES_STATE_BACKEND": f"{postgres_server.url}&table={table}",
        **postgres_server.env,
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS": str(LIFETIME),
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
    }
    flag = tmp_path / "pulumi-up-fails"
    flag.touch()
    replicas = {}
    for name, priority in (("low", 1), ("high", 2)):
        (tmp_path / name).mkdir()
        replica = new_operator(
            dev_cluster.kubeconfig,
            namespace,
            tmp_path / name,
            {**env, "EGRESS_PROXIES_PRIORITY": str(priority)},
        )
        failing_while(replica, flag)
        replicas[name] = replica
    low, high = replicas["low"], replicas["high"]
    try:
        with telling(replicas):
            low.start()  # alone: it works
            await logged(low, RESUMED)
            await kube.create(proxy_path(namespace), managed_proxy("p"))
            await failures(kube, namespace, "p", 1)  # the low one handled it: its up failed
            high.start()  # a higher priority: the low one is paused and stands by
            await logged(low, PAUSED)
            # The high one works now; it retries the Proxy on its own timer, and fails again.
            body = await failures(kube, namespace, "p", 3)
            print("before the kill:", body["status"]["backoff"])
            high.kill()  # with the next retry pending on its timer
            flag.unlink()  # from now on an up succeeds
            await wait_for_condition(kube, namespace, "p", "Provisioned", "True", timeout=120)
    finally:
        for replica in replicas.values():
            replica.stop()
