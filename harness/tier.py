"""Running `egress-proxies discovery` replicas, and a fleet whose status says it is healthy."""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.devcluster.processes import Child
from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import PROXIES
from harness.cluster import wait_for
from harness.operator import proxy_path
from harness.process import ManagedProcess


@dataclass
class DiscoveryProcess(ManagedProcess):
    """One `egress-proxies discovery` child on a loopback port, with bearer auth."""

    name: str
    kubeconfig: Path
    lease_store: str
    token_dir: Path
    log: Path
    pid_dir: Path
    prefix: str = "egress-proxies"
    store_timeout: float = 1.0
    port: int = field(default_factory=free_port)
    child: Child | None = None
    starts: int = 0
    graceful_stop: float | None = 15.0

    @property
    def url(self) -> str:
        """Where it serves."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start (or restart) it on the same port."""
        self.starts += 1
        env = {**os.environ, "EGRESS_PROXIES_LOG_LEVEL": "INFO"}
        self._spawn(
            f"{self.name}-{self.starts}",
            [
                sys.executable,
                "-m",
                "egress_proxies.cli",
                "discovery",
                "--lease-store",
                self.lease_store,
                "--lease-store-prefix",
                self.prefix,
                "--lease-store-timeout",
                str(self.store_timeout),
                "--kubeconfig",
                str(self.kubeconfig),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--tokens-dir",
                str(self.token_dir),
            ],
            pid_dir=self.pid_dir,
            env=env,
        )

    async def ready(self, timeout: float = 30.0) -> None:
        """Wait until /readyz answers 200."""

        async def check() -> bool:
            if self.child is None or not self.child.alive():
                raise AssertionError(f"{self.name} exited:\n{self.log_text()[-3000:]}")
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"{self.url}/readyz") as response,
                ):
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(check, timeout=timeout, interval=0.1)


def external_proxy(
    name: str, port: int, max_leases: int = 1, attributes: dict[str, str] | None = None
) -> dict[str, Any]:
    """An External Proxy at 127.0.0.1:port."""
    return {
        "apiVersion": PROXIES.api_version,
        "kind": "Proxy",
        "metadata": {"name": name},
        "spec": {
            "mode": "External",
            "endpoint": {"host": "127.0.0.1", "port": port},
            "maxLeases": max_leases,
            "attributes": attributes or {},
        },
    }


async def report_healthy(kube: KubeClient, namespace: str, name: str, latency: int) -> None:
    """Write the Healthy condition and latency into a Proxy's status, as the health pump does."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.patch(
        proxy_path(namespace, name) + "/status",
        {
            "status": {
                "latencyMillis": latency,
                "conditions": [
                    {
                        "type": "Healthy",
                        "status": "True",
                        "reason": "ProbeSucceeded",
                        "message": "",
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )
